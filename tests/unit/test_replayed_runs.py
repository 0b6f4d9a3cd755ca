"""The paper-regime runs with replayed compute, without running them: the dilation rule, one
MeasureSpec per model x N x target, the batch per data worker, the model's prediction of a
replayed run (the replay device's profile, dilated) and what the figures say they show."""
import dataclasses
import importlib.util
import json
import math
import types
from pathlib import Path

import pytest

pytest.importorskip("plotly", reason="figures and notebook helpers need plotly (some GPU VM images lack it)")

from stanza_core import registry, viz
from stanza_core.runs import plan, replay_bench, replayed
from stanza_core.experiments import validation
from stanza_core.runs.cache import Cache
from stanza_core.runs.dilation_rule import LINKS_ONLY, DilationRule
from stanza_core.runs.measurement import Measurement, summarize
from stanza_core.runs.spec import MeasureSpec
from stanza_core.runs.runconfig import RunConfig
from stanza_core.variant import Variant
from stanza_core.runs.store import points
from stanza_core.netem import facts
from stanza_core.netem.facts import MAX_AGGREGATE_MBIT, MAX_PAYLOAD_SCALE, max_link_mbit, payload_gbps, payload_per_wire_byte
from stanza_core.perf import Cluster, DeviceProfile, emulated_bandwidth, named_profile, predict, replay_dilation

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _benchmark(name: str):
    """A benchmark script as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_dilation_rule_and_specs():
    s = replayed.ReplaySet(models=["alexnet", "vgg16"], nodes=[4, 8], strategies=["ps", "ddp", "stanza"],
                           fc_workers=[1], target_gbps=[10.0, 100.0])
    # perf.replay_dilation's rule with the emulator's facts: all N links at once within the
    # aggregate this machine holds (N x 1000 x target / MAX_AGGREGATE_MBIT), rounded up.
    for spec in s.specs:
        g = spec.target_gbps[0]
        want = replay_dilation(g, spec.nodes, max_link_mbit=max_link_mbit(9000), max_aggregate_mbit=MAX_AGGREGATE_MBIT)
        assert spec.dilation_rule.floor == 1.0  # the user's floor: each configuration's plan sets its own D
        assert {p.key()["dilation_floor"] for p in points(spec)} == {want} >= {spec.nodes * 1000 * g / MAX_AGGREGATE_MBIT}
    assert s.link_floors() == [40.0, 80.0, 400.0, 800.0]
    assert len(s.specs) == 8 and replayed.ReplaySet(models=["alexnet"], nodes=[4], strategies=["ddp"], fc_workers=[1],
                                                    target_gbps=[10.0], dilation_rule=DilationRule(floor=1e4)
                                                    ).link_floors() == [1e4]
    # one dedicated server (5 nodes): its link carries every byte, 2 links' worth at once -> D 20,
    # not the 50 of five busy links; the colocated ps and ddp beside it keep the 40 of four
    srv = replayed.ReplaySet(models=["alexnet"], nodes=[4], strategies=["ps", "ddp"], fc_workers=[1],
                             target_gbps=[10.0], ps_servers=[0, 1])
    floors = {p.config.label: p.key()["dilation_floor"] for p in points(srv.specs[0])}
    assert floors == {"ps": 40.0, "ps S=1": 20.0, "ddp": 40.0}
    spec = s.specs[0]
    assert (spec.model, spec.image_size, spec.num_classes, spec.compute) == ("alexnet", 224, 1000, "replay")
    # 32 samples per data worker: ddp splits 128 over 4 workers, stanza k=1 96 over 3 CONV workers.
    assert spec.global_batch_of(Variant("ddp")) == 128 and spec.global_batch_of(Variant("stanza", fc_workers=1)) == 96
    assert spec.run_config(Variant(strategy="stanza", fc_workers=1), 500.0).global_batch == 96
    assert "D = 40, 80, 400, 800, per configuration" in replayed.caption(s)  # the links' floors before any run
    assert "measured: communication, for real" in replayed.caption(s)


@pytest.mark.parametrize("change, message", [
    ({"compute": "real", "batch_per_worker": 32, "global_batch": 0}, "batch_per_worker needs compute='replay'"),
    ({"batch_per_worker": 32, "global_batch": 64}, "give the batch as global_batch or as batch_per_worker"),
    ({"replay_device": "p100"}, "unknown replay_device 'p100'"),
    ({"dilation_rule": {"floor": 20.0}}, "dilation_rule must be a runs.dilation_rule.DilationRule, got {"),
    ({"compute": "real", "batch_per_worker": 0, "global_batch": 96, "dilation_rule": DilationRule()},
     "the engine term of D (dilation_rule.engine) needs compute='replay'"),
    ({"max_link_mbit": 900.0}, "max_link_mbit applies to real compute only"),
])
def test_replayed_spec_checks_in_one_line(change, message):
    ok = dict(model="alexnet", image_size=224, num_classes=1000, nodes=4, strategies=["ddp"], fc_workers=[1],
              batch_per_worker=32, steps=3, target_gbps=[10.0], compute="replay", replay_device="v100",
              dilation_rule=DilationRule(floor=20.0))
    MeasureSpec(**ok)
    with pytest.raises(ValueError) as e:
        MeasureSpec(**{**ok, **change})
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_replayed_run_is_predicted_with_the_dilated_device_profile():
    cfg = {"model": "alexnet", "image_size": 224, "num_classes": 1000, "nodes": 4, "global_batch": 0, "mtu": 9000,
           "delay_ms": 0.0, "compute": "replay", "replay_device": "v100", "dilation": 20.0}
    run = {"strategy": "stanza", "fc_workers": 1, "link_mbit": 500.0, "target_gbps": 10.0, "global_batch": 96,
           "throughput": 10.0, "step_time_median_s": 9.6, "bytes_per_step": 1}
    (row,) = validation.predict_runs(Measurement(spec=cfg, config=cfg, runs=[run]))
    prof = named_profile("alexnet", 224, 1000)
    table = DeviceProfile.from_table("v100", prof)
    dev = validation.replay_profile(prof, "v100", 20.0)
    assert dev.conv_fwd_s == pytest.approx(20 * table.conv_fwd_s, rel=1e-12)
    assert dev.update_s_per_param == pytest.approx(20 * table.update_s_per_param, rel=1e-12)
    p = predict(prof, Cluster(4, payload_gbps(500.0, 9000), 50e-6, dev), Variant("stanza", fc_workers=1), global_batch=96)
    assert row["predicted_throughput"] == pytest.approx(p.throughput, rel=1e-12)
    assert row["predicted_bytes_per_step"] == p.bytes_per_step
    assert row["error"] == pytest.approx(p.throughput / 10.0 - 1, rel=1e-12)
    # with its engine seconds measured, a replayed run is predicted as the emulated run: the
    # dilated step plus those seconds; the error without them is kept beside
    out = validation.validate([Measurement(spec=cfg, config=cfg, runs=[{**run, "engine_s": 0.3}])])
    (r,) = out["rows"]
    q = predict(prof, Cluster(4, payload_gbps(500.0, 9000), 50e-6, validation.replay_profile(prof, "v100", 20.0, 0.3)), Variant("stanza", fc_workers=1), global_batch=96)
    assert q.iteration_s > p.iteration_s and r["engine_s"] == 0.3
    assert r["predicted_throughput"] == pytest.approx(q.throughput, rel=1e-12)
    assert r["error_without_engine"] == pytest.approx(row["error"], rel=1e-12)
    assert out["replayed_summary"]["median_abs_error"] == pytest.approx(abs(r["error"]), rel=1e-12)
    assert out["replayed_summary_without_engine"]["median_abs_error"] == pytest.approx(abs(row["error"]), rel=1e-12)
    assert "engine seconds, measured at D = 1" in out["caption"]
    # a run with stanza's options (run_config's rows carry them) is its own row, predicted with them
    hybrid = {**run, "fc_conv_share": 0.25, "micro_batches": 2}
    plain, opt = validation.predict_runs(Measurement(spec=cfg, config=cfg, runs=[run, hybrid]))
    q = predict(prof, Cluster(4, payload_gbps(500.0, 9000), 50e-6, dev), Variant("stanza", fc_workers=1, fc_conv_share=0.25, micro_batches=2), global_batch=96)
    assert plain["label"] == "stanza k=1" and plain["predicted_throughput"] == row["predicted_throughput"]
    assert opt["label"] == "stanza k=1 share=0.25 M=2" and (opt["fc_conv_share"], opt["micro_batches"]) == (0.25, 2)
    assert opt["predicted_throughput"] == pytest.approx(q.throughput, rel=1e-12) != plain["predicted_throughput"]
    # ps with one dedicated server node is not the colocated ps: its own row, the server a node of the cluster
    ps = {**run, "strategy": "ps", "fc_workers": 0, "global_batch": 128}
    colocated, dedicated = validation.predict_runs(Measurement(spec=cfg, config=cfg,
                                                               runs=[ps, {**ps, "ps_servers": 1}]))
    q = predict(prof, Cluster(5, payload_gbps(500.0, 9000), 50e-6, dev), Variant("ps", ps_servers=1), global_batch=128)
    assert (colocated["label"], dedicated["label"]) == ("ps", "ps S=1")
    assert dedicated["predicted_throughput"] == pytest.approx(q.throughput, rel=1e-12)


def test_replayed_figure_says_what_is_measured_and_what_replayed():
    s = replayed.ReplaySet(models=["alexnet"], nodes=[4], strategies=["ddp", "stanza"], fc_workers=[1],
                           target_gbps=[10.0])
    D = s.link_floors()[0]
    # the runs' summary (measurement.summarize): stanza k=1 ran at its own D, twice the links' one
    runs = [{"strategy": "ddp", "fc_workers": 0, "target_gbps": 10.0, "link_mbit": 500.0, "dilation": D,
             "throughput": 2.0, "bytes_per_step": 1},
            {"strategy": "stanza", "fc_workers": 1, "target_gbps": 10.0, "link_mbit": 250.0, "dilation": 2 * D,
             "throughput": 4.0, "bytes_per_step": 1}]
    bench = Measurement(spec=s.specs[0].to_dict(), config=s.specs[0].to_dict(), runs=runs, summary=summarize(runs))
    out = replayed.summary(s, [bench])
    d = out["by_model"]["alexnet"]["4"]["10"]
    assert d["throughput"] == {"ddp": 2.0 * D, "stanza_k1": 8.0 * D} and d["stanza_vs_ddp"] == 4.0  # x each D
    assert d["dilation"] == {"ddp": D, "stanza_k1": 2 * D} and d["link_mbit"] == {"ddp": 500.0, "stanza_k1": 250.0}
    assert d["stanza_vs_ps"] is None and d["stanza_fc_workers"] == 1
    assert [r["speedup_vs_ddp"] for r in bench.summary] == [1.0, 4.0]  # on the target, not at each D here
    fig = viz.throughput.replayed_throughput(out, "Paper regime")
    assert any(f"replayed: compute (the v100 table profile, D = {D:g}, {2 * D:g}," in a.text
               for a in fig.layout.annotations)
    assert {t.name for t in fig.data} == {"ddp", "stanza k=1"}


def test_replay_link_is_the_dilation_rule_then_the_bandwidth_mapping():
    for gbps, n, mtu in [(10.0, 4, 9000), (100.0, 8, 9000), (0.01, 2, 1500)]:
        link = plan.replay_link(gbps, n, mtu=mtu)
        d = replay_dilation(gbps, n, max_link_mbit=max_link_mbit(mtu), max_aggregate_mbit=MAX_AGGREGATE_MBIT)
        assert link.dilation == d and link.payload_gbps == emulated_bandwidth(gbps, dilation=d)
        assert link.wire_mbit == 1000 * link.payload_gbps / payload_per_wire_byte(mtu)  # wire rate carrying it
        assert payload_gbps(link.wire_mbit, mtu) == pytest.approx(gbps / d, rel=1e-12)
        assert link.model_gbps == pytest.approx(gbps, rel=1e-12)
    assert plan.replay_link(10.0, 4).dilation == 40
    assert plan.replay_link(10.0, 4, min_dilation=60).dilation == 60
    # the engine term: 3 s of engine work per step within 5 % of D x 0.5 s raises D from 40 to 120
    assert plan.replay_link(10.0, 4, target_step_s=0.5, engine_s=3.0).dilation == 120
    assert plan.replay_link(10.0, 4, target_step_s=0.5, engine_s=0.5).dilation == 40  # 20 < the links' 40
    # runs side by side: the largest D any of them needs, links at that D
    shared = plan.shared_replay_link(10.0, 4, [(0.5, 0.0), (0.5, 3.0), (0.2, 0.1)])
    assert shared == plan.replay_link(10.0, 4, min_dilation=120)
    assert replayed.ReplaySet(models=["alexnet"], nodes=[4], strategies=["ddp"], fc_workers=[1],
                              target_gbps=[10.0]).link_floors() == [40.0]
    assert plan.replay_link(10.0, 5, ps_servers=1).dilation == 20  # one dedicated server among 5 nodes


def test_each_configuration_runs_at_its_own_dilation_with_engine_seconds_measured_once(tmp_path, monkeypatch):
    measured = []
    # 10 Gb/s on 4 nodes: the links' term of D is 40 at F = 1, so F = MAX_PAYLOAD_SCALE (32) brings it to 2
    f = min(40, MAX_PAYLOAD_SCALE)

    def engine_run(cfg, compute_only_s):  # the D = 1 loopback run (tests/dist measures one for real)
        measured.append(cfg)
        assert (cfg.dilation, cfg.compute, cfg.link_mbit) == (1.0, "replay", 1000.0)
        assert compute_only_s == plan.model_step_s(cfg, 1000.0)
        # stanza's messages (AlexNet's activations of one worker: 1.2 MB) would be too small for F = 32
        # at a floor of 100 kB: F falls to 12 and the engine is measured again at it
        p10 = {"ps": 6e7, "ddp": 6e7, "stanza": 1.2e6}[cfg.strategy]
        return {"seconds": {"ps": 0.8, "ddp": 0.5, "stanza": 0.17}[cfg.strategy] / cfg.payload_scale,
                "message_p10_bytes": p10}

    monkeypatch.setattr(plan, "engine_run", engine_run)
    monkeypatch.setattr(plan, "MIN_MESSAGE_BYTES", 100_000)
    # the fan-in bound lifted, so that every strategy here exercises the links' and the messages' rules
    monkeypatch.setattr(plan, "MAX_PAYLOAD_SCALE_FAN_IN", MAX_PAYLOAD_SCALE)
    s = replayed.ReplaySet(models=["alexnet"], nodes=[4], strategies=["ps", "ddp", "stanza"], fc_workers=[1, 2],
                           target_gbps=[10.0])
    (spec,) = s.specs
    plans = spec.plans(Cache(tmp_path))
    scales = {"ps": f, "ddp": f, "stanza k=1": 12, "stanza k=2": 12}
    assert [p.link.payload_scale for p in plans] == [scales[p.label] for p in plans]
    assert [p.engine_s for p in plans] == [0.8 / f, 0.5 / f, 0.17 / 12, 0.17 / 12]
    assert [p.label for p in plans] == ["ps", "ddp", "stanza k=1", "stanza k=2"]
    # each at the links' F, the stanza ones again at the lower F their messages allow
    assert sorted((c.label, c.payload_scale) for c in measured) == sorted(
        [("ps", f), ("ddp", f), ("stanza k=1", f), ("stanza k=2", f), ("stanza k=1", 12), ("stanza k=2", 12)])
    profile = named_profile("alexnet", 224, 1000)
    dev = DeviceProfile.from_table("v100", profile)
    got = {}
    for p in plans:
        cfg, scale = p.config, p.link.payload_scale
        step = predict(profile, Cluster(4, 10.0, device=dev), cfg.variant, global_batch=cfg.global_batch).iteration_s
        assert p.target_step_s == pytest.approx(step, rel=1e-12)
        # the links alone ask for ceil(40 / F); the engine within 5 % of D x the model's step may ask for more
        want = max(math.ceil(40 / scale), replay_dilation(10.0, 4, max_link_mbit=max_link_mbit(9000),
                                                          max_aggregate_mbit=MAX_AGGREGATE_MBIT, engine_s=p.engine_s,
                                                          target_step_s=step, payload_scale=scale))
        # one link rule: payload target / D, the wire rate carrying 1/F of it; the run at both
        assert p.dilation == cfg.dilation == want and p.link.payload_gbps == pytest.approx(10.0 / want, rel=1e-12)
        assert cfg.payload_scale == scale
        assert cfg.link_mbit == pytest.approx(1000 * p.link.payload_gbps / (scale * payload_per_wire_byte(9000)),
                                              rel=1e-6)
        assert p.link.wire_mbit == pytest.approx(cfg.link_mbit, rel=1e-6) and p.link.model_gbps == pytest.approx(10.0)
        # batches per role from the topology: 32 per data worker
        assert p.batch_per_worker == 32 and p.global_batch == 32 * p.topology.data_workers and p.fc_batch == 0
        got[p.label] = want
    assert got["stanza k=1"] > math.ceil(40 / 12)  # stanza k=1's step is the shortest: the engine term lifts D
    measured.clear()  # the engine seconds are in the cache: a second notebook measures none
    again = spec.plans(Cache(tmp_path))
    assert not measured and again == plans
    # without the engine term nothing is measured: the messages are unknown and travel whole (F = 1),
    # and every configuration has the links' D
    plain = dataclasses.replace(s, dilation_rule=LINKS_ONLY).specs[0].plans(Cache(None))
    assert not measured and {p.dilation for p in plain} == {40} and {p.engine_s for p in plain} == {None}
    assert {p.link.payload_scale for p in plain} == {1}
    runs = [{**p.row(), "strategy": p.config.strategy} for p in plans]
    caption = replayed.caption(s, [Measurement(spec=spec.to_dict(), config=spec.to_dict(), runs=runs)])
    assert f"D = {', '.join(f'{d:g}' for d in sorted(set(got.values())))}, per configuration" in caption
    with pytest.raises(ValueError, match="^replay_engine must be true or false, got 'yes'$"):
        DilationRule(engine="yes")


def test_strategies_whose_ranks_send_to_one_move_whole_messages(tmp_path, monkeypatch):
    # netem.facts.MAX_PAYLOAD_SCALE_FAN_IN: a PS's pushes and a Stanza FC worker's gather converge
    # on one link, whose standing queue does not scale with the payload; DDP's ring does not fan in
    assert registry.get("ddp").fan_in is False and registry.get("ps").fan_in and registry.get("stanza").fan_in
    assert facts.MAX_PAYLOAD_SCALE_FAN_IN == 1

    def engine_run(cfg, compute_only_s):
        return {"seconds": 0.5 / cfg.payload_scale, "message_p10_bytes": 6e7}

    monkeypatch.setattr(plan, "engine_run", engine_run)
    s = replayed.ReplaySet(models=["alexnet"], nodes=[4], strategies=["ps", "ddp", "stanza"], fc_workers=[1],
                           target_gbps=[10.0])
    got = {p.label: p.link.payload_scale for p in s.specs[0].plans(Cache(tmp_path))}
    assert got == {"ps": 1, "ddp": min(40, MAX_PAYLOAD_SCALE), "stanza k=1": 1}
    cfg = dataclasses.replace(s.specs[0].plans(Cache(tmp_path))[0].config, payload_scale=1)
    assert plan.config_payload_scale(cfg, 10.0) == 1


@pytest.mark.parametrize("value", ["x", "-1", "nan", "inf", ""])
def test_engine_seconds_argument_is_checked_in_one_line(value):
    with pytest.raises(ValueError, match="^--engine-s must be 'auto' or a number of seconds >= 0"):
        plan.check_engine_s_arg(value)
    cfg = RunConfig(model="tiny_cnn", image_size=16, num_classes=10, nodes=2, strategy="ddp", global_batch=4,
                    steps=2, link_mbit=100.0, compute="replay", replay_device="v100")
    assert plan.engine_seconds_arg("0.25", {}, "k", cfg, 0.1) == 0.25  # a number as given: nothing runs


def _beyond_args(**kw):
    return types.SimpleNamespace(**{"mtu": 9000, "steps": 3, "warmup": 1, "device": "v100", **kw})


def test_beyond_cell_dilation_is_the_old_rule_and_engine_seconds_raise_it():
    bench = _beyond_args(mtu=9000)
    mod = _benchmark("beyond_replay")
    profile = named_profile("tiny_cnn", 224, 1000, 32)
    dev = DeviceProfile.from_table("v100", profile)
    for n, gbps in [(4, 10.0), (4, 100.0), (8, 10.0)]:
        runs = mod.candidates(profile, n, gbps, dev, 32)
        cfgs = {name: mod.run_config_of(bench, "tiny_cnn", n, kw) for name, kw in runs.items()}
        plans = plan.cell_plans(cfgs, gbps, {name: 0.0 for name in runs})
        (link,) = {p.link for p in plans.values()}  # one D and one link rate for the cell
        assert all(p.target_step_s == plan.model_step_s(cfgs[name], gbps) for name, p in plans.items())
        # the rule before --engine-s existed: replay_dilation at (target, N), links at target / D of payload
        old = replay_dilation(gbps, n, max_link_mbit=max_link_mbit(9000), max_aggregate_mbit=MAX_AGGREGATE_MBIT)
        assert link.dilation == old
        assert link.wire_mbit == 1000 * emulated_bandwidth(gbps, dilation=old) / payload_per_wire_byte(9000)
    runs = mod.candidates(profile, 4, 10.0, dev, 32)
    cfgs = {name: mod.run_config_of(bench, "tiny_cnn", 4, kw) for name, kw in runs.items()}
    step = predict(profile, Cluster(4, 10.0, device=dev), **runs["ddp"]).iteration_s
    engine = 0.05 * step * 500  # ddp's engine seconds need D = 500; every run of the cell shares it
    link = plan.cell_plans({k: cfgs[k] for k in ("ddp", "paper stanza")}, 10.0,
                           {"ddp": engine, "paper stanza": 0.0})["paper stanza"].link
    assert link.dilation == 500 == replay_dilation(10.0, 4, max_link_mbit=1000, max_aggregate_mbit=MAX_AGGREGATE_MBIT,
                                                   engine_s=engine, target_step_s=step)


def test_beyond_runs_go_through_the_plans_at_one_dilation_per_cell(tmp_path, monkeypatch):
    mod = _benchmark("beyond_replay")
    ran = []

    def run_config(cfg, timeout_s):  # the emulated cluster is not started here: the configurations are checked
        ran.append(cfg)
        return {"step_time_median_s": 4.0, "steps_s": [5.0, 4.0, 4.0], "bytes_per_step": 7, "ranks": []}

    monkeypatch.setattr(replay_bench, "run_config", run_config)
    out = tmp_path / "beyond.json"
    assert mod.main(["--models", "tiny_cnn", "--nodes", "4", "--target-gbps", "10", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["runs"]
    profile = named_profile("tiny_cnn", 224, 1000, 32)
    runs = mod.candidates(profile, 4, 10.0, DeviceProfile.from_table("v100", profile), 32)
    assert [r["run"] for r in rows] == list(runs)
    assert {r["dilation"] for r in rows} == {40} and {cfg.dilation for cfg in ran} == {40}
    assert len(ran) == len({r["label"] for r in rows})  # a configuration named twice runs once
    for r in rows:
        if "same_as" in r:
            continue
        cfg = next(c for c in ran if c.label == r["label"])
        kw = runs[r["run"]]
        assert (cfg.compute, cfg.replay_device, cfg.global_batch) == ("replay", "v100", kw["global_batch"])
        assert cfg.variant == kw["variant"]
        assert cfg.link_mbit == pytest.approx(r["link_mbit"], rel=1e-6)
        assert r["link_mbit"] == plan.replay_link(10.0, 4).wire_mbit and r["payload_gbps"] == 10.0 / 40
        assert r["target_step_s"] == 4.0 / 40 and r["target_steps_s"] == [5.0 / 40, 4.0 / 40, 4.0 / 40]
        assert r["target_samples_per_s"] == kw["global_batch"] / r["target_step_s"]
        assert r["error"] == pytest.approx(r["target_step_s"] / r["predicted_step_s"] - 1, rel=1e-12)
        assert r["bytes_per_step"] == 7 and r["expected_bytes_per_step"] > 0 and r["engine_s"] == 0.0


def test_a_long_replayed_run_is_given_a_limit_beyond_its_steps(tmp_path, monkeypatch):
    """VGG-16 stanza k=1 on 16 nodes at 100 Gb/s at D = 1600 (its D before payload scaling, here as
    the floor of D), replayed with the V100 row v2: modelled at about 25 min, it ran past the old
    fixed 1800 s (runs take up to 1.4x and more of the model's time). Its plan's limit is
    RUN_TIMEOUT_FACTOR x what its steps should take, and the grid's run gets it."""
    from stanza_core.runs import run

    s = replayed.ReplaySet(models=["vgg16"], nodes=[16], strategies=["stanza"], fc_workers=[1],
                           target_gbps=[100.0], dilation_rule=DilationRule(floor=1600, engine=False),
                           replay_device="v100-v2")
    (spec,) = s.specs
    (p,) = spec.plans(Cache(None))
    expected = plan.SETUP_S_PER_NODE * 16 + p.config.steps * p.dilation * p.target_step_s
    assert p.dilation == 1600 and p.expected_s() == pytest.approx(expected, rel=1e-12)
    assert 1.25 * expected > plan.RUN_TIMEOUT_FLOOR_S  # the old limit: a run 25 % over its model failed
    assert p.timeout_s() == pytest.approx(plan.RUN_TIMEOUT_FACTOR * expected, rel=1e-12)
    assert p.timeout_s() > 2 * plan.RUN_TIMEOUT_FLOOR_S
    # a short replayed run keeps the floor; a run with no target step (real compute) too
    (short,) = dataclasses.replace(s, models=["alexnet"], nodes=[4], target_gbps=[10.0],
                                   dilation_rule=LINKS_ONLY).specs[0].plans(Cache(None))
    assert short.expected_s() < plan.RUN_TIMEOUT_FLOOR_S / plan.RUN_TIMEOUT_FACTOR
    assert short.timeout_s() == plan.RUN_TIMEOUT_FLOOR_S
    assert dataclasses.replace(p, target_step_s=None).timeout_s() == plan.RUN_TIMEOUT_FLOOR_S
    limits = []
    monkeypatch.setattr(run, "run_config", lambda cfg, *, timeout_s: limits.append(timeout_s) or {"throughput": 1.0})
    (pt,) = points(spec)
    got_plan, _ = run.replayed_point(pt, Cache(tmp_path))
    assert got_plan == p and limits == [pytest.approx(p.timeout_s(), rel=1e-12)]


def test_targets_with_one_payload_scale_share_one_engine_run(tmp_path, monkeypatch):
    """10 and 100 Gb/s on 4 nodes: the links' terms of D (40, 400) both ask for F = MAX_PAYLOAD_SCALE,
    so the configuration's engine run at that F is measured once and serves both targets; 1 Gb/s
    (links' term 4) runs at F = 4 and is measured apart. Its messages are large enough for any F here."""
    measured = []

    def engine_run(cfg, compute_only_s):
        measured.append(cfg.payload_scale)
        return {"seconds": 0.01, "message_p10_bytes": 1e9}

    monkeypatch.setattr(plan, "engine_run", engine_run)
    s = replayed.ReplaySet(models=["alexnet"], nodes=[4], strategies=["ddp"], fc_workers=[1],
                           target_gbps=[1.0, 10.0, 100.0])
    plans = [p for spec in s.specs for p in spec.plans(Cache(tmp_path))]
    assert sorted(p.link.payload_scale for p in plans) == [4, MAX_PAYLOAD_SCALE, MAX_PAYLOAD_SCALE]
    assert sorted(measured) == [4, MAX_PAYLOAD_SCALE]


def test_a_long_engine_keeps_the_scaled_link_at_the_slowest_rate_the_shaper_holds(tmp_path, monkeypatch):
    """AlexNet ddp on 4 nodes at 10 Gb/s with 2 s of engine work per step at any F: the engine term
    sets D (links' term 2 at F = 32), and at that D the link would carry target / (D F), under
    MIN_LINK_MBIT; F falls to what keeps it there, and the engine is measured again at that F."""
    measured = []

    def engine_run(cfg, compute_only_s):
        measured.append(cfg.payload_scale)
        return {"seconds": 2.0, "message_p10_bytes": 1e9}

    monkeypatch.setattr(plan, "engine_run", engine_run)
    s = replayed.ReplaySet(models=["alexnet"], nodes=[4], strategies=["ddp"], fc_workers=[1], target_gbps=[10.0])
    (p,) = s.specs[0].plans(Cache(tmp_path))
    d = replay_dilation(10.0, 4, max_link_mbit=max_link_mbit(9000), max_aggregate_mbit=MAX_AGGREGATE_MBIT,
                        engine_s=2.0, target_step_s=p.target_step_s, payload_scale=MAX_PAYLOAD_SCALE)
    unbounded = 1000 * 10.0 / d / (MAX_PAYLOAD_SCALE * payload_per_wire_byte(9000))
    assert unbounded < facts.MIN_LINK_MBIT  # what F = 32 would have given
    assert measured[0] == MAX_PAYLOAD_SCALE and p.link.payload_scale == measured[-1] < MAX_PAYLOAD_SCALE
    assert p.link.wire_mbit >= facts.MIN_LINK_MBIT and p.dilation == d  # D is the engine's, at any F here
