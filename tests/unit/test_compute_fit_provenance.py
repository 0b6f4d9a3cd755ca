"""The compute model's checks hold their data out by construction: every constant carries the
(device row, model) pairs it was fitted on or derived from (devices.Constants), and the fit script
refuses to predict a point whose model (leave one model out) or GPU (cross-GPU) is among them.
Also: the committed leave-one-model-out folds and H100 predictions recompute from their data."""
import dataclasses
import importlib.util
import json
import statistics
from pathlib import Path

import pytest

from stanza_core.perf import DeviceProfile, named_profile
from stanza_core.perf.devices import FITTED, FITTED_FROM, INITIAL, Constants, LeakError, device_spec

ROOT = Path(__file__).resolve().parents[2]
FIT_JSON = ROOT / "benchmarks" / "results" / "compute_model_fit.json"


@pytest.fixture(scope="module")
def fit():
    spec = importlib.util.spec_from_file_location("fit_compute_model", ROOT / "benchmarks" / "fit_compute_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, mod.load_points(), {m: named_profile(m) for m in mod.MODELS}


def unsourced(values=INITIAL) -> dict:
    return dict.fromkeys(values, frozenset())


def test_constants_need_a_source_per_key_and_say_which_leak():
    with pytest.raises(ValueError, match="without sources"):
        Constants(dict(INITIAL), {})
    c = Constants(FITTED, FITTED_FROM)
    assert c.leaks("h100", "resnet18", "gpu") == [] and c.leaks("a100", "resnet50", "config") == []
    assert c.leaks("h200-fp32", "resnet18", "gpu") and c.leaks("v100", "resnet50", "config")
    assert c.leaks("h100", "vgg16", "model") == ["tf32_efficiency", "fp32_efficiency", "volta_fp32_efficiency",
                                                 "winograd_factor", "conv_half_k", "gemm_efficiency", "tile_exponent",
                                                 "mem_efficiency", "reduce_efficiency", "kernel_s", "launch_s",
                                                 "tf32_bwd_ratio", "fp32_bwd_ratio"]
    assert {m for _, m in FITTED_FROM["mem_efficiency"]} == {"vgg16"}  # set by hand from the vgg16 records


def test_a_fold_refuses_a_planted_leaking_prior(fit):
    mod, pts, profiles = fit
    planted = Constants(dict(INITIAL), unsourced() | {"kernel_s": frozenset({("h200", "alexnet")})})
    with pytest.raises(LeakError, match="alexnet on h200.* kernel_s came from \\[\\('h200', 'alexnet'\\)\\]"):
        mod.fold("alexnet", pts, [], profiles, start=planted, free=mod.FREE)
    with pytest.raises(LeakError):  # the committed constants saw every model: no fold may start from them
        mod.fold("vgg16", pts, [], profiles, start=Constants(FITTED, FITTED_FROM))


def test_held_out_refuses_points_of_the_sources(fit):
    mod, pts, profiles = fit
    with pytest.raises(LeakError):
        mod.held_out(Constants(FITTED, FITTED_FROM), [p for p in pts if p["model"] == "resnet50"], profiles, "model")
    h100 = mod.load_h100()
    seen_h100 = Constants(dict(INITIAL), unsourced() | {"launch_s": frozenset({("h100-fp32", "vgg11")})})
    with pytest.raises(LeakError):  # same GPU, other math mode and model: still not held out by GPU
        mod.held_out(seen_h100, [p for p in h100 if p["model"] == "alexnet"], profiles, "gpu")
    rows = mod.held_out(Constants(FITTED, FITTED_FROM), [p for p in h100 if p["model"] == "alexnet"], profiles, "gpu")
    assert [r["used"] for r in rows] == ["held out"] * 2


def test_fold_starts_carry_no_source_of_the_held_out_model(fit):
    mod = fit[0]
    for held in mod.MODELS:
        start, free = mod.fold_start(held)
        assert not any(m == held for src in start.sources.values() for _, m in src), held
        assert ("mem_efficiency" in free) == (held == "vgg16") and set(mod.FREE) <= set(free)
    start, _ = mod.fold_start("alexnet")
    assert start.values["mem_efficiency"] == FITTED["mem_efficiency"]  # the prior from vgg16 stays where vgg16 trains


def test_a_real_fold_learns_only_from_the_other_models(fit):
    mod, pts, profiles = fit
    figs = [f for f in mod.C.FIGURES if f.fit]
    out = mod.fold("resnet50", pts, figs, profiles)
    sources = {s for v in out["sources"].values() for s in v}
    assert sources and not any(s.endswith("/resnet50") for s in sources)  # the V100 ResNet-50 figure is dropped too
    assert out["step_points"] == 16 and "volta_fp32_efficiency" not in out["free"]  # no V100 point left
    assert len(out["rows"]) == 8 and all(r["model"] == "resnet50" for r in out["rows"])


def test_committed_folds_and_cross_gpu_hold_their_data_out():
    res = json.loads(FIT_JSON.read_text())
    assert res["command"].startswith("python benchmarks/fit_compute_model.py")
    for held, fold in res["lomo"].items():
        assert not any(s.endswith(f"/{held}") for v in fold["sources"].values() for s in v), held
        assert fold["parameters"] == len(fold["free"])
    for name, x in res["cross_gpu"].items():
        assert not any(s.startswith("h100") for v in x["sources"].values() for s in v), name
    assert {s.split("/")[0] for v in res["cross_gpu"]["h200_records"]["sources"].values() for s in v} <= {"h200", "h200-fp32"}
    assert [r["used"] for r in res["published"]].count("fit") == 1
    assert all(r["used"] != "held out" for r in res["published"] if (r["device"], r["model"]) == ("v100", "resnet50"))


def test_cross_gpu_rows_recompute_from_the_h100_run():
    res = json.loads(FIT_JSON.read_text())
    measured = json.loads((ROOT / "benchmarks" / "results" / "gpu" / "h100-2026-12-05" / "results.json").read_text())
    steps = {(r["model"], r["batch"], "h100" if r["tf32"] else "h100-fp32"): r["fwd_bwd_s"] for r in measured["local_step_times"]}
    profiles = {}
    for name, x in res["cross_gpu"].items():
        errors = []
        assert len(x["rows"]) == len(steps) == 14
        for r in x["rows"]:
            prof = profiles.setdefault(r["model"], named_profile(r["model"]))
            dev = DeviceProfile.from_spec(device_spec(r["device"], x["fitted"]), dataclasses.replace(prof, batch_size=r["batch"]))
            pred = dev.step_compute_s(r["batch"])
            assert r["measured_s"] == steps[(r["model"], r["batch"], r["device"])]
            assert pred == pytest.approx(r["predicted_s"], rel=1e-9), (name, r["model"], r["batch"], r["device"])
            errors.append(abs(pred / r["measured_s"] - 1))
        assert x["median_abs_error"] == pytest.approx(statistics.median(errors))
        assert x["worst_abs_error"] == pytest.approx(max(errors))
