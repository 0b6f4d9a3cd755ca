"""Run a command in a process group of its own, and end the whole job when we stop waiting.

Why: torchrun is a parent of one process per rank. ``subprocess.run(cmd, timeout=...)`` kills
only the process it started, torchrun, so on a timeout the ranks live on as orphans (parent
PID 1), holding ports and burning CPU until someone finds them. Here the command starts a new
session (``start_new_session=True``: its own process group, and a Ctrl-C in the terminal reaches
only the caller), and on a timeout, an error or an interrupt in the caller the job as a whole
gets SIGTERM, then after a short grace SIGKILL. "The job as a whole" is the leader's group and
the group of every process descended from it: torchrun starts each rank in a session of its own
(so that it can end a rank with its children), out of reach of a signal to torchrun's group.
Descendants are found by psutil (Linux, macOS and the BSDs alike).

    proc = run(cmd, timeout_s=60, capture_output=True, text=True)   # like subprocess.run
    p = start(cmd, stdout=f);  ...;  end(p)                         # processes you poll yourself
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil

GRACE_S = 5.0  # between SIGTERM and SIGKILL: torchrun stops its ranks on SIGTERM and then exits


def start(cmd: list[str], **popen_kwargs) -> subprocess.Popen:
    """Popen(cmd) as the leader of a new session (so of a new process group: pgid == pid)."""
    return subprocess.Popen(cmd, start_new_session=True, **popen_kwargs)


def _job_groups(leaders: list[int]) -> set[int]:
    """The process groups of `leaders` (not yet reaped, so their PIDs are still theirs) and of
    all their descendants (psutil walks the tree)."""
    groups = set(leaders)
    for pid in leaders:
        try:
            descendants = psutil.Process(pid).children(recursive=True)
        except psutil.Error:  # gone meanwhile
            continue
        for child in descendants:
            try:
                groups.add(os.getpgid(child.pid))
            except OSError:  # gone meanwhile
                pass
    return groups


def _alive_in(groups: set[int]) -> bool:
    """Whether any process that has not exited (zombies have) is still in one of `groups`."""
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) in groups:
                return True
        except (OSError, psutil.Error):  # gone meanwhile
            continue
    return False


def _signal_groups(groups: set[int], sig: int) -> None:
    for g in groups:
        try:
            os.killpg(g, sig)
        except (ProcessLookupError, PermissionError):  # the group is empty already
            pass


def end(*procs: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """End the jobs led by `procs` (from start): SIGTERM to their groups and their descendants'
    groups, up to `grace_s` for all of those to exit, then SIGKILL to the same groups; leaders
    reaped. Safe on finished processes: a group already empty is left alone."""
    # walk the tree before any leader is reaped: until then its children still point to it
    groups = {p.pid for p in procs} | _job_groups([p.pid for p in procs if p.returncode is None])
    _signal_groups(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and (any(p.poll() is None for p in procs) or _alive_in(groups)):
        time.sleep(0.05)
    groups |= _job_groups([p.pid for p in procs if p.poll() is None])  # started meanwhile
    _signal_groups(groups, signal.SIGKILL)
    for p in procs:
        p.wait()


def run(cmd: list[str], *, timeout_s: float | None = None, capture_output: bool = False,
        grace_s: float = GRACE_S, **popen_kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, timeout=timeout_s, ...) with the command in its own process group.

    However the wait ends (exit, timeout, an exception or KeyboardInterrupt in the caller), the
    group is ended before this returns or raises; on the timeout subprocess.TimeoutExpired is
    raised, with the output captured up to then, as subprocess.run does."""
    if capture_output:
        popen_kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc = start(cmd, **popen_kwargs)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        end(proc, grace_s=grace_s)
        try:  # every writer is gone now, so the pipes reach their end at once
            e.output, e.stderr = proc.communicate(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        raise
    except BaseException:
        end(proc, grace_s=grace_s)
        raise
    end(proc, grace_s=grace_s)  # a clean exit: only strays left in the leader's own group, if any
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
