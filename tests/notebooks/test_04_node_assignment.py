"""notebooks/04_node_assignment.ipynb with reproductions/node_assignment.yaml's tiny parameters:
stanza with k = 1 and k = 2 on 4 emulated nodes (real jobs), the model's prediction and the
optimiser's pick, and the paper-scale ranking checked against perf.best_assignment."""
import pytest

for _pkg in ("plotly", "papermill", "nbformat", "jupytext", "ipykernel"):  # the notebook stack (not on every GPU VM)
    pytest.importorskip(_pkg, reason=f"the notebook tests need {_pkg}")

from papermill.exceptions import PapermillExecutionError

from stanza_core.netem import missing_requirements
from stanza_core.perf import Cluster, best_assignment, named_profile, predict
from stanza_core.variant import Variant

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spec(spec_of):
    s = spec_of("node_assignment")
    assert s.notebook.name == "04_node_assignment.ipynb"
    return s


@pytest.mark.netem
@pytest.mark.skipif(bool(missing_requirements()), reason="the emulated cluster needs root and iproute2")
def test_tiny_run_measures_every_k_and_marks_the_optimiser(spec, run_notebook, bench_cache):
    results, out, _ = run_notebook(spec, cache_dir=bench_cache)
    m = results["measured"]
    assert m["unavailable"] is None and set(m["by_k"]) == {"1", "2"}
    tp = {int(k): v["measured"] for k, v in m["by_k"].items()}
    assert m["measured_best_k"] == max(tp, key=tp.get)
    pred = {int(k): v["predicted"] for k, v in m["by_k"].items()}
    assert m["optimiser_k"] == max(pred, key=pred.get)
    assert m["optimiser_shortfall"] == pytest.approx(1 - tp[m["optimiser_k"]] / max(tp.values()), abs=1e-12)
    assert m["optimiser_within_5pct"] == (m["optimiser_shortfall"] <= 0.05)
    # With k = 2 the two FC replicas allreduce 10.5 MB of FC gradients each step; with k = 1 nothing
    # of the FC head crosses the network. The model says k = 1 by a wide margin, and the measurement
    # must agree on the order. The margin's size rests on compute profiles measured on this machine
    # under contention (2.9x to 3.4x seen on the 2-core CI machine), so 2x is asked: enough that the
    # measured order is not a coin toss, not a figure the check reports. A single run each on a shared machine: the median step
    # (4 timed steps) is compared, since one stalled step moves the mean throughput (a k = 1 step is
    # ~0.15 s, and a busy machine can stall a rank for longer than that).
    step = {r["fc_workers"]: r["measured_step_s"] for r in m["validation"]}
    assert pred[1] > 2 * pred[2] and m["optimiser_k"] == 1 and step[1] < step[2]
    for row in m["validation"]:  # engine counters = the model's bytes, to the byte
        assert row["measured_bytes_per_step"] == row["predicted_bytes_per_step"]
    prof = named_profile("cifar_alexnet", 32, 10)
    assert m["validation"][0]["predicted_bytes_per_step"] == predict(prof, Cluster(4, 1.0), Variant("stanza", fc_workers=1), global_batch=6).bytes_per_step
    # Paper scale: the notebook's ranking is best_assignment's (AlexNet, 16 V100s, 10 Gb/s).
    a = best_assignment(named_profile("alexnet", 224), Cluster(16, 10.0, device="v100"), batch_per_worker=32)
    d = results["paper_scale"]["results"]["alexnet"]["10"]
    assert d["best_k"] == a.best_stanza().fc_workers == 1
    assert len(d["by_k"]) == 8 and d["by_k"]["1"] == pytest.approx(a.best_stanza().throughput, rel=1e-12)
    assert (out / "measured.html").is_file() and (out / "paper_scale.html").is_file()


def test_one_node_fails_at_the_first_code_cell_with_one_line(spec, run_notebook):
    with pytest.raises(PapermillExecutionError) as e:
        run_notebook(spec, nodes=1)
    assert e.value.ename in ("ValueError", "ConfigError") and "\n" not in e.value.evalue
    assert e.value.evalue.startswith("nodes must be an integer >= 2")
    assert "experiment_params(assignment.AssignmentParams" in e.value.source
