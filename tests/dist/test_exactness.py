"""BSP exactness and byte-exact traffic: every strategy equals the single-process oracle.

After several momentum-SGD steps with dropout on (SampleDropout gives each sample the same mask
wherever it is processed), the saved parameters of ddp / ps / stanza equal `local`'s on the
same global batches. Tolerance rtol=1e-5 and, per model, the atol that float order alone needs
(benchmarks/results/exactness_float_order.json: each model trained in one process with its
gradients summed over every chunking of the batch, 10 x the largest excess, rounded up): the
strategies add the same per-sample gradients in a different order, ~1e-8 apart, or ~1e-5 after an
ulp flips a ReLU or max-pool near-tie (alexnet: atol 2e-4); one wrong label moves ~1e-2.

The same runs check each rank's counted bytes per step against the figure worked out by hand
from the model's parameter counts, the boundary size and the batch (docs/architecture.md).
"""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from stanza_core.models import get_model
from stanza_core.split import split_model

from dist_launch import assert_same_params, grouped_runs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

FLOAT_ORDER = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "exactness_float_order.json"
ATOL = {model: r["atol"] for model, r in json.loads(FLOAT_ORDER.read_text())["models"].items()}


def ring(n: int, nbytes: int) -> int:
    return round(Fraction(2 * (n - 1) * nbytes, n))


def expected_bytes(model_name, image_size, strategy, n, g, k=1, shards=0):
    """(sent, recv) by category for each rank, worked out by hand."""
    model = get_model(model_name, 10)
    P = sum(p.numel() for p in model.parameters())
    out = []
    if strategy == "ddp":
        return [({"grads": ring(n, 4 * P)}, {"grads": ring(n, 4 * P)}) for _ in range(n)]
    if strategy == "ps":
        S = shards or n
        size = [P // S + (1 if s < P % S else 0) for s in range(S)]
        for r in range(n):
            own = size[r] if r < S else 0
            pushed = 4 * (sum(size) - own)
            sent = {"grads": pushed, "params": 4 * own * (n - 1)}
            recv = {"grads": 4 * own * (n - 1), "params": pushed}
            out.append(({c: v for c, v in sent.items() if v}, {c: v for c, v in recv.items() if v}))
        return out
    nc = n - k
    b = g // nc
    s = split_model(model, input_shape=(3, image_size, image_size), batch_size=b)
    import torch
    A = s.conv(torch.zeros(1, 3, image_size, image_size)).numel()
    pc = sum(p.numel() for p in s.conv.parameters())
    pf = sum(p.numel() for p in s.fc.parameters())
    for r in range(nc):
        sent = {"activations": 4 * b * A, "labels": 8 * b}
        recv = {"activation_grads": 4 * b * A}
        if nc > 1:
            sent["conv_grads"] = recv["conv_grads"] = ring(nc, 4 * pc)
        out.append((sent, recv))
    for j in range(k):
        m = len(range(j, nc, k))
        sent = {"activation_grads": m * 4 * b * A}
        recv = {"activations": m * 4 * b * A, "labels": m * 8 * b}
        if k > 1:
            sent["fc_grads"] = recv["fc_grads"] = ring(k, 4 * pf)
        out.append((sent, recv))
    return out


def check_traffic(metrics, model, image_size, strategy, n, g, k=1, shards=0):
    want = expected_bytes(model, image_size, strategy, n, g, k, shards)
    got = [(r["sent"], r["recv"]) for r in sorted(metrics["ranks"], key=lambda r: r["rank"])]
    assert got == want
    assert metrics["bytes_per_step"] == sum(sum(s.values()) for s, _ in want)


CASES = [  # (model, image size, global batch, steps, strategy, N, extra args)
    ("tiny_cnn", 32, 24, 6, "ddp", 3, {}),
    ("tiny_cnn", 32, 24, 6, "ps", 4, {}),
    ("tiny_cnn", 32, 24, 6, "ps", 3, {"ps_shards": 2}),
    ("tiny_cnn", 32, 24, 6, "stanza", 3, {"fc_workers": 1}),
    ("tiny_cnn", 32, 24, 6, "stanza", 5, {"fc_workers": 2}),
    ("alexnet", 64, 12, 5, "ddp", 3, {}),
    ("alexnet", 64, 12, 5, "ps", 3, {}),
    ("alexnet", 64, 12, 5, "stanza", 3, {"fc_workers": 1}),
    ("alexnet", 64, 12, 5, "stanza", 4, {"fc_workers": 2}),
]


IDS = [f"{c[0]}-{c[4]}-N{c[5]}-" + "-".join(f"{k}{v}" for k, v in c[6].items()) for c in CASES]


def case_args(model, image_size, g, steps, strategy, n, extra) -> list[str]:
    args = ["--strategy", strategy, "--model", model, "--image-size", str(image_size), "--global-batch", str(g),
            "--steps", str(steps), "--lr", "0.05"]
    for key, value in extra.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    return args


@pytest.fixture
def oracle(local_run):
    """The local run of a case's model and batch (conftest.local_run: one per session, shared with
    test_log_every_dist.py, whose 6-step tiny_cnn run has these arguments)."""
    def get(model, image_size, g, steps):
        return local_run("--model", model, "--image-size", str(image_size), "--global-batch", str(g),
                         "--steps", str(steps), "--lr", "0.05")

    return get


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """runs(case id) -> (metrics, saved state_dict) of that case: the cases with the same N run one
    after another in one torchrun launch (dist_launch.grouped_runs)."""
    return grouped_runs(tmp_path_factory, {i: (c[5], case_args(*c)) for i, c in zip(IDS, CASES)})


@pytest.mark.parametrize("model,image_size,g,steps,strategy,n,extra", CASES, ids=IDS)
def test_strategy_equals_local(request, runs, oracle, model, image_size, g, steps, strategy, n, extra):
    ref_metrics, ref_state, _ = oracle(model, image_size, g, steps)
    metrics, state = runs(request.node.callspec.id)
    assert_same_params(state, ref_state, atol=ATOL[model])
    for mine, ref in zip(metrics["steps"], ref_metrics["steps"]):
        assert mine["loss"] == pytest.approx(ref["loss"], rel=1e-5)
    assert ref_metrics["steps"][0]["loss"] != ref_metrics["steps"][-1]["loss"]  # it did train
    check_traffic(metrics, model, image_size, strategy, n, g, extra.get("fc_workers", 1), extra.get("ps_shards", 0))
