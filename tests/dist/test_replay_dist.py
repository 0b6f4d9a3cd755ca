"""Replayed compute on real processes: each strategy completes, and the bytes its counters
saw equal perf.expected_bytes (replay removes arithmetic, never traffic), for a model with
batch norm (global statistics: their allreduces are replayed too) and dropout."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stanza_core.anatomy import profile_model
from stanza_core.perf import expected_bytes

from dist_launch import ROOT, rank_env
from test_byo import bn_net

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.mark.parametrize("strategy,k", [("ddp", 0), ("ps", 0), ("stanza", 1)])
def test_replay_run_moves_the_expected_bytes(tmp_path, strategy, k):
    n, g = 3, 12
    metrics = tmp_path / "m.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
           "-m", "stanza_core.train", "--strategy", strategy, "--model", "test_byo:bn_net", "--image-size", "16",
           "--global-batch", str(g),
           "--steps", "3", "--compute", "replay", "--replay-device", "v100", "--dilation", "20",
           "--device", "cpu", "--quiet", "--metrics", str(metrics), *(["--fc-workers", str(k)] if k else [])]
    proc = subprocess.run(cmd, cwd=ROOT, env=rank_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads(metrics.read_text())
    assert m["compute"] == "replay" and m["replay"]["dilation"] == 20
    assert all(w > 0 for w in m["replay"]["wait_s_per_rank"])  # every rank replayed compute
    b = g // (n - k if k else n)
    want = expected_bytes(profile_model(bn_net(10), (3, 16, 16), b), strategy, n, k or None, g)
    assert all(w["sent"]["bn_stats"] > 0 for w in want if w["role"] != "fc_worker")
    got = [{"rank": r["rank"], "role": r["role"], "sent": r["sent"], "recv": r["recv"]} for r in m["ranks"]]
    assert [{c: v for c, v in w["sent"].items() if v} for w in want] == [r["sent"] for r in got]
    assert [{c: v for c, v in w["recv"].items() if v} for w in want] == [r["recv"] for r in got]
