"""Stanza beyond the paper, on real gloo processes: hybrid FC workers and pipelined
micro-batches equal `local` (dropout on); with compression, counted bytes equal the model's.

Exactness tolerance as tests/dist/test_exactness.py (rtol 1e-5, atol 1e-6): the same per-sample
gradients summed in another order. Traffic: every rank's counted bytes per step, by category,
equal perf.expected_bytes (PowerSGD: the mean over the run's steps, since its first
POWERSGD_START steps run a vanilla allreduce).
"""
from __future__ import annotations

from fractions import Fraction

import pytest

from stanza_core.comm import POWERSGD_START
from stanza_core.perf import expected_bytes, named_profile
from stanza_core.variant import Variant

from dist_launch import assert_same_params, grouped_runs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

G, STEPS = 24, 4
COMMON = ["--model", "tiny_cnn", "--image-size", "32", "--global-batch", str(G), "--lr", "0.05"]


@pytest.fixture
def oracle(local_run):
    """The local run on these options (conftest.local_run): 4 steps, the run test_gpu_path_dist.py
    and test_toy_strategy.py compare with too, so one launch serves all three files."""
    return local_run(*COMMON, "--steps", str(STEPS))


CASES = [  # (N, extra args): a hybrid FC worker with M = 2; two FC workers, both hybrid, with M = 4
    (3, {"fc_workers": 1, "fc_conv_share": 0.25, "micro_batches": 2}),
    (4, {"fc_workers": 2, "fc_conv_share": 1 / 6, "micro_batches": 4}),
]


def _args(extra):
    out = []
    for k, v in extra.items():
        out += ["--" + k.replace("_", "-"), str(v)]
    return out


IDS = ["hybrid-k1-M2", "hybrid-k2-M4"]
COMPRESSED = {"fc_workers": 1, "fc_conv_share": 0.25, "boundary_dtype": "bf16"}  # and --grad-compression
COMPRESSED_STEPS = 4  # two vanilla PowerSGD steps, then two compressed ones


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every stanza run of this file, those with the same N in one torchrun launch
    (dist_launch.grouped_runs)."""
    return grouped_runs(tmp_path_factory, {
        **{i: (n, ["--strategy", "stanza", *COMMON, "--steps", str(STEPS), *_args(extra)])
           for i, (n, extra) in zip(IDS, CASES)},
        "powersgd": (3, ["--strategy", "stanza", *COMMON, "--steps", str(COMPRESSED_STEPS),
                         *_args({**COMPRESSED, "grad_compression": "powersgd"})])})


@pytest.mark.parametrize("n,extra", CASES, ids=IDS)
def test_hybrid_and_micro_batches_equal_local(request, runs, oracle, n, extra):
    ref_metrics, ref_state, _ = oracle
    metrics, state = runs(request.node.callspec.id)
    assert_same_params(state, ref_state)
    for mine, ref in zip(metrics["steps"], ref_metrics["steps"]):
        assert mine["loss"] == pytest.approx(ref["loss"], rel=1e-5)
    assert ref_metrics["steps"][0]["loss"] != ref_metrics["steps"][-1]["loss"]  # it did train
    # the hybrid FC workers computed CONV gradients and joined the CONV allreduce
    fc_rows = [r for r in metrics["ranks"] if r["role"] == "fc_worker"]
    assert fc_rows and all(r["sent"].get("conv_grads", 0) > 0 for r in fc_rows)
    want = expected_bytes(named_profile("tiny_cnn", 32, 10, G // (n - extra["fc_workers"])), Variant("stanza", fc_workers=extra["fc_workers"], fc_conv_share=extra["fc_conv_share"], micro_batches=extra["micro_batches"]), n, global_batch=G)
    got = sorted(metrics["ranks"], key=lambda r: r["rank"])
    assert [(r["sent"], r["recv"]) for r in got] == [(w["sent"], w["recv"]) for w in want]


@pytest.mark.parametrize("compression", ["powersgd"])
def test_compressed_traffic_equals_the_model(runs, compression):
    steps = COMPRESSED_STEPS
    metrics, _ = runs(compression)
    profile = named_profile("tiny_cnn", 32, 10, G // 2)
    per_step = [expected_bytes(profile, Variant("stanza", fc_workers=1, fc_conv_share=0.25, boundary_dtype="bf16", grad_compression=compression), 3, global_batch=G, step=t) for t in range(steps)]
    if compression == "powersgd":  # the compressed steps really are smaller than the vanilla ones
        assert per_step[POWERSGD_START][0]["sent"]["conv_grads"] < per_step[0][0]["sent"]["conv_grads"] / 2
    for r in sorted(metrics["ranks"], key=lambda r: r["rank"]):
        for side in ("sent", "recv"):
            want = {c: round(Fraction(sum(p[r["rank"]][side].get(c, 0) for p in per_step), steps))
                    for c in per_step[-1][r["rank"]][side]}
            assert r[side] == want, (r["rank"], side)
    # bf16 on the wire: half the fp32 activation bytes
    a = expected_bytes(profile, Variant("stanza", fc_workers=1, fc_conv_share=0.25), 3, global_batch=G)[0]["sent"]["activations"]
    rank0 = next(r for r in metrics["ranks"] if r["rank"] == 0)
    assert rank0["sent"]["activations"] * 2 == a
    assert all(s["loss"] == s["loss"] and s["loss"] < 10 for s in metrics["steps"])  # finite, sane
