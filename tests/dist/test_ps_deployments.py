"""Both parameter-server deployments, with and without the overlapped push, equal `local`.

Dedicated servers (--ps-servers S: world size = data workers + S, the servers compute nothing)
and the colocated layout with wait-free backprop (--ps-overlap, buckets pushed from backward
hooks). A bucket cap of 5 KB cuts tiny_cnn's 35,610 parameters into several buckets, so pieces
cross shard boundaries and pushes, updates and pulls really run piece by piece. Same
tolerances as test_exactness.py (summation order only). Every rank's counted bytes per step,
by category, equal perf.expected_bytes exactly.
"""
from __future__ import annotations

import pytest

from stanza_core.models import get_model
from stanza_core.perf import expected_bytes, named_profile
from stanza_core.variant import Variant

from dist_launch import assert_same_params, grouped_runs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

G, STEPS = 24, 4  # the options of the local run other files compare with too (conftest.local_run): one launch
COMMON = ["--model", "tiny_cnn", "--image-size", "32", "--global-batch", str(G), "--steps", str(STEPS), "--lr", "0.05"]

CASES = [  # (world size, ps servers, overlap)
    (3, 1, False),
    (3, 1, True),
    (4, 2, True),
    (3, 2, False),
    (3, 0, True),
]


@pytest.fixture
def oracle(local_run):
    return local_run(*COMMON)


IDS = [f"N{w - s}+S{s}{'-overlap' if o else ''}" for w, s, o in CASES]


def case_args(servers: int, overlap: bool) -> list[str]:
    return ["--strategy", "ps", *COMMON, "--ps-servers", str(servers),
            *(["--ps-overlap", "--bucket-mb", "0.005", "--timeline"] if overlap else [])]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The cases with the same world size run in one torchrun launch (dist_launch.grouped_runs)."""
    return grouped_runs(tmp_path_factory, {i: (w, case_args(s, o)) for i, (w, s, o) in zip(IDS, CASES)})


@pytest.mark.parametrize("world,servers,overlap", CASES, ids=IDS)
def test_ps_deployment_equals_local_and_counts_expected_bytes(request, runs, oracle, world, servers, overlap):
    ref_metrics, ref_state, _ = oracle
    metrics, state = runs(request.node.callspec.id)
    assert_same_params(state, ref_state)
    for mine, ref in zip(metrics["steps"], ref_metrics["steps"]):
        assert mine["loss"] == pytest.approx(ref["loss"], rel=1e-5)
    assert ref_metrics["steps"][0]["loss"] != ref_metrics["steps"][-1]["loss"]  # it did train

    profile = named_profile("tiny_cnn", 32, 10, G // (world - servers))
    assert profile.params == sum(p.numel() for p in get_model("tiny_cnn", 10).parameters())
    want = expected_bytes(profile, Variant("ps", ps_servers=servers), world, global_batch=G)
    got = sorted(metrics["ranks"], key=lambda r: r["rank"])
    assert [(r["role"], r["sent"], r["recv"]) for r in got] == [(r["role"], r["sent"], r["recv"]) for r in want]
    assert metrics["bytes_per_step"] == sum(sum(r["sent"].values()) for r in want)
    if overlap:  # a bucket's pull is posted with its push: before the last bucket's push
        for r in got:
            if r["role"] == "worker":
                for step in range(STEPS):
                    tl = [e for e in r["timeline"] if e["step"] == step]
                    pulls = [e["t"] for e in tl if e["event"] == "recv" and e["category"] == "params"]
                    pushes = [e["t"] for e in tl if e["event"] == "send" and e["category"] == "grads"]
                    assert pulls and pushes and min(pulls) < max(pushes), (r["rank"], step)
    assert [r["role"] for r in got].count("ps_server") == servers
