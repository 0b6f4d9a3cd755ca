"""No process of a job outlives it: a job past its timeout is ended as a whole (torchrun and every
rank), not just its torchrun (which would leave the ranks orphaned, parent PID 1).

The job is a real `run_job` of `stanza_core.train` whose model factory (below; the ranks import
this module by name) writes the rank's PID and its torchrun's PID into a folder, then hangs. Rank 1
also ignores SIGTERM, so the launcher's SIGKILL after the grace period is exercised too.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from stanza_core import procgroup
from stanza_core.launch import JobError, run_job

PID_DIR_ENV = "STANZA_TEST_PID_DIR"
HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 15  # ranks start in ~6 s on a quiet 2-core machine; they must be running when it strikes


def hanging_cnn(num_classes: int = 10):
    """A model factory that never returns: it records who called it, then sleeps."""
    folder = Path(os.environ[PID_DIR_ENV])
    rank = os.environ.get("RANK", "0")
    if rank == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    (folder / f"rank{rank}.pids").write_text(f"{os.getpid()} {os.getppid()}")
    while True:
        time.sleep(60)


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (a dead process its parent has yet to reap)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def recorded(folder: Path) -> tuple[int, set[int]]:
    """(how many ranks wrote their PIDs, every PID written: ranks and their torchrun)."""
    files = list(folder.glob("rank*.pids"))
    return len(files), {int(p) for f in files for p in f.read_text().split()}


@pytest.mark.slow
def test_timed_out_job_leaves_no_process(tmp_path, monkeypatch):
    monkeypatch.setenv(PID_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", HERE)  # run_job puts the repository first
    t0 = time.monotonic()
    try:
        with pytest.raises(JobError) as err:
            run_job(nodes=2, strategy="ddp", model="test_orphans:hanging_cnn", global_batch=4, image_size=32,
                    steps=1000, device="cpu", workdir=str(tmp_path / "job"), timeout_s=TIMEOUT_S)
        took = time.monotonic() - t0
        ranks, pids = recorded(tmp_path)
        assert ranks == 2, f"{ranks} of 2 ranks started within {TIMEOUT_S} s (machine loaded?)"
        assert str(err.value) == f"ddp-test_orphans_hanging_cnn-n2-k0: timed out after {TIMEOUT_S} s; its processes were ended"
        assert took < TIMEOUT_S + procgroup.GRACE_S + 5  # one grace period (rank 1 ignores SIGTERM), no more
        deadline = time.monotonic() + 2
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if alive(p)], "processes of the job outlived it"
    finally:  # never leave a hung rank behind, whatever failed above
        for p in recorded(tmp_path)[1]:
            if alive(p):
                os.kill(p, signal.SIGKILL)
