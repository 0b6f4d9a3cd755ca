"""`perf calibrate` measures the step as it runs: totals from the unhooked run, per-layer hooks
only apportion them. On CPU (wall-clock timers), a hooked run made slower on purpose by a
test-only slow hook must not reach the profile."""
import json
import time

import pytest
import torch.nn as nn

from stanza_core.perf import DeviceProfile
from stanza_core.perf import calibrate as cal
from stanza_core.perf.__main__ import main

TINY = ["calibrate", "--model", "tiny_cnn", "--device", "cpu", "--image-size", "32", "--num-classes", "10",
        "--batch", "4", "--warmup", "1", "--reps", "3"]
PARTS = ("conv_fwd", "fc_fwd", "fc_bwd", "conv_bwd")


class VirtualClock(cal._Clock):
    """A clock that moves only when told: 1 us per mark, plus what `advance` adds. With it the
    two runs' times are exact, whatever else this machine is doing."""

    now = 0.0

    def mark(self):
        VirtualClock.advance(1e-6)
        return VirtualClock.now

    @classmethod
    def advance(cls, seconds):
        cls.now += seconds

    def seconds(self, a, b):
        return b - a

    def sync(self):
        pass


def run(tmp_path, capsys, args=TINY):
    out = tmp_path / "cpu.json"
    assert main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    return DeviceProfile(**json.loads(out.read_text())), json.loads(cal.layers_file(out).read_text()), printed


def check_unhooked_totals(prof, rec, printed):
    """The profile is the unhooked run's; per-layer times sum to it; both totals, the ratio and
    the one-line notice (ratio > 1.1) are there."""
    b, un, hk = rec["batch"], rec["unhooked"], rec["hooked"]
    assert (prof.conv_fwd_s, prof.fc_fwd_s, prof.fc_bwd_s, prof.conv_bwd_s) == tuple(un[k] / b for k in PARTS)
    for part in ("conv", "fc"):
        for ph in ("fwd", "bwd"):
            rows = [r for r in rec["layers"] if r["part"] == part]
            assert sum(r[f"{ph}_s"] or 0 for r in rows) * b == pytest.approx(un[f"{part}_{ph}"], rel=1e-9)
    ratio = rec["hooked_over_unhooked"]["step"]
    assert ratio == pytest.approx(hk["step"] / un["step"]) and ratio > 1.1
    notes = [line for line in printed.splitlines() if line.startswith("note: the per-layer hooks")]
    assert len(notes) == 1 and f"{ratio:.2f}x longer" in notes[0] and cal.inflation_notice(rec) == notes[0]


def test_a_slow_hooked_run_does_not_reach_the_profile(tmp_path, capsys, monkeypatch):
    """Virtual clock: every hooked layer forward takes 3 ms more; the profile, the per-layer
    times and the unhooked totals do not see it."""
    monkeypatch.setattr(cal, "_Clock", VirtualClock)
    real = cal._install_layer_hooks
    monkeypatch.setattr(cal, "_install_layer_hooks", lambda leaves, events, clock: real(leaves, events, clock) + [
        m.register_forward_pre_hook(lambda mod, i: VirtualClock.advance(3e-3)) for _, m in leaves])
    prof, rec, printed = run(tmp_path, capsys)
    check_unhooked_totals(prof, rec, printed)
    un, hk = rec["unhooked"], rec["hooked"]
    conv_leaves = sum(1 for r in rec["layers"] if r["part"] == "conv")
    assert un["conv_fwd"] == pytest.approx(1e-6)  # one mark after the start mark: nothing else ran
    assert hk["conv_fwd"] == pytest.approx(conv_leaves * (3e-3 + 2e-6) + 1e-6)  # 3 ms and two marks a layer
    assert rec["hooked_over_unhooked"]["conv_fwd"] == pytest.approx(hk["conv_fwd"] / un["conv_fwd"])
    assert all(r["hooked_fwd_s"] * 4 == pytest.approx(3e-3 + 1e-6) for r in rec["layers"])


def test_a_slow_hooked_run_on_the_wall_clock(tmp_path, capsys, monkeypatch):
    """The same with real timers: a test-only hook sleeps 50 ms before every layer's forward of
    the hooked run (11 layers: 0.55 s a step, far above this machine's noise)."""
    real = cal._install_layer_hooks
    monkeypatch.setattr(cal, "_install_layer_hooks", lambda leaves, events, clock: real(leaves, events, clock) + [
        m.register_forward_pre_hook(lambda mod, i: time.sleep(0.05)) for _, m in leaves])
    prof, rec, printed = run(tmp_path, capsys)
    check_unhooked_totals(prof, rec, printed)
    assert rec["hooked"]["step"] - rec["unhooked"]["step"] > 0.5 * 11 * 0.05


class Sleep(nn.Module):
    """Stands for a compute-bound layer: 40 ms (virtual) in both runs; the hooks' marks cost
    microseconds against it."""

    def forward(self, x):
        VirtualClock.advance(0.04)
        return x * 1.0


def test_no_notice_when_the_hooks_cost_little(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cal, "_Clock", VirtualClock)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), Sleep(), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(4, 10))
    monkeypatch.setattr(cal, "get_model", lambda name, classes: model)
    prof, rec, printed = run(tmp_path, capsys)
    ratio = rec["hooked_over_unhooked"]["step"]
    assert rec["unhooked"]["step"] == pytest.approx(0.04 + 5e-6) and 1.0 < ratio < 1.01
    assert "note:" not in printed and cal.inflation_notice(rec) is None
    assert prof.conv_fwd_s * 4 == pytest.approx(rec["unhooked"]["conv_fwd"])


@pytest.mark.parametrize("ratio,shown", [(1.05, False), (1.10, False), (1.11, True), (2.7, True)])
def test_the_notice_threshold_is_ten_percent(ratio, shown):
    rec = {"hooked_over_unhooked": {"step": ratio}, "hooked": {"step": ratio * 0.01}, "unhooked": {"step": 0.01}}
    assert (cal.inflation_notice(rec) is not None) == shown


def test_a_new_record_drives_replay_as_measured(tmp_path, capsys):
    """calibrate's record is a device: the resolver reads it as a measured record whose layers
    sum to the unhooked totals (nothing left to rescale)."""
    from stanza_core.perf import device_profile, named_profile

    prof, rec, _ = run(tmp_path, capsys)
    dev = device_profile(str(cal.layers_file(tmp_path / "cpu.json")), named_profile("tiny_cnn", 32, 10, 4), 4)
    assert dev.source == "measured record" and "scaled to unhooked part totals" in dev.profile.name
    # the whole step is the unhooked one (a layer next to the cut may sit on the other side of the
    # profile's split than of calibrate's: the resolver sums layers by the profile's parts)
    assert dev.profile.step_compute_s(4) == pytest.approx(prof.step_compute_s(4), rel=1e-9)
