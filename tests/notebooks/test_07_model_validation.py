"""notebooks/07_model_validation.ipynb with reproductions/model_validation.yaml's tiny parameters:
the 3-node runs of the notebook 03 test (shared through the session's cache) predicted by the
model with this machine's timing rounds; the rows are recomputed here from the results' own
inputs with perf.predict."""
import json

import pytest

for _pkg in ("plotly", "papermill", "nbformat", "jupytext", "ipykernel"):  # the notebook stack (not on every GPU VM)
    pytest.importorskip(_pkg, reason=f"the notebook tests need {_pkg}")

from papermill.exceptions import PapermillExecutionError

from stanza_core.runs.compute_rounds import device_for
from stanza_core.experiments.validation import replay_profile
from stanza_core.netem.facts import MAX_AGGREGATE_MBIT, max_link_mbit, payload_gbps
from stanza_core.netem import missing_requirements
from stanza_core.perf import Cluster, named_profile, predict, replay_dilation
from stanza_core.variant import Variant

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spec(spec_of):
    s = spec_of("model_validation")
    assert s.notebook.name == "07_model_validation.ipynb"
    return s


@pytest.mark.netem
@pytest.mark.timeout(900)  # six tiny jobs on the emulated cluster (three when notebook 03's test ran first)
@pytest.mark.skipif(bool(missing_requirements()), reason="the emulated cluster needs root and iproute2")
def test_tiny_run_predicts_every_measured_configuration(spec, run_notebook, bench_cache, tmp_path):
    results, out, _ = run_notebook(spec, cache_dir=bench_cache)
    everything = results["rows"]
    # The replayed runs (cifar_alexnet, compute replayed from the v100 table x 20): each predicted
    # with that same profile, dilated, at the run's own link rate and global batch.
    replayed = [r for r in everything if r["compute"] == "replay"]
    assert sorted(r["label"] for r in replayed) == ["ddp", "ps", "stanza k=1"]
    assert results["replayed_summary"]["configurations"] == 3 and results["replayed_summary"]["bytes_match"]
    D = replay_dilation(10.0, 3, max_link_mbit=max_link_mbit(9000), max_aggregate_mbit=MAX_AGGREGATE_MBIT)
    assert f"replayed runs: compute from the v100 table profile x D = {D:g}" in results["caption"]
    small = named_profile("cifar_alexnet", 32, 10)
    for r in replayed:
        G = 32 * (3 - r["fc_workers"])
        # the run's plan: the links carry target / D of payload, shaped at the wire rate carrying it
        assert r["dilation"] == D and r["payload_gbps"] == pytest.approx(10.0 / D, rel=1e-12)
        assert payload_gbps(r["link_mbit"], 9000) == pytest.approx(r["payload_gbps"], rel=1e-6)
        c = Cluster(3, r["payload_gbps"], 50e-6, replay_profile(small, "v100", D))
        p = predict(small, c, Variant(r["strategy"], fc_workers=r["fc_workers"] or None), global_batch=G)
        assert r["predicted_throughput"] == pytest.approx(p.throughput, rel=1e-12)
    rows = [r for r in everything if r["compute"] != "replay"]  # the real-compute anchor
    assert results["unavailable"] is None and sorted(r["label"] for r in rows) == ["ddp", "ps", "stanza k=1"]
    s = results["real_summary"]
    errs = sorted(abs(r["error"]) for r in rows)
    assert s["median_abs_error"] == pytest.approx(errs[1], abs=1e-12) and s["worst_abs_error"] == errs[-1]
    assert s["bytes_match"] is True
    # One rate per strategy: no out-of-sample overhead can be fitted, and none is claimed.
    assert all(r["calibrated_error"] is None for r in rows) and results["calibrated_summary"]["configurations"] == 0
    # Oracle: each prediction is perf.predict on the row's own device profile and link rate.
    prof = named_profile("cifar_alexnet", 32, 10)
    rounds = results["benches"][0]["timing_rounds"]
    assert {(x["level"], x["batch"]) for x in rounds} == {(3, 2), (2, 3), (1, 3)}  # ddp/ps; CONV; FC phase
    for r in rows:
        # Each run carries the rounds of its configuration, timed right before and after it.
        assert r["rounds_source"] == "run"
        dev = device_for(r["strategy"], 3, r["fc_workers"], 6, r["timing_rounds"], prof.params)
        c = Cluster(3, r["payload_gbps"], 50e-6, dev)
        assert payload_gbps(r["link_mbit"], 9000) == pytest.approx(r["payload_gbps"], rel=1e-6)
        p = predict(prof, c, Variant(r["strategy"], fc_workers=r["fc_workers"] or None), global_batch=6)
        assert r["predicted_throughput"] == pytest.approx(p.throughput, rel=1e-12)
        assert r["error"] == pytest.approx(p.throughput / r["measured_throughput"] - 1, rel=1e-9)
        # Throughput is samples per second of the timed steps: G over about one step time.
        assert r["measured_throughput"] == pytest.approx(6 / r["measured_step_s"], rel=0.35)
    # Bad agreement would be a finding, not a failure, but an error beyond 3x means a broken input.
    assert s["worst_abs_error"] < 2.0
    assert (out / "scatter.html").is_file() and (out / "terms.html").is_file()
    json.dumps(results)  # strict JSON (no NaN) was written


def test_missing_bench_json_fails_at_the_first_code_cell_with_one_line(spec, run_notebook, tmp_path):
    with pytest.raises(PapermillExecutionError) as e:
        run_notebook(spec, bench_json=[str(tmp_path / "nope.json")])
    assert e.value.ename in ("ValueError", "ConfigError") and e.value.evalue == f"bench_json {tmp_path / 'nope.json'}: no such file"
    assert "experiment_params(validation.ValidationParams" in e.value.source
