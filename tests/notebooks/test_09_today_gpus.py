"""notebooks/09_today_gpus.ipynb with reproductions/today_gpus.yaml's tiny parameters: AlexNet
modelled on the measured H200 record at 8 and 64 nodes, 25 and 400 Gb/s; replayed on 2 emulated
nodes at 25 Gb/s (stanza and ddp), checked against the model and the optimiser's pick."""
import pytest

for _pkg in ("plotly", "papermill", "nbformat", "jupytext", "ipykernel"):  # the notebook stack (not on every GPU VM)
    pytest.importorskip(_pkg, reason=f"the notebook tests need {_pkg}")

from papermill.exceptions import PapermillExecutionError

from stanza_core import registry
from stanza_core.runs.plan import replay_link
from stanza_core.netem import missing_requirements
from stanza_core.perf import Cluster, best_assignment, device_profile, named_profile

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spec(spec_of):
    s = spec_of("today_gpus")
    assert s.notebook.name == "09_today_gpus.ipynb"
    return s


def _check_modelled(results):
    alex = named_profile("alexnet", 224)
    dev = device_profile("h200-measured", alex, 32)
    assert dev.source == "measured record"
    pays = results["where_it_pays"]["alexnet"]["h200-measured"]
    for n in (8, 64):
        for g in (25.0, 400.0):
            a = best_assignment(alex, Cluster(n, g, device=dev.profile), batch_per_worker=32)
            cell = results["modelled"]["by_model"]["alexnet"]["h200-measured"][str(n)][f"{g:g}"]
            assert cell["best"]["label"] == a.best.label == pays[str(n)]["best"][f"{g:g}"]
            assert cell["stanza_vs_ddp"] == pytest.approx(a.best_stanza().throughput / a.ddp.throughput, rel=1e-12)
            assert cell["stanza_pays"] == (a.best.strategy == "stanza")
        # stops_at: the first bandwidth whose pick is no stanza
        v = pays[str(n)]
        assert v["stops_at"] == next((float(g) for g in ("25", "400") if not v["best"][g].startswith("stanza")), None)
    # the measured H200 record computes a 32-sample step faster than the V100 table row
    assert results["modelled"]["step_s"]["alexnet"]["compare_over_device"] > 1


def test_modelled_only_without_replay(spec, run_notebook):
    """No emulated cluster needed: measure_runs=False keeps the modelled figures and says why."""
    results, out, _ = run_notebook(spec, measure_runs=False)
    _check_modelled(results)
    assert results["modelled_only"].startswith("measure_runs=False")
    assert results["replayed"]["by_model"]["alexnet"]["2"]["25"]["configs"] == {}
    for key in ("modelled", "choice", "replayed"):
        assert (out / f"{key}.html").is_file()


@pytest.mark.netem
@pytest.mark.timeout(900)  # two engine-seconds jobs and two replayed runs of AlexNet at 224 (cold cache)
@pytest.mark.skipif(bool(missing_requirements()), reason="the emulated cluster needs root and iproute2")
def test_tiny_run_replays_the_h200_record_and_checks_the_pick(spec, run_notebook, bench_cache):
    results, _, _ = run_notebook(spec, cache_dir=bench_cache)
    assert results["modelled_only"] is None and results["replayed"]["unavailable"] is None
    _check_modelled(results)
    pt = results["replayed"]["by_model"]["alexnet"]["2"]["25"]
    assert set(pt["configs"]) == {"stanza_k1", "ddp"} and pt["choice"] == "stanza k=1"
    runs = {r["label"]: r for b in results["replayed"]["benches"] for r in b["runs"]}
    for key, c in pt["configs"].items():
        run = runs[pt["labels"][key]]
        # F and D by the plan's rule (links, the messages and the engine seconds measured at D = 1 at
        # that F), never computed here; 2 nodes at 25 Gb/s ask for F = 50 of the links, at most 32
        # stanza's ranks send to one at once (StrategySpec.fan_in): its messages travel whole
        if registry.get(key.split("_")[0]).fan_in:
            assert run["payload_scale"] == 1
        else:
            assert 1 < run["payload_scale"] <= 32
        assert run["dilation"] == replay_link(25.0, 2, target_step_s=run["target_step_s"], engine_s=run["engine_s"],
                                              payload_scale=run["payload_scale"]).dilation == c["dilation"]
        assert run["dilation"] > 1 and run["engine_s"] > 0
        assert c["replayed"] == pytest.approx(run["throughput"] * run["dilation"], rel=1e-12)  # on the target
        assert c["predicted_over_replayed"] == pytest.approx(c["predicted"] / c["replayed"], rel=1e-12)
        assert 0 <= c["step_spread"] < 1
    fastest = {kind: max(pt["configs"], key=lambda k: pt["configs"][k][kind]) for kind in ("predicted", "replayed")}
    assert pt["choice_checked"] == (fastest["predicted"] == fastest["replayed"])
    assert pt["worst_model_error"] == pytest.approx(
        max(abs(c["predicted_over_replayed"] - 1) for c in pt["configs"].values()), rel=1e-12)
    assert "h200-measured measured record" in results["replayed"]["caption"]


def test_replayed_bandwidth_outside_the_targets_fails_with_one_line(spec, run_notebook):
    with pytest.raises(PapermillExecutionError) as e:
        run_notebook(spec, replay_gbps=[40.0])
    assert e.value.ename in ("ValueError", "ConfigError") and "\n" not in e.value.evalue
    assert e.value.evalue == "replay_gbps [40.0] are not among target_gbps [25.0, 400.0]"


def test_unknown_role_fails_with_one_line(spec, run_notebook):
    with pytest.raises(PapermillExecutionError) as e:
        run_notebook(spec, replay_configs=["stanza", "allreduce"])
    assert e.value.evalue.startswith("replay_configs must name distinct roles among stanza, stanza_k1")


def test_the_old_dilation_parameter_fails_with_one_line_naming_min_dilation(spec, run_notebook):
    """papermill passes a parameter the notebook does not declare on (with a warning); the
    parameters class's RENAMED makes 0.1.0's `dilation` fail at once instead of being dropped."""
    with pytest.raises(PapermillExecutionError) as e:
        run_notebook(spec, dilation=20.0)
    assert e.value.ename == "ValueError" and e.value.evalue == (
        "the parameter dilation is now min_dilation (the smallest D; each run's own D comes from its plan): "
        "set min_dilation: 20.0")
