"""The node-assignment explorer without a browser: real ipywidgets controls, their observers,
and the figures they redraw, checked against stanza_core.perf directly."""
import pytest

pytest.importorskip("plotly", reason="figures and notebook helpers need plotly (some GPU VM images lack it)")
pytest.importorskip("ipywidgets", reason="the explorer is an ipywidgets app (some GPU VM images lack it)")

from stanza_core.perf import Cluster, best_assignment, named_profile, predict
from stanza_core.widgets import Explorer
from stanza_core.variant import Variant


@pytest.fixture
def explorer():
    return Explorer(models=["alexnet", "tiny_cnn"], model="alexnet", nodes=8, bandwidth_gbps=10.0,
                    latency_us=50.0, global_batch=256, device="v100")


def _bars_y(fig):
    return list(fig.data[0].y)


def test_starts_at_the_optimisers_k_and_draws_perf_numbers(explorer):
    p = named_profile("alexnet", 224, 1000)
    c = Cluster(8, 10.0, 50e-6, "v100")
    a = best_assignment(p, c, 256, fc_workers=range(1, 5))
    assert explorer.controls["fc_workers"].value == a.best_stanza().fc_workers
    assert (explorer.assignment.best.strategy, explorer.assignment.best.fc_workers) == (a.best.strategy, a.best.fc_workers)
    fig = explorer.figures["throughput"]
    assert list(fig.data[0].x) == [1, 2, 3, 4]
    assert _bars_y(fig) == [predict(p, c, Variant("stanza", fc_workers=k), global_batch=256).throughput for k in (1, 2, 3, 4)]
    assert fig.data[1].y[0] == predict(p, c, Variant("ddp"), global_batch=256).throughput
    assert fig.data[2].y[0] == predict(p, c, Variant("ps"), global_batch=256).throughput
    assert f"{a.best.throughput:,.0f} samples/s" in explorer.status.value


def test_moving_a_control_redraws_with_the_new_cluster(explorer):
    before = explorer.figures["throughput"].to_dict()
    n0 = explorer.updates
    explorer.controls["nodes"].value = 12
    assert explorer.updates > n0
    fig = explorer.figures["throughput"]
    assert fig.to_dict() != before
    assert list(fig.data[0].x) == list(range(1, 7))  # k = 1..N//2
    assert explorer.controls["fc_workers"].max == 6
    c = Cluster(12, 10.0, 50e-6, "v100")
    p = named_profile("alexnet", 224, 1000)
    assert _bars_y(fig) == [predict(p, c, Variant("stanza", fc_workers=k), global_batch=256).throughput for k in range(1, 7)]
    # bandwidth: every prediction changes; the diagram's bytes do not
    explorer.controls["bandwidth_gbps"].value = 100.0
    c = Cluster(12, 100.0, 50e-6, "v100")
    assert explorer.figures["throughput"].data[1].y[0] == predict(p, c, Variant("ddp"), global_batch=256).throughput


def test_moving_k_stops_following_the_optimiser_and_shows_that_k(explorer):
    explorer.controls["fc_workers"].value = 3
    chosen = explorer.predictions[-1]
    assert (chosen.strategy, chosen.fc_workers) == ("stanza", 3)
    shapes = list(explorer.figures["throughput"].data[0].marker.pattern.shape)
    assert shapes == ["", "", "/", ""]
    explorer.controls["nodes"].value = 10  # k stays where the user put it
    assert explorer.controls["fc_workers"].value == 3
    explorer.controls["nodes"].value = 4  # ... unless N shrinks under it: clamped to N//2
    assert explorer.controls["fc_workers"].value == 2 and explorer.chosen.fc_workers == 2


def test_diagram_follows_the_strategy_and_carries_the_ranks_bytes(explorer):
    explorer.controls["fc_workers"].value = 2
    nodes = explorer.figures["diagram"].data[-1]
    p = named_profile("alexnet", 224, 1000)
    pred = predict(p, Cluster(8, 10.0, 50e-6, "v100"), Variant("stanza", fc_workers=2), global_batch=256)
    assert list(nodes.text) == ["C0", "C1", "C2", "C3", "C4", "C5", "F6", "F7"]
    assert [row[2] for row in nodes.customdata] == [sum(r["sent"].values()) for r in pred.ranks]
    explorer.controls["strategy"].value = "ps"
    assert explorer.chosen.strategy == "ps"
    assert list(explorer.figures["diagram"].data[-1].text) == [f"W{i}" for i in range(8)]


def test_a_refused_combination_is_reported_not_raised(explorer):
    before = explorer.figures["throughput"].to_dict()
    explorer.controls["global_batch"].value = 4  # fewer samples than the 8 nodes
    assert "Cannot predict" in explorer.status.value and "smaller than the 8 nodes" in explorer.status.value
    assert explorer.figures["throughput"].to_dict() == before
    explorer.controls["global_batch"].value = 64
    assert "Recommended" in explorer.status.value


@pytest.mark.parametrize("kwargs, message", [
    (dict(model="no_such"), "model 'no_such' is not among models"),
    (dict(models=["alexnet", "nope"]), "unknown model 'nope'"),
    (dict(nodes=1), "nodes must be an integer in 2..64"),
    (dict(bandwidth_gbps=-1.0), "bandwidth_gbps must be > 0"),
    (dict(fc_workers=5), "fc_workers must be 0 (the optimiser's k) or in 1..4 for 8 nodes"),
    (dict(global_batch=4), "global_batch must be an integer >= 8 (nodes)"),
    (dict(device="tpu"), "unknown device 'tpu'"),
    (dict(strategy="async"), "unknown strategy 'async'"),
])
def test_bad_arguments_are_one_line_errors(kwargs, message):
    args = dict(models=["alexnet"], model="alexnet", nodes=8)
    args.update(kwargs)
    with pytest.raises(ValueError) as e:
        Explorer(**args)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_outputs_carry_the_current_figure_in_plotlys_mimetype(explorer):
    from stanza_core.widgets import PLOTLY_MIME

    explorer.controls["nodes"].value = 6
    (out,) = explorer.outputs["throughput"].outputs
    spec = out["data"][PLOTLY_MIME]
    assert out["output_type"] == "display_data"
    assert spec["data"][0]["y"] == list(explorer.figures["throughput"].data[0].y)
    assert spec["layout"]["title"]["text"] == "Predicted throughput against k (6 nodes, 10 Gb/s)"
    assert "plotly.js" not in str(out)[:10_000] and "text/html" not in out["data"]  # JSON only, no bundled JS


def test_a_measured_device_drives_the_explorer_and_is_named():
    """h200-measured through the one resolver, at the global batch / N; a model the records do
    not hold is refused in the status line, not raised."""
    from stanza_core.perf import device_profile

    ex = Explorer(models=["alexnet", "tiny_cnn"], model="alexnet", nodes=4, global_batch=128, device="h200-measured")
    p = named_profile("alexnet", 224, 1000)
    dev = device_profile("h200-measured", p, 32)
    a = best_assignment(p, Cluster(4, 10.0, 50e-6, dev.profile), 128, fc_workers=range(1, 3))
    assert ex.assignment.best.throughput == a.best.throughput
    res = ex.results()
    assert res["device_source"] == "measured record" and res["device"] == dev.caption
    assert "compute: h200-measured (measured record" in ex.status.value
    ex.controls["model"].value = "tiny_cnn"
    assert "Cannot predict this configuration" in ex.status.value and "no measured record of tiny_cnn" in ex.status.value
