"""The calibrated compute model: each layer kind costed by its rule, a datasheet-only device,
and every published figure it was fitted to or held out from within 15 % (docs/performance-model.md)."""
import dataclasses

import pytest

from stanza_core.anatomy import LayerRow, PartTotals, Profile
from stanza_core.perf import DEVICE_TABLE, DeviceProfile, DeviceSpec, named_profile
from stanza_core.perf.compute import FIGURES, layer_seconds, layer_times

V100 = DEVICE_TABLE["v100"]


def conv(kernel, stride, flops=1e9):
    return LayerRow("c", "Conv2d", "conv", 1000, flops, 100, 400, 200, 1, kernel, stride)


def test_each_layer_kind_follows_its_rule():
    rate = V100.conv_peak_flops * V100.conv_efficiency
    f3, b3 = layer_seconds(conv(9, 1), V100)
    assert f3 == pytest.approx(1e9 / (rate * V100.winograd_factor)) and b3 == pytest.approx(2 * f3)
    assert layer_seconds(conv(9, 4), V100)[0] == pytest.approx(1e9 / rate)  # strided: no Winograd
    assert layer_seconds(conv(1, 1), V100)[0] == pytest.approx(1e9 / rate)  # 1x1: a GEMM, no factor
    lin = LayerRow("fc", "Linear", "fc", 10, 4e6, 10, 40, 20)
    assert layer_seconds(lin, V100)[0] == pytest.approx(4e6 / (V100.fc_peak_flops * V100.fc_efficiency))
    bn = LayerRow("bn", "BatchNorm2d", "conv", 2, 0.0, 1000, 4000, 2000)
    mem = V100.mem_bytes_per_s * V100.mem_efficiency
    assert layer_seconds(bn, V100) == pytest.approx((1.5 * 2000 * 4 / mem, 2.5 * 2000 * 4 / mem))
    assert layer_seconds(LayerRow("f", "Flatten", "fc", 0, 0.0, 10, 40, 20), V100) == (0.0, 0.0)


def test_a_device_from_its_datasheet_alone():
    # A user's device: peaks and bandwidth from a datasheet; efficiencies default to the fitted ones.
    mine = DeviceSpec("my-a100", 19.5e12, 19.5e12, 2039e9, 0.66, 0.66, 0.80, "from the datasheet", 1.95)
    rows = [conv(9, 1), LayerRow("r", "ReLU", "conv", 0, 0.0, 100, 400, 200),
            LayerRow("fc", "Linear", "fc", 4000, 8e3, 10, 40, 4010)]
    prof = Profile("toy", (3, 8, 8), 4, "fc", 100, PartTotals(1000, 1e9), PartTotals(4000, 8e3), rows)
    d, ref = DeviceProfile.from_spec(mine, prof), DeviceProfile.from_table("a100-fp32", prof)
    assert d.conv_fwd_s == pytest.approx(ref.conv_fwd_s) and d.fc_bwd_s == pytest.approx(ref.fc_bwd_s)
    assert d.conv_fwd_s == pytest.approx(sum(t["fwd_s"] for t in layer_times(prof, mine) if t["part"] == "conv"))
    assert "datasheet" in d.name


@pytest.mark.slow
def test_every_published_figure_within_15_percent():
    profiles = {m: named_profile(m) for m in {f.model for f in FIGURES}}
    for f in FIGURES:
        dev = DeviceProfile.from_table(f.device, profiles[f.model])
        step = sum(dev.time_s(p, ph, f.batch) for p in ("conv", "fc") for ph in ("fwd", "bwd"))
        step += profiles[f.model].params * dev.update_s_per_param if f.update else 0.0
        assert f.batch / step == pytest.approx(f.images_per_s, rel=0.15), dataclasses.asdict(f)


def test_calibrate_refuses_without_gpu_and_runs_on_cpu(tmp_path, capsys, monkeypatch):
    import json

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
