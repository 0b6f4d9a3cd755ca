"""Multi-process checks of the GPU path's host-side logic, on CPU/gloo.

* Staged P2P (the path several ranks sharing one GPU take under --backend gloo: every P2P
  tensor goes through a host copy, receives copy back after completion), forced on CPU
  tensors: still equal to `local` and byte-exact, with stanza's per-pair process groups.
* A config error each rank finds for itself (the checkpoint folder it reads: on several
  machines it need not be shared) is printed by each of them, once, prefixed with its rank."""
from __future__ import annotations

import subprocess
import sys

import pytest

from stanza_core.comm import STAGED_P2P_ENV

from dist_launch import ROOT, assert_same_params, rank_env, train
from test_exactness import check_traffic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.mark.parametrize("strategy,n,extra", [("stanza", 5, ["--fc-workers", "2"]), ("ps", 3, [])])
def test_staged_p2p_equals_local_and_counts_the_same_bytes(tmp_path, monkeypatch, local_run, strategy, n, extra):
    common = ["--model", "tiny_cnn", "--image-size", "32", "--global-batch", "24", "--steps", "4", "--lr", "0.05"]
    _, ref, _ = local_run(*common)  # one local run for both cases (and test_toy_strategy.py's)
    monkeypatch.setenv(STAGED_P2P_ENV, "1")
    metrics, state, _ = train(tmp_path, strategy, n, "--strategy", strategy, *common, *extra)
    assert_same_params(state, ref)
    check_traffic(metrics, "tiny_cnn", 32, strategy, n, 24, 2 if strategy == "stanza" else 1)


def _missing_checkpoint_line(r: int) -> str:
    return f"error: rank {r}: --resume: no checkpoint in "


def test_each_rank_prints_its_own_checkpoint_error_once(tmp_path):
    """Both ranks of a 2-rank job, started as torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK)
    but as two independent processes: each finds the checkpoint missing itself and prints that, once.
    (Under torchrun the first rank to exit makes torchrun stop the other, which on a loaded
    machine can be before it printed: the launcher case below.)"""
    args = [sys.executable, "-m", "stanza_core.train", "--strategy", "ddp", "--global-batch", "4", "--device", "cpu",
            "--quiet", "--checkpoint-dir", str(tmp_path / "none"), "--resume"]
    env = rank_env()
    env.update(WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")  # never reached
    procs = [subprocess.Popen(args, cwd=ROOT, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    for r, proc in enumerate(procs):
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 2, err[-2000:]
        ours = [ln for ln in err.splitlines() if ln.startswith("error: ")]
        assert len(ours) == 1 and ours[0].startswith(_missing_checkpoint_line(r)), err[-2000:]


def test_under_torchrun_no_rank_prints_an_error_twice_or_another_ranks(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m",
           "stanza_core.train", "--strategy", "ddp", "--global-batch", "4", "--device", "cpu", "--quiet",
           "--checkpoint-dir", str(tmp_path / "none"), "--resume"]
    proc = subprocess.run(cmd, cwd=ROOT, env=rank_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    ours = [ln for ln in proc.stderr.splitlines() if "error: rank" in ln]
    assert ours, proc.stderr[-2000:]  # the first rank to fail always prints
    for ln in ours:  # each line is one rank's own, and no rank prints twice
        assert any(_missing_checkpoint_line(r) in ln for r in (0, 1)), ln
    assert len(ours) == len(set(ours)), proc.stderr[-2000:]
