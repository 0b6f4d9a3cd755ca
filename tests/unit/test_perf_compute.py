"""Compute model v2: each layer kind costed by its rule, floors per call and work per sample, the
host floor, a datasheet-only device, the h200 rows, and the committed fit (its JSON recomputes
from the measured records; fitted and held-out points are told apart)."""
import dataclasses
import importlib.util
import json
import statistics
from pathlib import Path

import pytest

from stanza_core.anatomy import LayerRow, PartTotals, Profile
from stanza_core.perf import DEVICE_TABLE, DeviceProfile, DeviceSpec, named_profile
from stanza_core.perf.compute import FIGURES, KERNELS, LOSS_KERNELS, layer_cost, layer_seconds, layer_times
from stanza_core.perf.devices import FITTED, device_spec

ROOT = Path(__file__).resolve().parents[2]
FIT_JSON = ROOT / "benchmarks" / "results" / "compute_model_fit.json"
RECORDS = ROOT / "stanza_core" / "perf" / "records" / "h200"
V100, H200 = DEVICE_TABLE["v100"], DEVICE_TABLE["h200"]


def conv(kernel, stride, flops=1e9, out=1000):
    return LayerRow("c", "Conv2d", "conv", 1000, flops, out, 4 * out, 2 * out, 1, kernel, stride)


def toy_profile(relu_calls=1):
    rows = [conv(9, 1), LayerRow("r", "ReLU", "conv", 0, 0.0, 100, 400, 200 * relu_calls, relu_calls),
            LayerRow("fc", "Linear", "fc", 4000, 8e3, 10, 40, 4010)]
    return Profile("toy", (3, 8, 8), 4, "fc", 100, PartTotals(1000, 1e9), PartTotals(4000, 8e3), rows)


def test_each_layer_kind_follows_its_rule():
    k = 1e9 / (2 * 1000)  # reduction length of conv(): FLOPs / (2 x outputs)
    rate = V100.conv_peak_flops * V100.conv_efficiency * k / (k + V100.conv_half_k)
    f3, b3 = layer_seconds(conv(9, 1), V100)
    assert f3 == pytest.approx(1e9 / (rate * V100.winograd_factor)) and b3 == pytest.approx(2 * f3)
    assert layer_seconds(conv(9, 4), V100)[0] == pytest.approx(1e9 / rate)  # strided: no Winograd
    assert layer_seconds(conv(1, 1), V100)[0] == pytest.approx(1e9 / rate)  # 1x1: a GEMM, no factor
    assert H200.winograd_factor == 1.0 and DEVICE_TABLE["h200-fp32"].winograd_factor == FITTED["winograd_factor"]
    # a small reduction length fills the math units worse: slower per FLOP
    assert layer_seconds(conv(9, 4, out=1e6), V100)[0] > layer_seconds(conv(9, 4), V100)[0]
    lin = LayerRow("fc", "Linear", "fc", 10, 4e6, 10, 40, 20)
    assert layer_seconds(lin, V100)[0] == pytest.approx(4e6 / (V100.fc_peak_flops * V100.fc_efficiency))
    stream = 10 * 4 / (V100.mem_bytes_per_s * V100.weight_efficiency)
    c = layer_cost(lin, V100)
    assert c.fwd_fixed_s == pytest.approx(stream + V100.kernel_s) and c.bwd_fixed_s == pytest.approx(2 * stream + 2 * V100.kernel_s)
    bn = LayerRow("bn", "BatchNorm2d", "conv", 2, 0.0, 1000, 4000, 2000)
    red = V100.mem_bytes_per_s * V100.reduce_efficiency  # batch norm: the reduce share of the bandwidth
    assert layer_seconds(bn, V100) == pytest.approx((1.5 * 2000 * 4 / red, 2.5 * 2000 * 4 / red))
    relu = LayerRow("r", "ReLU", "conv", 0, 0.0, 1000, 4000, 2000)
    mem = V100.mem_bytes_per_s * V100.mem_efficiency
    assert layer_seconds(relu, V100) == pytest.approx((2000 * 4 / mem, 1.5 * 2000 * 4 / mem))
    flat = layer_cost(LayerRow("f", "Flatten", "fc", 0, 0.0, 10, 40, 20), V100)
    assert (flat.fwd_s, flat.bwd_s, flat.fwd_fixed_s, flat.fwd_kernels, flat.bwd_kernels) == (0.0, 0.0, 0.0, 0, 0)
    # the first parameterised layer's backward computes only the weight gradient
    first = layer_cost(conv(9, 1), V100, first=True)
    assert first.bwd_s == pytest.approx(first.fwd_s) and first.bwd_kernels == KERNELS["Conv2d"][1] - 1


def test_floors_scale_with_calls_and_work_with_batch():
    one, three = (DeviceProfile.from_spec(H200, toy_profile(n)) for n in (1, 3))
    relu_floor = H200.kernel_s  # one kernel each way per call
    assert three.conv_fwd_fixed_s - one.conv_fwd_fixed_s == pytest.approx(2 * relu_floor)
    assert three.conv_bwd_fixed_s - one.conv_bwd_fixed_s == pytest.approx(2 * relu_floor)
    assert three.conv_fwd_call_s - one.conv_fwd_call_s == pytest.approx(2 * H200.launch_s)  # host: 2 more launches
    # the FC part's host floor counts its layer's kernels and the loss's
    assert one.fc_fwd_call_s == pytest.approx((KERNELS["Linear"][0] + LOSS_KERNELS[0]) * H200.launch_s)
    # device time: fixed + b x per sample; the host floor binds only while it is the larger
    d = one
    for part, phase in (("conv", "fwd"), ("conv", "bwd"), ("fc", "fwd"), ("fc", "bwd")):
        key = f"{part}_{phase}"
        dev = lambda b: getattr(d, f"{key}_fixed_s") + b * getattr(d, f"{key}_s")  # noqa: E731
        assert d.time_s(part, phase, 1) == pytest.approx(max(getattr(d, f"{key}_call_s"), dev(1)))
        big = 10 ** 7
        assert d.time_s(part, phase, 2 * big) - d.time_s(part, phase, big) == pytest.approx(big * getattr(d, f"{key}_s"))
    assert d.time_s("fc", "fwd", 1) == d.fc_fwd_call_s  # a tiny FC call is launch-bound


def test_old_saved_profiles_load_with_their_meaning():
    old = {"name": "v100 (table)", "conv_fwd_s": 1e-3, "conv_bwd_s": 2e-3, "fc_fwd_s": 1e-5, "fc_bwd_s": 2e-5,
           "conv_fwd_call_s": 0.0, "conv_bwd_call_s": 0.0, "fc_fwd_call_s": 5e-4, "fc_bwd_call_s": 1e-3,
           "step_overhead_s": 0.0, "update_s_per_param": 1e-11}
    d = DeviceProfile(**old)
    assert d.time_s("fc", "fwd", 4) == 5e-4 and d.time_s("fc", "fwd", 100) == pytest.approx(1e-3)  # max(floor, b x s)
    assert DeviceProfile(**d.to_dict()) == d


def test_a_device_from_its_datasheet_alone():
    # A user's device: peaks and bandwidth from a datasheet, the fitted efficiencies; floors default to the fitted ones.
    mine = DeviceSpec("my-a100", 19.5e12, 19.5e12, 2039e9, FITTED["volta_fp32_efficiency"], FITTED["gemm_efficiency"],
                      FITTED["mem_efficiency"], "from the datasheet", FITTED["winograd_factor"])
    prof = toy_profile()
    d, ref = DeviceProfile.from_spec(mine, prof), DeviceProfile.from_table("a100-fp32", prof)
    assert dataclasses.replace(d, name=ref.name) == ref
    assert d.conv_fwd_s == pytest.approx(sum(t["fwd_s"] for t in layer_times(prof, mine) if t["part"] == "conv"))
    assert "datasheet" in d.name


def test_h200_rows_use_the_datasheet_and_the_fit():
    for name, tf32 in (("h200", True), ("h200-fp32", False)):
        s = DEVICE_TABLE[name]
        assert s == device_spec(name)
        assert s.mem_bytes_per_s == 4.8e12 and s.fc_peak_flops == DEVICE_TABLE["h100"].fc_peak_flops
        assert s.conv_peak_flops == DEVICE_TABLE["h100" if tf32 else "h100-fp32"].conv_peak_flops
        assert s.conv_efficiency == FITTED["tf32_efficiency" if tf32 else "fp32_efficiency"]


# --- the committed fit -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fit():
    res = json.loads(FIT_JSON.read_text())
    profiles = {m: named_profile(m) for m in ("alexnet", "vgg16", "resnet50")}
    return res, profiles


def records():
    out = {}
    for f in RECORDS.glob("*.json"):
        d = json.loads(f.read_text())
        out[(d["model"], d["batch"], "h200" if d["tf32"] else "h200-fp32")] = d["plain_fwd_bwd_s"]
    return out


def test_committed_constants_are_the_fit_and_the_rows_predict_it(fit):
    res, profiles = fit
    for k in res["free"]:
        assert FITTED[k] == pytest.approx(res["fitted"][k], rel=0.02), k
    assert res["parameters"] == len(res["free"]) and res["points"] == 24 + sum(f.fit for f in FIGURES)
    meas = records()
    for r in res["h200_fit"]:
        pred = DeviceProfile.from_table(r["device"], profiles[r["model"]]).step_compute_s(r["batch"])
        assert pred == pytest.approx(r["predicted_s"], rel=0.02)
        assert r["measured_s"] == meas[(r["model"], r["batch"], r["device"])]


def test_leave_one_model_out_recomputes_from_the_records(fit):
    res, profiles = fit
    meas, errors = records(), []
    for held, fold in res["lomo"].items():
        rows = fold["rows"]
        assert {r["model"] for r in rows} == {held} and len(rows) == 8  # every batch and math mode
        fitted = fold["fitted"]
        for r in rows:
            pred = DeviceProfile.from_spec(device_spec(r["device"], fitted), profiles[held]).step_compute_s(r["batch"])
            err = pred / meas[(held, r["batch"], r["device"])] - 1
            assert pred == pytest.approx(r["predicted_s"], rel=1e-9) and err == pytest.approx(r["error"], abs=1e-9)
            errors.append(abs(err))
        assert fold["median_abs_error"] == pytest.approx(statistics.median(abs(r["error"]) for r in rows))
    assert res["lomo_summary"]["median_abs_error"] == pytest.approx(statistics.median(errors))
    assert res["lomo_summary"]["worst_abs_error"] == pytest.approx(max(errors))


def test_fitted_points_are_flagged_and_the_docs_carry_the_tables(fit):
    res, _ = fit
    assert {r["used"] for r in res["h200_fit"]} == {"fit"}
    assert all(r["used"] == "held out" for fold in res["lomo"].values() for r in fold["rows"])
    by_source = {f.source: f for f in FIGURES}
    for r in res["published"]:
        assert r["used"] == ("fit" if by_source[r["source"]].fit else "held out")
    spec = importlib.util.spec_from_file_location("fit_compute_model", ROOT / "benchmarks" / "fit_compute_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    doc = (ROOT / "docs" / "performance-model.md").read_text()
    assert f"{mod.BEGIN}\n{mod.tables(res)}{mod.END}" in doc


def test_published_checks_named_in_the_issue(fit):
    res, profiles = fit
    for r in res["published"]:
        f = next(f for f in FIGURES if f.source == r["source"])
        dev = DeviceProfile.from_table(f.device, profiles[f.model])
        step = dev.step_compute_s(f.batch) + (profiles[f.model].params * dev.update_s_per_param if f.update else 0.0)
        assert f.batch / step == pytest.approx(r["predicted"], rel=0.02)
        if f.source.startswith(("DLE", "u39kun")):  # V100 ResNet-50 and VGG-16, A100 ResNet-50 TF32: within 15 %
            assert abs(f.batch / step / f.images_per_s - 1) <= 0.15, r


def test_calibrate_refuses_without_gpu_and_runs_on_cpu(tmp_path, capsys, monkeypatch):
    import torch

    from stanza_core.perf.__main__ import main
    from stanza_core.perf.calibrate import layers_file

    out = tmp_path / "cpu.json"
    with monkeypatch.context() as m:  # no GPU visible to this process, whatever the machine has
        m.setattr(torch.cuda, "is_available", lambda: False)
        m.setattr(torch.cuda, "device_count", lambda: 0)
        assert main(["calibrate", "--model", "tiny_cnn", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no CUDA GPU visible" in err and not out.exists()
    # the same code path with wall-clock timers
    assert main(["calibrate", "--model", "tiny_cnn", "--device", "cpu", "--image-size", "32", "--num-classes", "10",
                 "--batch", "4", "--warmup", "1", "--reps", "3", "--out", str(out)]) == 0
    prof = DeviceProfile(**json.loads(out.read_text()))  # what replay and perf read
    assert prof.conv_fwd_s > 0 and prof.conv_bwd_s > 0 and prof.fc_fwd_s > 0 and prof.update_s_per_param > 0
    rec = json.loads(layers_file(out).read_text())
    convs = [r for r in rec["layers"] if r["kind"] == "Conv2d"]
    assert len(convs) == 2 and all(r["fwd_s"] > 0 and r["part"] == "conv" for r in convs)
    assert {r["part"] for r in rec["layers"] if r["kind"] == "Linear"} == {"fc"}
    # perf accepts the file as a device
    capsys.readouterr()
    assert main(["--model", "tiny_cnn", "--image-size", "32", "--num-classes", "10", "--nodes", "4",
                 "--device", str(out)]) == 0
    assert "cpu (measured" in capsys.readouterr().out
