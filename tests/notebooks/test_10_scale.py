"""notebooks/10_scale.ipynb with reproductions/scale.yaml's tiny parameters: AlexNet on the V100
row, 4 and 8 nodes at 10 Gb/s, simulated on SimGrid into a fresh store, beside the analytic model;
each simulated number checked against an independent simulation of the same configuration."""
import json

import pytest

for _pkg in ("plotly", "papermill", "nbformat", "jupytext", "ipykernel"):  # the notebook stack (not on every GPU VM)
    pytest.importorskip(_pkg, reason=f"the notebook tests need {_pkg}")

from stanza_core.experiments import scale
from stanza_core.perf import Cluster, best_assignment, named_profile
from stanza_core.runs.runconfig import UNSET_LINK_MBIT, RunConfig
from stanza_core.sim.run import SIM_VERSION, available, simulate

pytestmark = pytest.mark.slow
needs_simgrid = pytest.mark.skipif(bool(available()), reason=available() or "")


@pytest.fixture(scope="module")
def spec(spec_of):
    s = spec_of("scale")
    assert s.notebook.name == "10_scale.ipynb"
    return s


@needs_simgrid
def test_tiny_run_simulates_each_role_and_stores_it(spec, run_notebook, tmp_path):
    store = tmp_path / "store"
    results, out, _ = run_notebook(spec, store=str(store))
    assert results["sim_version"] == SIM_VERSION and results["not_simulated"] is None
    assert results["simulated_count"] == 2 * 3  # two sizes, three roles, one bandwidth
    alex = named_profile("alexnet", 224, 1000)
    for n in (4, 8):
        a = best_assignment(alex, Cluster(n, 10.0, device="v100"), batch_per_worker=32)
        cell = results["by_model"]["alexnet"]["v100"][str(n)]["10"]
        preds = {"stanza": a.best_stanza(), "ps": a.ps, "ddp": a.ddp}
        for role, pred in preds.items():
            assert cell["labels"][role] == pred.label
            assert cell["modelled"][role] == pytest.approx(pred.throughput, rel=1e-12)
            rc = RunConfig(model="alexnet", image_size=224, num_classes=1000, nodes=n, variant=pred.variant,
                           global_batch=pred.global_batch, steps=2, warmup=1, link_mbit=UNSET_LINK_MBIT,
                           compute="replay", replay_device="v100")
            assert cell["simulated"][role] == pytest.approx(simulate(rc, 10.0, ring="merged")["throughput"], rel=1e-12)
        base = max(cell["simulated"]["ps"], cell["simulated"]["ddp"])
        assert cell["simulated_stanza_over_best_baseline"] == pytest.approx(cell["simulated"]["stanza"] / base)
        assert cell["simulated_pays"] == (cell["simulated"]["stanza"] > base)
        assert cell["k"] == a.best_stanza().variant.options.values()["fc_workers"]
    entries = sorted(store.glob("*.json"))
    assert len(entries) == 6
    for path in entries:
        e = json.loads(path.read_text())
        assert e["figure"] == "simulated" and e["sim_version"] == SIM_VERSION and e["device_row"]
    for key in ("speedups", "pays"):
        assert (out / f"{key}.html").is_file()

    # the store is read: an entry planted with another throughput is what a second pass reports,
    # and an entry of another simulator version is simulated again (and rewritten), not read
    p = scale.ScaleParams(**{k: spec.params["tiny"][k] for k in ("models", "devices", "target_gbps", "nodes")})
    modelled = scale.model_points(p)
    planted = json.loads(entries[0].read_text())
    planted["throughput"] = 12345.0
    entries[0].write_text(json.dumps(planted))
    again = scale.simulate_points(p, modelled, store, say=lambda *_: None)
    assert [e["throughput"] for e in again.values()].count(12345.0) == 1
    planted["sim_version"] = SIM_VERSION + 1
    entries[0].write_text(json.dumps(planted))
    third = scale.simulate_points(p, modelled, store, say=lambda *_: None)
    assert 12345.0 not in [e["throughput"] for e in third.values()]
    assert json.loads(entries[0].read_text())["sim_version"] == SIM_VERSION


def test_modelled_only_says_why(spec, run_notebook):
    results, out, _ = run_notebook(spec, simulate=False, store="")
    assert results["simulated_count"] == 0 and results["not_simulated"] == "simulate=False"
    assert results["summary"]["judged"] == 0
    assert all(v is None for c in results["by_model"]["alexnet"]["v100"].values() for g in c.values()
               for v in g["simulated"].values())
    assert (out / "pays.html").is_file()


def test_bad_parameters_fail_with_one_line_before_any_work(spec):
    tiny = {k: spec.params["tiny"][k] for k in ("models", "devices", "target_gbps", "nodes")}
    for change, words in (({"nodes": [1, 4]}, "nodes"), ({"devices": ["v101"]}, "v101"),
                          ({"target_gbps": [0.0]}, "target_gbps"), ({"models": ["vgg17"]}, "vgg17")):
        with pytest.raises(ValueError) as e:
            scale.ScaleParams(**{**tiny, **change})
        assert "\n" not in str(e.value) and words in str(e.value), str(e.value)
