"""A strategy added as a plug-in folder, with an option of its own, reaches every part of the
workbench through the registry alone.

`allreduce_after` (tests/dist/toy_allreduce/: its record, engine, performance model and options
class, whose one option is `flat_chunks`) is written outside the package and named nowhere in it.
Registered, it is accepted by the training CLI (and listed in its --help, with `--flat-chunks`),
its option refused for other strategies and other strategies' options for it, priced by the
performance model (its option in the label, the step time and the bytes), ranked by the
optimiser, drawn by the explorer's diagram and coloured in the figures; run for real on 3 gloo
ranks with `--flat-chunks 3` (STANZA_PLUGINS names it to every rank), it equals the
single-process oracle and its counted bytes equal its own model's."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from stanza_core import registry, train
from stanza_core.errors import ConfigError
from stanza_core.perf import Cluster, best_assignment, expected_bytes, named_profile, predict
from stanza_core.runs.runconfig import RunConfig
from stanza_core.variant import Variant

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


def test_the_package_names_neither_it_nor_its_option():
    package = Path(registry.__file__).parent
    for path in package.rglob("*.py"):
        text = path.read_text()
        assert NAME not in text and "flat_chunks" not in text and "flat-chunks" not in text, path


def test_unregistered_it_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=f"unknown strategy '{NAME}'; expected one of local, ps, ddp, stanza"):
        registry.get(NAME)


def test_the_cli_accepts_it_and_its_option_and_refuses_the_others(toy):
    parser = train.build_parser()
    text = parser.format_help()
    assert NAME in text and "--flat-chunks FLAT_CHUNKS" in text and "pieces, one after another" in text
    cfg = train.parse_config(["--strategy", NAME, "--flat-chunks", "4"])
    assert cfg.strategy == NAME and cfg.variant == Variant(NAME, flat_chunks=4) and cfg.variant.options.flat_chunks == 4
    assert cfg.to_dict()["flat_chunks"] == 4 and train.parse_config(["--strategy", "ddp"]).to_dict()["flat_chunks"] == 1
    with pytest.raises(ConfigError, match=f"--ps-shards 2 applies to --strategy ps only, not {NAME}"):
        train.TrainConfig(strategy=NAME, ps_shards=2)
    with pytest.raises(ConfigError, match=f"--micro-batches 2 applies to --strategy stanza only, not {NAME}"):
        train.TrainConfig(strategy=NAME, micro_batches=2)
    with pytest.raises(ConfigError, match=f"^--flat-chunks 2 applies to --strategy {NAME} only, not ddp$"):
        train.parse_config(["--strategy", "ddp", "--flat-chunks", "2"])
    with pytest.raises(ConfigError, match="^--flat-chunks must be a positive integer, got 0$"):
        train.parse_config(["--strategy", NAME, "--flat-chunks", "0"])
    with pytest.raises(ConfigError, match="^flat_chunks 2 applies to allreduce_after only, not ddp$"):
        RunConfig(model="tiny_cnn", image_size=32, num_classes=10, nodes=3, strategy="ddp", flat_chunks=2,
                  global_batch=24, steps=2, link_mbit=100.0)
    run = RunConfig(model="tiny_cnn", image_size=32, num_classes=10, nodes=3, strategy=NAME, flat_chunks=3,
                    global_batch=24, steps=2, link_mbit=100.0)
    args = run.train_args("m.json")
    assert run.label == f"{NAME} chunks=3" and args[args.index("--flat-chunks") + 1] == "3"
    assert run.cache_key()["flat_chunks"] == 3 and "flat_chunks" not in RunConfig(
        **{**run.to_dict(), "flat_chunks": 1}).cache_key()  # an option at its default stays out of the key


def test_the_model_prices_it_and_the_optimiser_ranks_it(toy):
    prof, cluster = named_profile("vgg16", 224), Cluster(8, 10.0, device="v100")
    p, ddp = predict(prof, cluster, Variant(NAME), batch_per_worker=32), predict(prof, cluster, Variant("ddp"), batch_per_worker=32)
    # the same bytes as ddp's ring (VGG-16 has no batch norm), but none of them hidden under the backward
    assert p.bytes_per_step == ddp.bytes_per_step and p.iteration_s > ddp.iteration_s
    assert p.overlap.startswith("none") and p.breakdown["grads_allreduce_s"] > 0
    # its option: the same bytes in 4 pieces, each paying the ring's latency
    slow = Cluster(8, 10.0, latency_s=1e-3, device="v100")
    one, four = (predict(prof, slow, Variant(NAME, flat_chunks=c), batch_per_worker=32) for c in (1, 4))
    assert four.label == f"{NAME} chunks=4" and four.variant.options.flat_chunks == 4 and one.label == NAME
    assert four.bytes_per_step == one.bytes_per_step and four.iteration_s > one.iteration_s
    with pytest.raises(TypeError):  # an option rides in the Variant, never as a keyword of predict
        predict(prof, slow, Variant(NAME), batch_per_worker=32, flat_chunks=4)
    assert four.to_dict()["flat_chunks"] == 4
    a = best_assignment(prof, cluster, batch_per_worker=32)
    mine = [q for q in a.ranking if q.strategy == NAME]
    assert sorted(q.label for q in mine) == [NAME, f"{NAME} chunks=4"]
    assert min(mine, key=a.ranking.index).throughput == pytest.approx(p.throughput, rel=1e-12)
    assert a.ranking.index(mine[0]) > a.ranking.index(a.ddp)  # slower than ddp, and ranked so


def test_the_explorer_draws_its_exchange_and_its_option(toy):
    from stanza_core.viz.assignment import assignment_diagram

    p = predict(named_profile("alexnet", 224), Cluster(4, 10.0, device="v100"), Variant(NAME, flat_chunks=2), batch_per_worker=32)
    fig = assignment_diagram(p)
    names = [t.name for t in fig.data]
    assert any("allreduce (ring" in n for n in names)  # drawn as its record's exchange, a ring
    assert fig.layout.title.text.startswith(f"{NAME} chunks=2: 4 workers")


def test_the_figures_colour_it(toy):
    from stanza_core.runs.measurement import summarize
    from stanza_core.viz.throughput import measured_throughput, modelled_throughput

    prof = named_profile("alexnet", 224)
    rows = []
    for s in (NAME, "ddp"):
        for n in (4, 8):
            q = predict(prof, Cluster(n, 10.0, device="v100"), Variant(s), batch_per_worker=32)
            rows.append({"model": "alexnet", "bandwidth_gbps": 10.0, "strategy": s, "nodes": n, "fc_workers": None,
                         "throughput": q.throughput, "speedup_vs_ps": 1.0, "speedup_vs_ddp": 1.0})
    fig = modelled_throughput({"modelled": {"rows": rows, "models": ["alexnet"], "image_size": 224,
                                            "device": "v100", "batch_per_worker": 32}})
    colours = {t.name: t.line.color for t in fig.data}
    assert colours[NAME] == toy.color and colours["ddp"] == registry.get("ddp").color
    # measured: a run of it with its option set is named and coloured by its label and record
    runs = [{"strategy": NAME, "fc_workers": 0, "flat_chunks": 3, "label": f"{NAME} chunks=3", "link_mbit": 100.0,
             "target_gbps": 10.0, "throughput": t, "bytes_per_step": 1} for t in (90.0, 110.0)]
    rows = summarize(runs)
    assert [r["label"] for r in rows] == [f"{NAME} chunks=3"] and rows[0]["flat_chunks"] == 3
    bars = measured_throughput({"measured": {"model": "tiny_cnn", "image_size": 32, "target_gbps": 10.0,
                                             "target_device": "v100", "unavailable": None,
                                             "benches": [{"spec": {"nodes": 3}, "summary": rows}]}})
    assert [(b.name, b.marker.color, b.y[0]) for b in bars.data] == [(f"{NAME} chunks=3", toy.color, 100.0)]


def test_it_trains_as_local_and_moves_its_models_bytes(tmp_path, toy, monkeypatch, local_run):
    monkeypatch.setattr(dist_launch, "rank_env", lambda: {**rank_env(), registry.PLUGINS_ENV: "toy_allreduce"})
    args = ["--model", "tiny_cnn", "--image-size", "32", "--global-batch", "24", "--steps", "4", "--lr", "0.05"]
    _, ref_state, _ = local_run(*args)  # the local oracle test_gpu_path_dist.py ran with these arguments, if it did
    metrics, state, _ = dist_launch.train(tmp_path, NAME, 3, "--strategy", NAME, "--flat-chunks", "3", *args)
    assert_same_params(state, ref_state)
    assert metrics["config"]["flat_chunks"] == 3
    want = expected_bytes(named_profile("tiny_cnn", 32, 10), Variant(NAME, flat_chunks=3), 3, global_batch=24)
    got = sorted(metrics["ranks"], key=lambda r: r["rank"])
    assert [(r["role"], r["sent"], r["recv"]) for r in got] == [(w["role"], w["sent"], w["recv"]) for w in want]
    assert want[0]["sent"]["grads"] > 0
