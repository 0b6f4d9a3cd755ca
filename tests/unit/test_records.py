"""Measured per-layer records (perf/records.py) and the one device resolver (perf/resolve.py):
normalising to the unhooked total, interpolating between batches, names and one-line errors."""
import json

import pytest

from stanza_core.perf import MEASURED_DEVICES, device_names, device_profile, named_profile
from stanza_core.perf.records import RECORDS_DIR, MeasuredLayers, for_model, parse_record


def record(batch, fwd, bwd, **extra):
    """A two-layer record: conv layer "c" and fc layer "f" (seconds per sample)."""
    return {"model": "m", "image_size": 32, "batch": batch, "device": "test", "tf32": None,
            "layers": [{"name": "c", "part": "conv", "fwd_s": fwd[0], "bwd_s": bwd[0]},
                       {"name": "f", "part": "fc", "fwd_s": fwd[1], "bwd_s": bwd[1]}], **extra}


def test_a_plain_step_total_rescales_every_layer_by_one_factor():
    r = parse_record(record(10, (1e-3, 1e-3), (2e-3, None), plain_fwd_bwd_s=0.02), "x")  # layers sum to 40 ms
    assert (r.fwd, r.bwd) == ({"c": pytest.approx(5e-3), "f": pytest.approx(5e-3)},
                              {"c": pytest.approx(1e-2), "f": 0.0})
    assert r.scaled_to == "the plain step"


def test_unhooked_part_totals_rescale_each_part_and_phase():
    r = parse_record(record(10, (1e-3, 1e-3), (2e-3, 1e-3), unhooked={
        "conv_fwd": 0.005, "conv_bwd": 0.02, "fc_fwd": 0.01, "fc_bwd": 0.001}), "x")
    assert (r.fwd["c"], r.bwd["c"], r.fwd["f"], r.bwd["f"]) == pytest.approx((0.005, 0.02, 0.01, 0.001))
    assert r.scaled_to == "unhooked part totals"


def test_a_record_without_an_unhooked_total_says_so():
    r = parse_record(record(10, (1e-3, 1e-3), (2e-3, 1e-3)), "old.json")
    assert r.fwd["c"] == pytest.approx(1e-2) and r.scaled_to == ""
    assert "no unhooked total, may be inflated by the hooks" in MeasuredLayers("old.json", (r,)).label(10)


def test_interpolation_is_linear_in_batch_of_each_layers_per_call_time():
    lo = parse_record(record(16, (1e-3, 1e-4), (2e-3, 2e-4)), "a")  # per call at 16: c fwd 16 ms
    hi = parse_record(record(32, (1e-3, 1e-4), (1e-3, 2e-4)), "b")  # at 32: c fwd 32 ms, c bwd 32 ms
    m = MeasuredLayers("dev", (lo, hi))
    assert m.call_s("c", "fwd", 24) == pytest.approx(0.024) and m.call_s("c", "bwd", 24) == pytest.approx(0.032)
    assert m.call_s("c", "bwd", 16) == pytest.approx(0.032) and m.call_s("c", "bwd", 20) == pytest.approx(0.032)
    # outside: per-call time held below, per-sample time held above; labelled "extrapolated"
    assert m.call_s("c", "fwd", 4) == pytest.approx(0.016) and m.call_s("c", "fwd", 64) == pytest.approx(0.064)
    assert [m.extrapolated(b) for b in (15, 16, 32, 33)] == [True, False, False, True]
    assert "(extrapolated)" in m.label(64) and "extrapolated" not in m.label(24)
    assert m.call_s("absent", "fwd", 24) == 0.0


def test_h200_named_devices_resolve_to_the_package_records():
    assert {"h200-measured", "h200-fp32-measured"} <= set(device_names()) and set(MEASURED_DEVICES) <= set(device_names())
    prof = named_profile("vgg16", 224, 1000, 32)
    dev = device_profile("h200-fp32-measured", prof, 64)
    d = json.loads((RECORDS_DIR / "h200" / "vgg16-b64-fp32.json").read_text())
    # at a measured batch the profile's step is the record's plain fwd+bwd, per sample x batch
    assert dev.source == "measured record" and dev.profile.step_compute_s(64) == pytest.approx(d["plain_fwd_bwd_s"])
    assert dev.profile.update_s_per_param == d["profile"]["update_s_per_param"]
    assert "tf32 off" in dev.caption and "batches 16, 32, 64, 128, at batch 64;" in dev.caption
    assert for_model("h200-measured", "vgg16").batches == [16, 32, 64, 128]
    # a table row through the same resolver
    table = device_profile("v100", prof)
    assert (table.source, table.caption, table.measured) == ("table", "v100 (table)", None)


@pytest.mark.parametrize("spec,model,size,classes,msg", [
    ("tpu9", "alexnet", 224, 1000, "unknown device 'tpu9'; expected one of: v100"),
    ("h200-measured", "tiny_cnn", 32, 10, "h200-measured has no measured record of tiny_cnn; it has: alexnet"),
    ("h200-measured", "alexnet", 160, 1000, "measured at 224x224, not 160x160"),
    ("h200-measured", "alexnet", 224, 10, "measured with 1000 classes, not 10"),
])
def test_bad_names_and_mismatches_are_one_line(spec, model, size, classes, msg):
    with pytest.raises(ValueError, match=msg) as e:
        device_profile(spec, named_profile(model, size, classes, 32))
    assert len(str(e.value).splitlines()) == 1
    if spec == "tpu9":
        assert "h200-measured" in str(e.value) and "PATH.json" in str(e.value)


def test_a_record_of_another_model_is_refused(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record(4, (1e-3, 1e-3), (1e-3, 1e-3))))
    with pytest.raises(ValueError, match="measured m, not tiny_cnn"):
        device_profile(str(path), named_profile("tiny_cnn", 32, 10, 4))


def test_any_row_the_device_table_holds_resolves_everywhere(monkeypatch, capsys, as_rank0_of, tmp_path):
    """The resolver takes whatever DEVICE_TABLE holds (a row added here, as the model's own h200
    rows are): perf --device and train --replay-device accept it, named as a table row."""
    import dataclasses

    from stanza_core import train
    from stanza_core.perf import DEVICE_TABLE
    from stanza_core.perf.__main__ import main

    monkeypatch.setitem(DEVICE_TABLE, "x200", dataclasses.replace(DEVICE_TABLE["h100"], name="x200"))
    assert device_profile("x200", named_profile("tiny_cnn", 32, 10, 4)).caption == "x200 (table)"
    assert main(["--model", "tiny_cnn", "--image-size", "32", "--num-classes", "10", "--nodes", "4",
                 "--device", "x200"]) == 0
    assert "device x200 (table)" in capsys.readouterr().out
    as_rank0_of(1)
    m = tmp_path / "m.json"
    assert train.main(["--strategy", "local", "--steps", "2", "--global-batch", "4", "--compute", "replay",
                       "--replay-device", "x200", "--metrics", str(m), "--quiet"]) == 0
    d = json.loads(m.read_text())["replay"]
    assert (d["device"], d["source"]) == ("x200 (table)", "table")
