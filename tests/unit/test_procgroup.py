"""procgroup ends a command's whole process tree, also the children that took a session of their
own (as torchrun's ranks do) and ignore SIGTERM, on a timeout and on an interrupt in the caller."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from stanza_core import procgroup

# A parent like torchrun: one child in its own session (that ignores SIGTERM), one in the parent's
# group; each process writes its PID to the folder in argv[1], the parent says "up", then all
# wait forever.
TREE = r"""
import os, signal, subprocess, sys, time
child = "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
        "open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close(); time.sleep(1000)"
subprocess.Popen([sys.executable, "-c", child, sys.argv[1]], start_new_session=True)
subprocess.Popen([sys.executable, "-c", child, sys.argv[1]])
open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()
print("up", flush=True)
time.sleep(1000)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def check_all_ended(folder):
    pids = [int(f) for f in os.listdir(folder)]
    try:
        assert len(pids) == 3, f"only {len(pids)} of 3 processes started"
        deadline = time.monotonic() + 2
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if alive(p)], "processes outlived the command"
    finally:
        for p in pids:
            if alive(p):
                os.kill(p, signal.SIGKILL)


pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="descendants are found in /proc (Linux)")


def test_timeout_ends_the_whole_tree(tmp_path):
    # 3 s: three bare Pythons start in well under a second (check_all_ended checks they did)
    with pytest.raises(subprocess.TimeoutExpired) as err:
        procgroup.run([sys.executable, "-c", TREE, str(tmp_path)],
                      timeout_s=3, grace_s=0.5, capture_output=True, text=True)
    check_all_ended(tmp_path)
    assert err.value.stdout == "up\n"  # what it wrote before the timeout comes back, as from subprocess.run


def test_interrupt_in_the_caller_ends_the_whole_tree(tmp_path):
    def when_started(*_):  # a Ctrl-C in the caller once all three processes are up
        if len(os.listdir(tmp_path)) >= 3:
            signal.setitimer(signal.ITIMER_REAL, 0)
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, when_started)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1, 0.1)
        with pytest.raises(KeyboardInterrupt):
            procgroup.run([sys.executable, "-c", TREE, str(tmp_path)], timeout_s=30, grace_s=0.5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    check_all_ended(tmp_path)


def test_clean_exit_returns_like_subprocess_run():
    proc = procgroup.run([sys.executable, "-c", "print('hi')"], timeout_s=30, capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (0, "hi\n")
