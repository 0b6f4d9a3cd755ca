"""A lean replayed rank moves what the real run moves: for each strategy (ddp, ps colocated, ps
with overlapped push, ps with a dedicated server, stanza k = 1 and k = 2) on 4 ranks, a replayed
run and a real run of the same configuration send and receive the same bytes per rank and per
category, equal to perf.expected_bytes, and launch the same allreduce buckets (count, sizes,
order) and the same point-to-point messages (peer, category, size), step by step.

The reference is the real run: replay holds no parameter values, no optimizer state and copies
no gradient (replay.py), so what it must keep is exactly what a real step puts on the network.
Every job runs in one torchrun launch (jobs_driver.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from stanza_core.anatomy import profile_model
from stanza_core.models import get_model
from stanza_core.perf import expected_bytes
from stanza_core.variant import Variant

from dist_launch import ROOT, rank_env

pytestmark = [pytest.mark.timeout(300)]

N, G, STEPS = 4, 12, 3  # step 1: DDP rebuilds its buckets; step 2: gradients already in them
CONFIGS = {  # name: (strategy, k, ps_servers, extra flags)
    "ddp": ("ddp", 0, 0, []),
    "ps": ("ps", 0, 0, []),
    "ps-overlap": ("ps", 0, 0, ["--ps-overlap"]),
    "ps-dedicated": ("ps", 0, 1, ["--ps-servers", "1"]),
    "stanza1": ("stanza", 1, 0, ["--fc-workers", "1"]),
    "stanza2": ("stanza", 2, 0, ["--fc-workers", "2"]),
}
COMM = ("send", "recv", "allreduce")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lean")
    jobs, out = [], {}
    for name, (strategy, _, _, extra) in CONFIGS.items():
        for mode in ("real", "replay"):
            path = tmp / f"{name}-{mode}.json"
            replay = ["--compute", "replay", "--replay-device", "v100", "--dilation", "1"] if mode == "replay" else []
            jobs.append(["--strategy", strategy, *extra, "--model", "cifar_alexnet", "--image-size", "32",
                         "--global-batch", str(G), "--steps", str(STEPS), "--bucket-mb", "0.5", "--timeline",
                         "--device", "cpu", "--quiet", "--metrics", str(path), *replay])
            out[name, mode] = path
    spec = tmp / "jobs.json"
    spec.write_text(json.dumps(jobs))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={N}",
           "tests/dist/jobs_driver.py", str(spec)]
    proc = subprocess.run(cmd, cwd=ROOT, env=rank_env(), capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {key: json.loads(path.read_text()) for key, path in out.items()}


def _messages(rank: dict, step: int) -> tuple[list, Counter]:
    """A rank's allreduces of one step in launch order, and its P2P messages (order-free: a
    server or FC worker takes arrivals as they come)."""
    events = [e for e in rank["timeline"] if e["step"] == step and e["event"] in COMM]
    buckets = [(e["category"], e["bytes"]) for e in events if e["event"] == "allreduce"]
    p2p = Counter((e["event"], e["category"], e["peer"], e["bytes"]) for e in events if e["event"] != "allreduce")
    return buckets, p2p


@pytest.mark.parametrize("name", CONFIGS)
def test_lean_replay_moves_the_real_runs_bytes_and_buckets(runs, name):
    strategy, k, servers, _ = CONFIGS[name]
    real, lean = runs[name, "real"], runs[name, "replay"]
    assert real["compute"] == "real" and lean["compute"] == "replay"
    b = G // (N - k - servers)
    want = expected_bytes(profile_model(get_model("cifar_alexnet", 10), (3, 32, 32), b), Variant(strategy, fc_workers=k or None, ps_servers=servers), N, global_batch=G)
    for run in (real, lean):
        assert [{c: v for c, v in w["sent"].items() if v} for w in want] == [r["sent"] for r in run["ranks"]]
        assert [{c: v for c, v in w["recv"].items() if v} for w in want] == [r["recv"] for r in run["ranks"]]
    n_buckets = 0
    for r_real, r_lean in zip(real["ranks"], lean["ranks"]):
        assert r_real["role"] == r_lean["role"]
        for step in range(STEPS):
            buckets, p2p = _messages(r_real, step)
            assert _messages(r_lean, step) == (buckets, p2p), (name, r_real["rank"], step)
            n_buckets = max(n_buckets, len(buckets))
    if strategy != "ps":  # allreduced gradients: several buckets, so their order is tested
        assert n_buckets >= 3, n_buckets
