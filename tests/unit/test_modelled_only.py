"""Every measured experiment runs without root: with the emulated cluster unavailable (the one
root / tc check, `runs.run.netem_unavailable`, patched to say so) notebooks 03, 04, 05
and 07's experiment functions still produce their model-side results and figures, every figure
says "Modelled only" with the reason, and the report turns measured claims into "not measured
(modelled only)" instead of failing the experiment."""
from pathlib import Path

import pytest

pytest.importorskip("plotly", reason="figures and notebook helpers need plotly (some GPU VM images lack it)")
pytest.importorskip("papermill", reason="claims are checked against notebook specs (papermill)")

from stanza_core import viz
from stanza_core.runs import run
from stanza_core.experiments import assignment, sweep, throughput, validation
from stanza_core.runs.measurement import Measurement
from stanza_core.reproduce import evaluate_claims, load_spec
from stanza_core.reproduce.spec import NOT_MEASURED

REASON = "the emulated cluster needs Linux, root and iproute2; missing: root (running as uid 1000)"
SPECS = Path(__file__).resolve().parents[2] / "reproductions"
MEASURED = dict(model="cifar_alexnet", image_size=32, num_classes=10, global_batch=6, steps=2, warmup=1)


@pytest.fixture
def no_root(monkeypatch):
    monkeypatch.setattr(run, "netem_unavailable", lambda: REASON)


def _check(figs, results, modelled_keys):
    assert results["modelled_only"] == REASON
    for key, fig in figs.items():
        assert fig.layout.title.text.startswith("Modelled only · "), key
        assert any(REASON in (a.text or "") for a in fig.layout.annotations), key
    for key in modelled_keys:  # the model-side figures hold data, not a note
        assert len(figs[key].data) > 0, key


def _claims(name, results):
    rows, missing = evaluate_claims(load_spec(SPECS / f"{name}.yaml"), results, "tiny")
    assert missing == []  # a gated experiment is not a failed one
    measured = [r for r in rows if r["status"] == NOT_MEASURED]
    assert measured and all(r["status"] != "missing" for r in rows)
    return rows


def test_throughput_without_root_models_and_says_so(no_root, capsys):
    p = throughput.ThroughputParams(measured_model="cifar_alexnet", measured_image_size=32, measured_num_classes=10,
                                    measured_nodes=[3], strategies=["ps", "ddp", "stanza"], fc_workers=1,
                                    global_batch=6, steps=2, warmup=1, target_gbps=10.0, model_names=["alexnet"],
                                    model_nodes=[2, 16], model_gbps=[10.0, 100.0])
    benches = throughput.run_measured(p)
    assert "measured part skipped: " + REASON in capsys.readouterr().out
    assert benches[0].runs == [] and benches[0].unavailable == REASON
    results = throughput.throughput_results(p, benches, throughput.model_curves(p))
    _check(viz.throughput_figures(results), results, ["modelled", "speedups"])
    rows = _claims("throughput", results)
    assert any(r["key"] == "modelled.speedups.alexnet.10.min_vs_ps" and r["status"] == "reported" for r in rows)


def test_node_assignment_without_root(no_root):
    p = assignment.AssignmentParams(**MEASURED, nodes=4, target_gbps=10.0, paper_models=["alexnet"],
                                    paper_gbps=[10.0])
    results = assignment.assignment_results(p, assignment.run_measured(p), assignment.paper_scale(p))
    _check(viz.assignment_figures(results), results, ["paper_scale"])
    _claims("node_assignment", results)


def test_bandwidth_sweep_without_root(no_root):
    p = sweep.SweepParams(**MEASURED, nodes=3, strategies=["ps", "ddp", "stanza"], fc_workers=1,
                          target_gbps=[10.0, 100.0], measure_gbps=[10.0], paper_models=["alexnet"],
                          sweep_gbps=[10.0, 100.0], sweep_nodes=[2, 16])
    bench = sweep.run_measured(p)
    results = sweep.sweep_results(p, bench, sweep.emulated(p, bench), sweep.paper_scale(p), sweep.model_sweep(p))
    figs = viz.sweep_figures(results)
    # the section "What the paper must have assumed" is modelled whatever was measured (and needs
    # both paper models: a note here, with alexnet alone): it says so itself, not "Modelled only"
    paper_ps = {k: figs.pop(k) for k in ("ps_decomposition", "ps_sweep", "ps_region")}
    assert all("needs alexnet and vgg16" in paper_ps[k].layout.annotations[0].text for k in paper_ps)
    _check(figs, results, ["paper_scale", "sweep"])
    _claims("bandwidth_sweep", results)


def test_model_validation_without_root(no_root):
    p = validation.ValidationParams(**MEASURED, nodes=[3], strategies=["ddp", "stanza"], fc_workers=[1],
                                    target_gbps=[10.0])
    results = validation.validate(validation.run_measured(p) + validation.load_benches(p))
    _check(viz.validation_figures(results), results, [])
    _claims("model_validation", results)


def test_measuring_turned_off_is_modelled_only_with_its_own_reason(monkeypatch):
    monkeypatch.setattr(run, "netem_unavailable", lambda: pytest.fail("measure_runs=False must not look for root"))
    p = assignment.AssignmentParams(**MEASURED, nodes=4, target_gbps=10.0, paper_models=["alexnet"],
                                    paper_gbps=[10.0], measure_runs=False)
    results = assignment.assignment_results(p, assignment.run_measured(p), assignment.paper_scale(p))
    assert results["modelled_only"] == throughput.MEASURE_OFF
    assert viz.assignment_figures(results)["paper_scale"].layout.title.text.startswith("Modelled only")


def test_with_the_emulator_nothing_is_marked():
    spec = {"nodes": 2}
    assert run.modelled_only([Measurement(spec=spec, config=spec), Measurement(spec=spec, config=spec, unavailable=REASON)]) is None
    assert run.modelled_only([None]) is None
    figs = {"f": viz.throughput_figures.__globals__["note_figure"]("x", "title")}
    assert viz._style.mark_modelled_only(figs, None)["f"].layout.title.text == "title"
