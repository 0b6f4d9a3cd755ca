"""The paper-regime runs with replayed compute, without running them: the dilation rule, one
MeasureSpec per model x N x target, the batch per data worker, the model's prediction of a
replayed run (the replay device's profile, dilated) and what the figures say they show."""
import pytest

from stanza_core import viz
from stanza_core.experiments import replayed, validation
from stanza_core.experiments.spec import MeasureSpec
from stanza_core.netem.facts import MAX_AGGREGATE_MBIT, max_link_mbit, payload_gbps
from stanza_core.perf import Cluster, DeviceProfile, named_profile, predict, replay_dilation


def test_dilation_rule_and_specs():
    s = replayed.ReplaySet(models=["alexnet", "vgg16"], nodes=[4, 8], strategies=["ps", "ddp", "stanza"],
                           fc_workers=[1], target_gbps=[10.0, 100.0])
    # perf.replay_dilation's rule with the emulator's facts: all N links at once within the
    # aggregate this machine holds (N x 1000 x target / MAX_AGGREGATE_MBIT), rounded up.
    for spec in s.specs:
        g = spec.target_gbps[0]
        want = replay_dilation(g, spec.nodes, max_link_mbit=max_link_mbit(9000), max_aggregate_mbit=MAX_AGGREGATE_MBIT)
        assert spec.dilation == want >= spec.nodes * 1000 * g / MAX_AGGREGATE_MBIT
    assert len(s.specs) == 8 and replayed.ReplaySet(models=["alexnet"], nodes=[4], strategies=["ddp"], fc_workers=[1],
                                                    target_gbps=[10.0], dilation=1e4).specs[0].dilation == 1e4
    spec = s.specs[0]
    assert (spec.model, spec.image_size, spec.num_classes, spec.compute) == ("alexnet", 224, 1000, "replay")
    # 32 samples per data worker: ddp splits 128 over 4 workers, stanza k=1 96 over 3 CONV workers.
    assert spec.global_batch_of("ddp", 0) == 128 and spec.global_batch_of("stanza", 1) == 96
    assert spec.run_config("stanza", 1, 500.0).global_batch == 96
    ds = sorted({x.dilation for x in s.specs})
    assert f"D = {', '.join(f'{d:g}' for d in ds)})" in replayed.caption(s)
    assert "measured: communication, for real" in replayed.caption(s)


@pytest.mark.parametrize("change, message", [
    ({"compute": "real", "batch_per_worker": 32, "global_batch": 0}, "batch_per_worker needs compute='replay'"),
    ({"batch_per_worker": 32, "global_batch": 64}, "give the batch as global_batch or as batch_per_worker"),
    ({"replay_device": "p100"}, "unknown replay_device 'p100'"),
    ({"dilation": 0}, "dilation must be a non-empty list of positive numbers"),
])
def test_replayed_spec_checks_in_one_line(change, message):
    ok = dict(model="alexnet", image_size=224, num_classes=1000, nodes=4, strategies=["ddp"], fc_workers=[1],
              batch_per_worker=32, steps=3, target_gbps=[10.0], compute="replay", replay_device="v100", dilation=20.0)
    MeasureSpec(**ok)
    with pytest.raises(ValueError) as e:
        MeasureSpec(**{**ok, **change})
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_replayed_run_is_predicted_with_the_dilated_device_profile():
    cfg = {"model": "alexnet", "image_size": 224, "num_classes": 1000, "nodes": 4, "global_batch": 0, "mtu": 9000,
           "delay_ms": 0.0, "compute": "replay", "replay_device": "v100", "dilation": 20.0}
    run = {"strategy": "stanza", "fc_workers": 1, "link_mbit": 500.0, "target_gbps": 10.0, "global_batch": 96,
           "throughput": 10.0, "step_time_median_s": 9.6, "bytes_per_step": 1}
    (row,) = validation.predict_runs({"config": cfg, "runs": [run], "timing_rounds": []})
    prof = named_profile("alexnet", 224, 1000)
    table = DeviceProfile.from_table("v100", prof)
    dev = validation.replay_profile(prof, "v100", 20.0)
    assert dev.conv_fwd_s == pytest.approx(20 * table.conv_fwd_s, rel=1e-12)
    assert dev.update_s_per_param == pytest.approx(20 * table.update_s_per_param, rel=1e-12)
    p = predict(prof, Cluster(4, payload_gbps(500.0, 9000), 50e-6, dev), "stanza", 1, global_batch=96)
    assert row["predicted_throughput"] == pytest.approx(p.throughput, rel=1e-12)
    assert row["predicted_bytes_per_step"] == p.bytes_per_step
    assert row["error"] == pytest.approx(p.throughput / 10.0 - 1, rel=1e-12)


def test_replayed_figure_says_what_is_measured_and_what_replayed():
    s = replayed.ReplaySet(models=["alexnet"], nodes=[4], strategies=["ddp", "stanza"], fc_workers=[1],
                           target_gbps=[10.0])
    bench = {"spec": s.specs[0].to_dict(), "unavailable": None, "summary": [
        {"strategy": "ddp", "fc_workers": 0, "target_gbps": 10.0, "link_mbit": 500.0, "throughput": 2.0,
         "speedup_vs_ps": None, "speedup_vs_ddp": 1.0},
        {"strategy": "stanza", "fc_workers": 1, "target_gbps": 10.0, "link_mbit": 500.0, "throughput": 8.0,
         "speedup_vs_ps": None, "speedup_vs_ddp": 4.0}]}
    out = replayed.summary(s, [bench])
    d = out["by_model"]["alexnet"]["4"]["10"]
    D = s.specs[0].dilation
    assert d["throughput"] == {"ddp": 2.0 * D, "stanza_k1": 8.0 * D} and d["stanza_vs_ddp"] == 4.0  # x D
    fig = viz.throughput.replayed_throughput(out, "Paper regime")
    assert any(f"replayed: compute (the v100 table profile, D = {D:g})" in a.text for a in fig.layout.annotations)
    assert {t.name for t in fig.data} == {"ddp", "stanza k=1"}
