"""A user's own CNN, defined only in this test module, trained through the CLI with
`--model test_byo:bn_net`: every strategy equals `local` (dropout on, batch norm with global
statistics, running statistics included) and the counted bytes equal perf.expected_bytes,
batch-norm statistics traffic included."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from stanza_core.anatomy import profile_model
from stanza_core.perf import expected_bytes
from stanza_core.variant import Variant

from dist_launch import assert_same_params, grouped_runs, train

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SPEC = "test_byo:bn_net"
CASES = [("stanza", 3, ["--fc-workers", "1"]), ("ps", 3, []), ("ddp", 2, [])]
COMMON = ["--model", SPEC, "--image-size", "16", "--global-batch", "12", "--steps", "4", "--lr", "0.05"]


class BNNet(nn.Module):
    """Conv + batch norm body (one BN layer used twice is avoided: one call per layer), an FC head
    with dropout."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32, 48), nn.ReLU(), nn.Dropout(0.3), nn.Linear(48, num_classes))

    def forward(self, x):
        return self.head(self.body(x))


def bn_net(num_classes: int = 10) -> nn.Module:
    return BNNet(num_classes)


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):  # the ranks import this module by name (dist_launch.rank_env puts tests/dist on the path)
    return train(tmp_path_factory.mktemp("oracle"), "local", 1, "--strategy", "local", *COMMON)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The strategies' runs, those with the same number of ranks in one torchrun launch
    (dist_launch.grouped_runs)."""
    return grouped_runs(tmp_path_factory, {
        **{s: (n, ["--strategy", s, *extra, *COMMON]) for s, n, extra in CASES},
        "ddp-local-bn": (2, ["--strategy", "ddp", "--bn-stats", "local", *COMMON])})


@pytest.mark.parametrize("strategy,n,extra", CASES)
def test_own_bn_model_equals_local(runs, oracle, strategy, n, extra):
    ref_metrics, ref_state, _ = oracle
    metrics, state = runs(strategy)
    assert_same_params(state, ref_state)  # parameters and BN running statistics
    assert any(k.endswith("running_mean") for k in state)
    for mine, ref in zip(metrics["steps"], ref_metrics["steps"]):
        assert mine["loss"] == pytest.approx(ref["loss"], rel=1e-5)
    profile = profile_model(bn_net(10), (3, 16, 16), 12 // (n - 1 if strategy == "stanza" else n))
    want = expected_bytes(profile, Variant(strategy, fc_workers=1 if strategy == "stanza" else None), n, global_batch=12)
    got = sorted(metrics["ranks"], key=lambda r: r["rank"])
    assert [(r["sent"], r["recv"]) for r in got] == [(w["sent"], w["recv"]) for w in want]
    assert all(r["sent"].get("bn_stats", 0) > 0 for r in got if r["role"] != "fc_worker")


def test_local_bn_stats_is_per_worker_and_not_exact(runs, oracle):
    """--bn-stats local: no statistics traffic, and (as documented) not equal to local."""
    _, ref_state, _ = oracle
    metrics, state = runs("ddp-local-bn")
    assert all("bn_stats" not in r["sent"] for r in metrics["ranks"])
    assert not torch.allclose(state["body.1.running_mean"], ref_state["body.1.running_mean"], rtol=1e-5, atol=1e-6)
