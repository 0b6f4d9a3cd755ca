"""A strategy added as a plug-in reaches every part of the workbench through the registry alone.

`allreduce_after` (toy_allreduce.py: its engine and its record; toy_allreduce_model.py: its
performance model) is written outside the package and named nowhere in it. Registered, it is
accepted by the training CLI (and listed in its --help), refused options that belong to other
strategies, priced by the performance model, coloured in the figures and ranked by the
optimiser; run for real on 3 gloo ranks (STANZA_PLUGINS names it to every rank), it equals the
single-process oracle and its counted bytes equal its own model's."""
from __future__ import annotations

import importlib
import sys

import pytest

from stanza_core import registry, train
from stanza_core.errors import ConfigError
from stanza_core.perf import Cluster, best_assignment, expected_bytes, named_profile, predict

from dist_launch import assert_same_params, rank_env  # noqa: F401 (rank_env: the ranks' environment)
import dist_launch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

NAME = "allreduce_after"


@pytest.fixture
def toy():
    """The plug-in imported (which registers it); unregistered afterwards."""
    assert NAME not in registry.names()
    module = importlib.import_module("toy_allreduce")
    if NAME not in registry.names():  # imported by an earlier test: register its record again
        registry.register(module.SPEC)
    yield module.SPEC
    registry.unregister(NAME)
    sys.modules.pop("toy_allreduce", None)


def test_unregistered_it_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=f"unknown strategy '{NAME}'; expected one of local, ps, ddp, stanza"):
        registry.get(NAME)


def test_the_cli_accepts_it_and_refuses_other_strategies_options(toy):
    parser = train.build_parser()
    assert NAME in parser.format_help()
    assert parser.parse_args(["--strategy", NAME]).strategy == NAME
    with pytest.raises(ConfigError, match=f"--ps-shards 2 applies to --strategy ps only, not {NAME}"):
        train.TrainConfig(strategy=NAME, ps_shards=2)
    with pytest.raises(ConfigError, match=f"--micro-batches 2 applies to --strategy stanza only, not {NAME}"):
        train.TrainConfig(strategy=NAME, micro_batches=2)


def test_the_model_prices_it_and_the_optimiser_ranks_it(toy):
    prof, cluster = named_profile("vgg16", 224), Cluster(8, 10.0, device="v100")
    p, ddp = predict(prof, cluster, NAME, batch_per_worker=32), predict(prof, cluster, "ddp", batch_per_worker=32)
    # the same bytes as ddp's ring (VGG-16 has no batch norm), but none of them hidden under the backward
    assert p.bytes_per_step == ddp.bytes_per_step and p.iteration_s > ddp.iteration_s
    assert p.overlap.startswith("none") and p.breakdown["grads_allreduce_s"] > 0
    a = best_assignment(prof, cluster, batch_per_worker=32)
    mine = [q for q in a.ranking if q.strategy == NAME]
    assert len(mine) == 1 and mine[0].throughput == pytest.approx(p.throughput, rel=1e-12)
    assert a.ranking.index(mine[0]) > a.ranking.index(a.ddp)  # slower than ddp, and ranked so


def test_the_figures_colour_it(toy):
    from stanza_core.viz.throughput import modelled_throughput

    prof = named_profile("alexnet", 224)
    rows = []
    for s in (NAME, "ddp"):
        for n in (4, 8):
            q = predict(prof, Cluster(n, 10.0, device="v100"), s, batch_per_worker=32)
            rows.append({"model": "alexnet", "bandwidth_gbps": 10.0, "strategy": s, "nodes": n, "fc_workers": None,
                         "throughput": q.throughput, "speedup_vs_ps": 1.0, "speedup_vs_ddp": 1.0})
    fig = modelled_throughput({"modelled": {"rows": rows, "models": ["alexnet"], "image_size": 224,
                                            "device": "v100", "batch_per_worker": 32}})
    colours = {t.name: t.line.color for t in fig.data}
    assert colours[NAME] == toy.color and colours["ddp"] == registry.get("ddp").color


def test_it_trains_as_local_and_moves_its_models_bytes(tmp_path, toy, monkeypatch, local_run):
    monkeypatch.setattr(dist_launch, "rank_env", lambda: {**rank_env(), registry.PLUGINS_ENV: "toy_allreduce"})
    args = ["--model", "tiny_cnn", "--image-size", "32", "--global-batch", "24", "--steps", "4", "--lr", "0.05"]
    _, ref_state, _ = local_run(*args)  # the local oracle test_gpu_path_dist.py ran with these arguments, if it did
    metrics, state, _ = dist_launch.train(tmp_path, NAME, 3, "--strategy", NAME, *args)
    assert_same_params(state, ref_state)
    want = expected_bytes(named_profile("tiny_cnn", 32, 10), NAME, 3, global_batch=24)
    got = sorted(metrics["ranks"], key=lambda r: r["rank"])
    assert [(r["role"], r["sent"], r["recv"]) for r in got] == [(w["role"], w["sent"], w["recv"]) for w in want]
    assert want[0]["sent"]["grads"] > 0
