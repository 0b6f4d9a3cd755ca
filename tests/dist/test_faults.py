"""A dead or frozen peer makes the survivors exit non-zero with a clear message, never hang.

Ranks are started by hand (not torchrun, whose agent would tear the job down itself), so the
test sees what the survivors do on their own."""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from dist_launch import ROOT, rank_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(tmp_path, n, timeout_s):
    port, procs = free_port(), []
    for r in range(n):
        env = rank_env()
        env.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "stanza_core.train", "--strategy", "stanza", "--model", "tiny_cnn",
             "--image-size", "32", "--global-batch", "8", "--steps", "100000", "--quiet", "--timeout-s",
             str(timeout_s), "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "20"],
            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True))
    deadline = time.time() + 90
    while not (tmp_path / "ck").exists() or len(list((tmp_path / "ck").glob("*.pt"))) < n:
        assert time.time() < deadline, "training never started"
        assert all(p.poll() is None for p in procs), [p.stderr.read() for p in procs if p.poll() is not None]
        time.sleep(0.2)
    return procs


@pytest.mark.parametrize("sig,timeout_s,within", [(signal.SIGKILL, 60, 30), (signal.SIGSTOP, 8, 45)],
                         ids=["killed", "frozen"])
def test_survivors_fail_clearly(tmp_path, sig, timeout_s, within):
    procs = start_ranks(tmp_path, 3, timeout_s)
    victim = procs[2]  # the FC worker
    os.kill(victim.pid, sig)
    t0 = time.time()
    try:
        for p in procs[:2]:
            p.wait(timeout=within + t0 - time.time() if within + t0 > time.time() else 1)
        elapsed = time.time() - t0
        for p in procs[:2]:
            err = p.stderr.read()
            assert p.returncode == 1, err[-2000:]
            last = err.strip().splitlines()[-1]
            assert last.startswith("error: rank ") and "(step " in last, err[-2000:]
        assert elapsed < within
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
