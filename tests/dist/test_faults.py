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


def start_ranks(tmp_path, n, timeout_s, strategy="stanza", global_batch=8, extra=None, started=None):
    """n ranks started by hand; returns once training has started: by default every rank has
    written a checkpoint, or `started()` says so (with `extra` arguments that replace the
    checkpoints, such as replayed compute)."""
    port, procs = free_port(), []
    args = extra if extra is not None else ["--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "20"]
    for r in range(n):
        env = rank_env()
        env.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "stanza_core.train", "--strategy", strategy, "--model", "tiny_cnn",
             "--image-size", "32", "--global-batch", str(global_batch), "--steps", "100000", "--quiet", "--timeout-s",
             str(timeout_s), *args, "--device", "cpu"],
            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True))
    started = started or (lambda: (tmp_path / "ck" / "latest").exists())  # every rank has saved (collective)
    deadline = time.time() + 150  # generous: a loaded 2-core machine starts 3 ranks slowly
    while not started():
        assert time.time() < deadline, "training never started"
        assert all(p.poll() is None for p in procs), [p.stderr.read() for p in procs if p.poll() is not None]
        time.sleep(0.2)
    return procs


def survivors_fail_in_one_line(survivors, t0: float, within: float):
    """Every survivor exits non-zero within `within` seconds of t0 with at most one line on stderr,
    an `error: rank ...` line."""
    for p in survivors:
        p.wait(timeout=max(1.0, within + t0 - time.time()))
    assert time.time() - t0 < within
    for p in survivors:
        err = p.stderr.read()
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert p.returncode not in (0, None) and p.returncode > 0, (p.returncode, err[-2000:])
        assert len(lines) <= 1, err[-3000:]
        assert all(ln.startswith("error: rank ") for ln in lines), err[-2000:]


def kill_rank_1_and_judge(procs, within: float):
    """SIGKILL rank 1 (a CONV worker, not rank 0 which hosts the store), then judge ranks 0 and 2
    (survivors_fail_in_one_line); every rank left is ended afterwards."""
    os.kill(procs[1].pid, signal.SIGKILL)
    try:
        survivors_fail_in_one_line([procs[0], procs[2]], time.time(), within)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


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


@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", ["stanza", "ps", "ddp"])
def test_killed_conv_worker_every_survivor_one_line(tmp_path, strategy):
    """Kill CONV worker 1 (a data worker under ps/ddp; not rank 0, which also hosts the store):
    every survivor, whatever its role, exits non-zero within the timeout with one line on stderr."""
    timeout_s, within = 30, 45
    procs = start_ranks(tmp_path, 3, timeout_s, strategy, global_batch=6)
    kill_rank_1_and_judge(procs, within)


@pytest.mark.timeout(300)
def test_a_killed_worker_of_a_payload_scaled_replay_leaves_every_survivor_one_line(tmp_path):
    """Replayed compute with payload scaling (F = 8: 1/8 of each message crosses): a CONV worker
    killed mid-run makes every survivor exit non-zero within the timeout with one line, as an
    unscaled run does. Rank 0's step log (--log-csv) says training has started."""
    timeout_s, within, log = 30, 45, tmp_path / "steps.csv"
    procs = start_ranks(tmp_path, 3, timeout_s, extra=["--compute", "replay", "--replay-device", "v100",
                                                       "--dilation", "20", "--payload-scale", "8", "--log-csv", str(log)],
                        started=lambda: log.exists() and len(log.read_text().splitlines()) >= 3)  # header, 2 steps
    kill_rank_1_and_judge(procs, within)


def test_a_rank_that_never_starts_is_one_line_after_the_join_timeout(tmp_path):
    """Two of three ranks start; the third never does. Both wait for the process group as long as
    failures.join_timeout_s says (the peer timeout stretched by the local ranks per core), then
    exit 1 with one line naming the group that did not form, never a traceback or a hang."""
    from stanza_core.comm.failures import join_timeout_s

    timeout_s, port, procs = 4.0, free_port(), []
    join_s = join_timeout_s(timeout_s, 3, len(os.sched_getaffinity(0)))
    for r in range(2):
        env = rank_env()
        env.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="3", LOCAL_WORLD_SIZE="3", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "stanza_core.train", "--strategy", "stanza", "--model", "tiny_cnn", "--image-size",
             "32", "--global-batch", "8", "--steps", "2", "--quiet", "--timeout-s", str(timeout_s), "--device", "cpu"],
            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True))
    t0 = time.time()
    try:
        errs = [p.communicate(timeout=join_s + 90)[1] for p in procs]
        elapsed = time.time() - t0
        for p, err in zip(procs, errs):
            lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[W")]  # c10d's socket warnings
            assert p.returncode == 1, err[-2000:]
            assert len(lines) == 1 and lines[0].startswith("error: rank "), err[-2000:]
            assert f"the process group of 3 ranks did not form within {join_s:.0f} s" in lines[0], lines[0]
        assert elapsed >= join_s  # waited the whole join window, start-up included
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
