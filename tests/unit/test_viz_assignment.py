"""Explorer figures (viz.assignment): every number drawn is perf.predict's / best_assignment's."""
import pytest

pytest.importorskip("plotly", reason="figures and notebook helpers need plotly (some GPU VM images lack it)")

from stanza_core.perf import Cluster, best_assignment, named_profile, predict
from stanza_core.viz import assignment as va
from stanza_core.variant import Variant


@pytest.fixture(scope="module")
def setup():
    p = named_profile("alexnet", 224, 1000)
    c = Cluster(6, 25.0, 20e-6, "a100")
    return p, c, best_assignment(p, c, 120, fc_workers=range(1, 4))


def test_throughput_vs_k(setup):
    p, c, a = setup
    fig = va.throughput_vs_k(a, chosen_k=2)
    bars, ddp, ps = fig.data
    assert list(bars.x) == [1, 2, 3]
    assert list(bars.y) == [predict(p, c, Variant("stanza", fc_workers=k), global_batch=120).throughput for k in (1, 2, 3)]
    assert [row[0] for row in bars.customdata] == [predict(p, c, Variant("stanza", fc_workers=k), global_batch=120).iteration_s for k in (1, 2, 3)]
    assert ddp.y[0] == predict(p, c, Variant("ddp"), global_batch=120).throughput and ps.y[0] == a.ps.throughput
    best = a.best_stanza().fc_workers
    assert [col == "black" for col in bars.marker.line.color] == [k == best for k in (1, 2, 3)]
    assert list(bars.marker.pattern.shape) == ["", "/", ""]


def test_breakdown_and_bytes(setup):
    p, c, a = setup
    preds = [predict(p, c, Variant(s, fc_workers=k), global_batch=120) for s, k in (("ps", None), ("ddp", None), ("stanza", 2))]
    fig = va.step_breakdown(preds)
    for trace, pred in zip(fig.data, preds):
        got = dict(zip(trace.y, trace.x))
        assert got["step (iteration time)"] == pytest.approx(pred.iteration_s * 1e3)
        assert got["exposed communication"] == pytest.approx(pred.exposed_comm_s * 1e3)
        for key, label in va.ACTIVITIES.items():
            if key in pred.breakdown:
                assert got[label] == pytest.approx(pred.breakdown[key] * 1e3)
    fig = va.bytes_per_node(preds)
    bars = {t.legendgroup: t for t in fig.data}
    assert list(bars["grads"].x[0]) == ["ps", "ddp", "stanza k=2", "stanza k=2"]
    st = preds[2].bytes_per_node
    assert bars["fc_grads"].y[3] == st["fc_worker"]["sent"]["fc_grads"] + st["fc_worker"]["recv"]["fc_grads"]
    assert bars["grads"].y[1] == 2 * preds[1].bytes_per_node["worker"]["sent"]["grads"]


def test_diagram_edges_and_nodes_carry_the_ranks_bytes(setup):
    p, c, _ = setup
    pred = predict(p, c, Variant("stanza", fc_workers=2), global_batch=120)
    fig = va.assignment_diagram(pred)
    names = [t.name for t in fig.data]
    assert names[:2] == ["CONV gradient allreduce (ring)", "FC gradient allreduce (ring)"]
    assert fig.data[0].customdata[0] == pred.ranks[0]["sent"]["conv_grads"]
    edges = fig.data[2]
    # CONV worker i -> FC worker rank 4 + i % 2, with its activations, labels and gradients back
    assert [row[3:] for row in edges.customdata] == [[i, 4 + i % 2] for i in range(4)]
    assert [row[0] for row in edges.customdata] == [pred.ranks[i]["sent"]["activations"] for i in range(4)]
    assert len(fig.layout.annotations) == 2 * 4 + 1  # two arrows per CONV worker, one text box
    nodes = fig.data[-1]
    assert [row[2:] for row in nodes.customdata] == [[sum(r["sent"].values()), sum(r["recv"].values())]
                                                     for r in pred.ranks]
    ddp = va.assignment_diagram(predict(p, c, Variant("ddp"), global_batch=120))
    assert ddp.data[0].customdata[0] == predict(p, c, Variant("ddp"), global_batch=120).ranks[0]["sent"]["grads"]
    ps = va.assignment_diagram(predict(p, c, Variant("ps"), global_batch=120))
    assert list(ps.data[-1].text) == [f"W{i}" for i in range(6)]
    assert sum(x is None for x in ps.data[0].x) == 6 * 5 // 2  # one push/pull line per pair of ranks
    with pytest.raises(ValueError, match="with_ranks=True"):
        va.assignment_diagram(predict(p, c, Variant("ddp"), global_batch=120, with_ranks=False))


def test_recommendation_names_the_best_and_the_choice(setup):
    p, c, a = setup
    text = va.recommendation_html(a, predict(p, c, Variant("stanza", fc_workers=3), global_batch=120))
    assert f"Recommended: {va.describe(a.best)}" in text and f"{a.speedup_vs_ps:.2f}x" in text
    assert "Your choice, stanza k=3" in text


@pytest.mark.parametrize("exchange", ["allreduce", ""])
def test_diagram_draws_a_new_strategy_by_its_records_exchange(setup, exchange):
    """A strategy the diagram has never seen is drawn as its record says: an allreduce strategy as
    a ring, one that states no exchange by its ranks' bytes alone (never as a parameter server)."""
    import dataclasses

    from stanza_core import registry

    p, c, _ = setup
    spec = dataclasses.replace(registry.get("ddp"), name="flat_probe", color="#17becf", exchange=exchange, order=50)
    with registry.registered(spec):
        pred = predict(p, c, Variant("flat_probe"), global_batch=120)
        fig = va.assignment_diagram(pred)
    names = [t.name for t in fig.data]
    assert not any("push" in n for n in names)
    assert fig.layout.title.text.startswith("flat_probe")
    if exchange == "allreduce":
        assert names[0] == "gradient allreduce (ring, whole model)"
        assert fig.data[0].customdata[0] == pred.ranks[0]["sent"]["grads"]
    else:
        assert names == ["nodes"]
