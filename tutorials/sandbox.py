"""A jail for one student's code: Linux namespaces made with util-linux `unshare`, no Docker, no root.

    argv = sandbox.command([python, "-c", code], expose=[repo / "stanza_core"])
    subprocess.Popen(argv, ...)        # the program runs jailed; its stdin/stdout are the pipe to it

What the jailed program sees: a fresh root file system (a tmpfs) holding, read-only, the system
(/usr, /bin, /lib*, /etc), the Python environment it runs in (its prefix and every sys.path
folder outside the repository), and only the repository paths passed in `expose` (an entry
`(host_path, jail_path)` shows a host folder at another path: the grader shows a copy of the
workbench without an exercise's references where the package is); a private,
writable /tmp and home; /dev with null, zero, random, urandom only; /proc of its own process
namespace. It does not see the course folder (gradebook, instructor's notebooks, submissions),
the instructor's kit (tutorials/labs/source), the user's home or any other submission's jail.
It runs in its own user, mount, PID, IPC and network namespaces: it has no network but its own
loopback (gloo ranks still talk over 127.0.0.1), it cannot signal or see processes outside, and
before the program starts every capability is dropped (empty bounding set, no-new-privileges,
SECBIT_NOROOT): the mounts cannot be undone from inside. Every process of it is limited to 1024
tasks of the jail, 6 GiB of private memory, 1 GiB files and no core file. Ending the `unshare` process ends every
process of the jail (--kill-child; the jailed program is PID 1 of its namespace).

What it needs from the machine: Linux with unprivileged user namespaces (the default on Debian
11+, Ubuntu, Fedora; `sysctl kernel.unprivileged_userns_clone=1` on older Debian kernels;
Ubuntu 24.04's AppArmor restriction is lifted with
`sysctl kernel.apparmor_restrict_unprivileged_userns=0`) and util-linux's `unshare` (in every
Debian/Ubuntu base system). `available()` says whether it works here, and why not.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
DEVICES = ("null", "zero", "random", "urandom", "full")
INIT = Path(__file__).with_name("_jail_init.py")


def _python_paths(repo: Path) -> list[str]:
    """The interpreter's own folders and sys.path folders outside the repository."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).resolve().parent)}
    for p in sys.path:  # site folders only: not the caller's script folder or working directory
        if p and Path(p).is_dir() and Path(p).name in ("site-packages", "dist-packages") \
                and not Path(p).resolve().is_relative_to(repo):
            paths.add(str(Path(p).resolve()))
    out = []
    for p in sorted(paths, key=len):  # a folder inside one already shown adds nothing
        if not any(Path(p).is_relative_to(q) for q in out):
            out.append(p)
    return out


def _bind(e) -> "str | list[str]":
    if isinstance(e, (tuple, list)):
        return [str(Path(e[0]).resolve()), str(Path(e[1]).resolve())]
    return str(Path(e).resolve())


def shown(repo: Path, expose: list) -> list:
    """Every host path the jail shows (read-only): a path, or [host path, path in the jail]."""
    return [p for p in SYSTEM if os.path.exists(p)] + _python_paths(repo) + [_bind(e) for e in expose]


def check_hidden(path: Path, repo: Path, expose: list[Path]) -> None:
    """Raise ValueError if `path` (a course folder, the instructor's kit) would be visible in the jail."""
    path = path.resolve()
    for p in shown(repo, expose):
        p = p[0] if isinstance(p, list) else p
        if path.is_relative_to(p):
            raise ValueError(f"{path} is inside {p}, which the grading jail shows the student's code: "
                             "keep the course folder and the repository's kit outside the Python environment")


def command(argv: list[str], repo: Path, expose: list, env: dict | None = None,
            root: str | None = None) -> list[str]:
    """The command line that runs `argv` jailed (see the module's docstring). `root`: an empty
    folder the caller made and removes afterwards, where the jail's root is mounted (the mount is
    seen only inside the jail); without it the jail makes one in /tmp and leaves it there, empty."""
    spec = {"binds": shown(repo, expose), "devices": list(DEVICES), "argv": argv, "root": root,
            "env": env or {"PATH": "/usr/bin:/bin", "HOME": "/home/student", "LANG": "C.UTF-8"},
            "cwd": "/home/student"}
    return [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork",
            "--kill-child", "--ipc", "--net", "--uts", sys.executable, "-I", "-S", str(INIT), json.dumps(spec)]


@functools.cache
def available() -> str | None:
    """None if a jail can be made on this machine, else a one-line reason."""
    if sys.platform != "linux":
        return f"the grading jail needs Linux namespaces ({sys.platform} has none)"
    if not shutil.which("unshare"):
        return "the grading jail needs util-linux's `unshare` (apt-get install util-linux)"
    probe = "import os, socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(os.getpid(), os.path.exists('/home'))"
    import tempfile
    root = tempfile.mkdtemp(prefix="stanza-jail-")
    try:
        done = subprocess.run(command([sys.executable, "-I", "-S", "-c", probe], Path("/nonexistent"), [], root=root),
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"the grading jail could not be started ({type(e).__name__}: {e})"
    finally:
        os.rmdir(root)
    if done.returncode != 0 or done.stdout.split() != ["1", "True"]:
        tail = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return (f"the grading jail could not be made here ({tail[:200]}): unprivileged user namespaces must be "
                "enabled (sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu 24.04 "
                "kernel.apparmor_restrict_unprivileged_userns=0)")
    return None
