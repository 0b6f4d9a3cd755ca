"""Replayed compute on real processes: each strategy completes, and the bytes its counters
saw equal perf.expected_bytes (replay removes arithmetic, never traffic), for a model with
batch norm (global statistics: their allreduces are replayed too) and dropout; and replayed
ranks meet between steps, as in a real run."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from stanza_core.anatomy import profile_model
from stanza_core.perf import expected_bytes
from stanza_core.variant import Variant

from dist_launch import ROOT, grouped_runs, rank_env
from test_byo import bn_net

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


CASES = [("ddp", 0), ("ps", 0), ("stanza", 1)]
N, G, F = 3, 12, 8


@pytest.fixture(scope="module")
def scaled_runs(tmp_path_factory):
    """The three replayed runs with payload scaling, in one torchrun launch (dist_launch.grouped_runs)."""
    return grouped_runs(tmp_path_factory, {s: (N, [
        "--strategy", s, "--model", "test_byo:bn_net", "--image-size", "16", "--global-batch", str(G), "--steps", "3",
        "--dilation", "20", "--payload-scale", str(F), *(["--fc-workers", str(k)] if k else []),
        "--compute", "replay", "--replay-device", "v100"]) for s, k in CASES}, save=False)


@pytest.mark.parametrize("strategy,k", CASES)
def test_replay_run_moves_the_expected_bytes(scaled_runs, strategy, k):
    """With payload scaling (F = 8): the counters still report the logical bytes, equal to the
    model's, and what crossed the wire is 1/F of them (each message rounded up to whole elements;
    the labels, integers, whole)."""
    n, g, f = N, G, F
    m, _ = scaled_runs(strategy)
    assert m["compute"] == "replay" and m["replay"]["dilation"] == 20 and m["config"]["payload_scale"] == f
    for r in m["ranks"]:
        labels = r["sent"].get("labels", 0)
        scaled = (r["bytes_sent"] - labels) / f
        # at most one element (4 bytes, x 2 for an allreduce's two ring passes) more per message
        assert scaled + labels <= r["wire_bytes_sent"] <= scaled + labels + 8 * m["messages"]["per_step"], r
    assert m["wire_bytes_per_step"] < m["bytes_per_step"] / 4
    assert all(w > 0 for w in m["replay"]["wait_s_per_rank"])  # every rank replayed compute
    b = g // (n - k if k else n)
    want = expected_bytes(profile_model(bn_net(10), (3, 16, 16), b), Variant(strategy, fc_workers=k or None), n, global_batch=g)
    assert all(w["sent"]["bn_stats"] > 0 for w in want if w["role"] != "fc_worker")
    got = [{"rank": r["rank"], "role": r["role"], "sent": r["sent"], "recv": r["recv"]} for r in m["ranks"]]
    assert [{c: v for c, v in w["sent"].items() if v} for w in want] == [r["sent"] for r in got]
    assert [{c: v for c, v in w["recv"].items() if v} for w in want] == [r["recv"] for r in got]


def test_replayed_ranks_meet_between_steps(tmp_path):
    """Stanza k = 2 (2 CONV + 2 FC workers), replayed with waits long enough to dominate. An FC
    worker's part of a step ends before the CONV workers' backward; only the step's closing loss
    allreduce (run with a zero value in replay) holds it back until every rank has finished the
    step. Without it the FC workers start step j+1 about a CONV backward early (~30 % of a step
    here), and replay measures a faster step than real compute would. D = 1500 makes a step ~2.2 s
    (V100 step ~1.45 ms): the skew tolerance below (0.2 of a step, ~0.43 s) is still ~100x the
    skew of a synchronised run (2-5 ms measured at D = 3000) and under the ~0.55 s an
    unsynchronised FC worker would lead by."""
    steps = 4
    m = _replay(tmp_path, 4, "--strategy", "stanza", "--fc-workers", "2", "--model", "cifar_alexnet",
                "--image-size", "32", "--global-batch", "8", "--steps", str(steps), "--dilation", "1500")
    starts = [r["step_start_s"] for r in m["ranks"]]
    ends = [r["step_end_s"] for r in m["ranks"]]
    assert all(len(s) == len(e) == steps for s, e in zip(starts, ends))
    assert min(s[0] for s in starts) == 0.0  # one time axis: the first rank's first step starts at 0
    # causal, so exact on the host's monotonic clock: nobody starts step j+1 before everyone ended step j
    for j in range(steps - 1):
        last_end = max(e[j] for e in ends)
        assert all(s[j + 1] >= last_end for s in starts), (j, last_end, [s[j + 1] for s in starts])
    # and the ranks start each step together: apart by a data load and the allreduce's completion
    # (milliseconds), well under the ~30 % of a step by which an unsynchronised FC worker leads
    tol = 0.2 * m["step_time_median_s"]
    for j in range(steps):
        skew = max(s[j] for s in starts) - min(s[j] for s in starts)
        assert skew <= tol, (j, skew, tol)


def _replay(tmp_path, n: int, *args: str) -> dict:
    """One replayed run (V100 table) of n ranks on loopback; its metrics."""
    metrics = tmp_path / "m.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
           "-m", "stanza_core.train", *args, "--compute", "replay", "--replay-device", "v100",
           "--device", "cpu", "--quiet", "--metrics", str(metrics)]
    proc = subprocess.run(cmd, cwd=ROOT, env=rank_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(metrics.read_text())


def test_engine_seconds_are_a_replay_run_at_d_1_on_loopback():
    """experiments.planner.engine_seconds for real: a replayed job at D = 1 on local processes,
    its median step less the model's step (0 here: the whole median step comes back)."""
    from stanza_core.runs.plan import engine_seconds
    from stanza_core.runs.runconfig import RunConfig

    cfg = RunConfig(model="tiny_cnn", image_size=16, num_classes=10, nodes=2, strategy="ddp", global_batch=4,
                    steps=2, link_mbit=1000.0, compute="replay", replay_device="v100", dilation=50.0)
    e = engine_seconds(cfg, 0.0, steps=3, timeout_s=300)
    # tiny_cnn's V100 step is microseconds; gloo on loopback and Python take milliseconds: the run
    # happened and its median step came back, well under a second on any machine that runs this suite
    assert 0.0 < e < 2.0
    with pytest.raises(ValueError, match="^engine_seconds measures replayed runs, got compute 'real'$"):
        engine_seconds(dataclasses.replace(cfg, compute="real", replay_device=None), 0.0)
