"""The grading jail (tutorials.sandbox): what a student's process can and cannot reach. One jailed
Python probes the file system, its capabilities, the network and the host's processes."""
import json
import os
import socket
import subprocess
import sys

import pytest

from tutorials import autograde, sandbox

PROBE = r"""
import json, os, socket, sys
out = {"uid": os.getuid(), "root": sorted(os.listdir("/"))}
for name, path in json.loads(sys.argv[1]).items():
    out[name] = os.path.exists(path)
for name, path in (("write_repo", sys.argv[2] + "/stanza_core/x"), ("write_etc", "/etc/x"), ("write_tmp", "/tmp/x")):
    try:
        open(path, "w").close()
        out[name] = True
    except OSError:
        out[name] = False
out["caps"] = open("/proc/self/status").read().split("CapEff:")[1].split()[0]
import resource
out["limits"] = [resource.getrlimit(r)[1] for r in (resource.RLIMIT_NPROC, resource.RLIMIT_DATA, resource.RLIMIT_CORE)]
s = socket.socket()
try:
    s.settimeout(2)
    s.connect(("127.0.0.1", int(sys.argv[3])))
    out["host_port"] = True
except OSError:
    out["host_port"] = False
try:
    os.kill(int(sys.argv[4]), 0)
    out["host_pid"] = True
except OSError:
    out["host_pid"] = False
import stanza_core
out["stanza_core"] = stanza_core.__file__
print(json.dumps(out))
"""


def test_the_jail_hides_the_course_and_holds_no_capability(tmp_path):
    if why := sandbox.available():
        (pytest.skip if sys.platform != "linux" else pytest.fail)(why)
    course_dir = tmp_path / "term"
    course_dir.mkdir()
    (course_dir / "gradebook.db").write_text("grades")
    repo = autograde.REPO_ROOT
    hidden = {"course": str(course_dir / "gradebook.db"), "kit": str(repo / "tutorials" / "labs" / "source"),
              "tests": str(repo / "tests" / "tutorials" / "test_sandbox.py"), "docs": str(repo / "docs")}
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    code = f"import sys; sys.path.insert(0, {str(repo)!r}); exec({PROBE!r})"
    argv = sandbox.command([sys.executable, "-I", "-c", code, json.dumps(hidden), str(repo),
                            str(listener.getsockname()[1]), str(os.getpid())], repo, autograde.EXPOSE,
                           root=str(tmp_path / "jail"))
    (tmp_path / "jail").mkdir()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    listener.close()
    assert done.returncode == 0, done.stderr[-500:]
    out = json.loads(done.stdout)
    assert out["stanza_core"].startswith(str(repo / "stanza_core"))  # the library is there
    assert not any(out[k] for k in hidden), out  # the course, the kit, the tests, the docs are not
    assert (out["write_repo"], out["write_etc"], out["write_tmp"]) == (False, False, True)
    assert out["caps"] == "0000000000000000" and not out["host_port"] and not out["host_pid"], out
    assert out["limits"][0] <= 1024 and out["limits"][1] <= 6 << 30 and out["limits"][2] == 0, out
    with pytest.raises(ValueError, match="inside"):  # a course folder the jail would show is refused
        sandbox.check_hidden(repo / "stanza_core" / "term", repo, autograde.EXPOSE)
