"""Traffic figures (viz.traffic) and the experiment logic behind notebook 02 that needs no job:
plan validation, the measured/expected comparison, the PS/Stanza ratio curves.

Figures are checked through their data: exact bytes as bar heights."""
import pytest

pytest.importorskip("plotly", reason="figures and notebook helpers need plotly (some GPU VM images lack it)")

from stanza_core import viz
from stanza_core.experiments import traffic as T
from stanza_core.perf import ModelCounts, expected_bytes
from stanza_core.variant import Variant

COUNTS = ModelCounts(conv_params=1000, fc_params=50_000, boundary_values=64)


def _run(strategy, k, n=4, b=2):
    """A results row whose "measured" side is the model's (what a perfect engine counts)."""
    c = T.plan(["tiny_cnn"], [n], [k or 1], per_worker=b, steps=2, num_classes=10)
    cfg = next(x for x in c if x["strategy"] == strategy and x["fc_workers"] == k)
    rows = expected_bytes(COUNTS, Variant(strategy, fc_workers=k), n, global_batch=cfg["global_batch"])
    return {**cfg, "counts": {}, "measured": {**T._node_summary(rows), "ranks": rows},
            "model_bytes": {**T._node_summary(rows), "ranks": rows}, "max_abs_diff_bytes": T.compare(rows, rows),
            "step_time_median_s": 0.1, "device": "cpu"}


@pytest.fixture(scope="module")
def results():
    runs = [_run("ps", None), _run("ddp", None), _run("stanza", 1), _run("stanza", 2)]
    curves = {"tiny_cnn": {**T.ratio_curve(COUNTS, (2, 4, 8), per_worker=2), "counts": {}}}
    curves["tiny_cnn"]["by_nodes"] = {}
    return T.results(runs, curves, {})


def test_bytes_figure_stacks_each_category_of_the_busiest_node(results):
    fig = viz.traffic_bytes(results)
    bars = {t.legendgroup: t for t in fig.data if t.type == "bar"}
    assert list(bars["grads"].x[0]) == ["ps", "ddp", "stanza k=1", "stanza k=1", "stanza k=2", "stanza k=2"]
    assert list(bars["grads"].x[1]) == ["worker", "worker", "CONV worker", "FC worker", "CONV worker", "FC worker"]
    ps0 = expected_bytes(COUNTS, Variant("ps"), 4, global_batch=8)[0]  # rank 0 holds the largest shard: the busiest
    assert bars["grads"].y[0] == ps0["sent"]["grads"] + ps0["recv"]["grads"]
    assert bars["params"].y[0] == ps0["sent"]["params"] + ps0["recv"]["params"]
    st = expected_bytes(COUNTS, Variant("stanza", fc_workers=1), 4, global_batch=6)
    assert bars["activations"].y[2:4] == (st[0]["sent"]["activations"], st[3]["recv"]["activations"])
    assert bars["conv_grads"].y[2] == 2 * st[0]["sent"]["conv_grads"]
    model = next(t for t in fig.data if t.type == "scatter")
    totals = [sum(bars[c].y[i] for c in bars) for i in range(6)]
    assert list(model.y) == totals  # the measured side equals the model here, so diamonds sit on the bars


def test_ratio_figure_draws_the_curve_the_measured_points_and_the_paper_line(results):
    fig = viz.ratio_figure(results)
    curve = next(t for t in fig.data if t.name == "tiny_cnn model, cluster total")
    assert list(curve.x) == [2, 4, 8] and list(curve.y) == results["paper_model"]["tiny_cnn"]["total"]
    meas = next(t for t in fig.data if t.name == "tiny_cnn measured, cluster total")
    assert list(meas.x) == [4] and meas.y[0] == results["configs"]["tiny_cnn"]["n4"]["stanza_k1"]["ps_over_this_total"]
    paper = next(t for t in fig.data if t.name.startswith("paper"))
    assert list(paper.y) == [10.0, 10.0]
    table = viz.traffic_table(results)
    assert list(table.data[0].cells.values[2]) == ["ps", "ddp", "stanza k=1", "stanza k=2"]


def test_ratio_curve_matches_the_formulas():
    c = T.ratio_curve(COUNTS, (2, 4), per_worker=3)
    P, Pc, A = 51_000, 1000, 64
    # N = 2: one CONV worker, one FC worker: no allreduce at all
    assert c["total"][0] == pytest.approx(2 * 1 * 4 * P / (2 * 4 * A * 3 + 8 * 3))
    G = 3 * 3
    assert c["total"][1] == pytest.approx(2 * 3 * 4 * P / (2 * 4 * A * G + 8 * G + 3 * round(2 * 2 * 4 * Pc / 3)), rel=1e-9)


def test_compare_finds_any_byte_of_difference():
    a = expected_bytes(COUNTS, Variant("stanza", fc_workers=1), 4, global_batch=6)
    b = [dict(r, sent=dict(r["sent"]), recv=dict(r["recv"])) for r in a]
    assert T.compare(a, b) == 0
    b[3]["recv"]["labels"] += 1
    assert T.compare(a, b) == 1
    b[3]["recv"]["extra"] = 7  # a category the model does not know
    assert T.compare(a, b) == 7


@pytest.mark.parametrize("args, kwargs, message", [
    ((["alexnet"], [4], [3]), {}, "fc_workers 3 needs nodes >= 6"),
    ((["nope"], [4], [1]), {}, "unknown model 'nope'"),
    ((["alexnet"], [1], [1]), {}, "nodes must be a non-empty list of integers >= 2"),
    ((["alexnet"], [4], [1]), {"steps": 1}, "steps must be an integer >= 2"),
    ((["alexnet"], [4], [1]), {"image_size": 32}, "alexnet needs image_size >= 63"),
    ((["alexnet"], [4], [1]), {"device": "tpu"}, "unknown device 'tpu'; expected one of auto, cpu, cuda"),
])
def test_plan_rejects_bad_parameters_in_one_line(args, kwargs, message):
    with pytest.raises(ValueError) as e:
        T.plan(*args, **kwargs)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_plan_picks_the_smallest_image_that_keeps_the_paper_bytes():
    c = T.plan(["alexnet", "vgg16"], [4], [1, 2], per_worker=32)
    assert [(x["model"], x["label"], x["global_batch"], x["image_size"]) for x in c] == [
        ("alexnet", "ps", 128, 64), ("alexnet", "ddp", 128, 64), ("alexnet", "stanza k=1", 96, 64),
        ("alexnet", "stanza k=2", 64, 64), ("vgg16", "ps", 128, 32), ("vgg16", "ddp", 128, 32),
        ("vgg16", "stanza k=1", 96, 32), ("vgg16", "stanza k=2", 64, 32)]
    assert T.model_profile("alexnet", 64, 1000, 32, "flatten").boundary_values == 9216  # as at 224x224
