"""The validation machinery: which timing rounds a configuration needs, the DeviceProfile built
from them, predictions against perf.predict, the out-of-sample overhead, the term fit, the
measured-runs cache, MeasureSpec checks, and the one-line message without root."""
import json
from pathlib import Path
import shutil
import subprocess
import sys

import pytest

from stanza_core.runs.cache import Cache, cache_dir_for
from stanza_core.runs.compute_rounds import config_rounds, device_for, rounds_needed, timing_rounds
from stanza_core.runs.measurement import Measurement
from stanza_core.runs.spec import MeasureSpec
from stanza_core.netem.facts import payload_gbps, payload_per_wire_byte
from stanza_core.experiments.validation import calibrated, engine_apart, error_summary, predict_runs, term_fit
from stanza_core.perf import Cluster, DeviceProfile, named_profile, predict
from stanza_core.variant import Variant

PARTS = ("conv_fwd", "conv_bwd", "fc_fwd", "fc_bwd", "update", "step")


def _round(level, batch, scale):
    """A hand-made timing round: seconds per call grow with the level (contention) and batch."""
    base = {"conv_fwd": 4e-3, "conv_bwd": 8e-3, "fc_fwd": 1e-3, "fc_bwd": 2e-3, "update": 3e-3}
    r = {k: v * scale * batch for k, v in base.items()}
    return {"level": level, "batch": batch, **r, "step": sum(r.values())}


def test_payload_share_of_a_frame():
    assert payload_per_wire_byte(1500) == pytest.approx(1448 / 1514, rel=1e-15)
    assert payload_per_wire_byte(9000) == pytest.approx(8948 / 9014, rel=1e-15)


def test_rounds_follow_each_phase_contention():
    # ddp/ps: every node computes the whole model at once on G/N samples.
    assert set(config_rounds("ddp", 4, 0, 12).values()) == {(4, 3)}
    # stanza k=1 on 4 nodes: 3 CONV workers at once on 4 samples each; the FC worker alone.
    r = config_rounds("stanza", 4, 1, 12)
    assert r["conv_fwd"] == r["conv_bwd"] == (3, 4) and r["fc_fwd"] == r["fc_bwd"] == (1, 4)
    assert rounds_needed([("ps", 0), ("stanza", 1), ("stanza", 2)], 4, 12) == [(4, 3), (3, 4), (2, 6), (1, 4)]


def test_device_profile_takes_each_part_from_its_round():
    rounds = [_round(3, 4, 1.5), _round(1, 4, 1.0), _round(4, 3, 2.0)]
    dev = device_for("stanza", 4, 1, 12, rounds, params=1000)
    assert dev.conv_fwd_s == pytest.approx(1.5 * 4e-3, rel=1e-12)  # per sample, from the level-3 round
    assert dev.fc_bwd_s == pytest.approx(1.0 * 2e-3, rel=1e-12)  # from the FC worker's level-1 round
    assert dev.update_s_per_param == pytest.approx(1.5 * 3e-3 * 4 / 1000, rel=1e-12)
    assert dev.step_overhead_s == 0.0
    with pytest.raises(ValueError, match=r"^no timing round at \(level, batch\) \[\(2, 6\)\] for stanza on 4 nodes$"):
        device_for("stanza", 4, 2, 12, rounds, params=1000)


def test_lone_profiles_take_every_part_from_one_process_alone():
    """lone (replay_fidelity.py --wait cpu): each piece at level 1, at the batch of its phase."""
    assert set(config_rounds("ddp", 4, 0, 12, lone=True).values()) == {(1, 3)}
    r = config_rounds("stanza", 4, 2, 12, lone=True)
    assert r["conv_fwd"] == r["fc_bwd"] == r["update"] == (1, 6)
    rounds = [_round(3, 4, 1.5), _round(1, 4, 1.0)]
    dev = device_for("stanza", 4, 1, 12, rounds, params=1000, lone=True)
    assert dev.conv_fwd_s == pytest.approx(1.0 * 4e-3, rel=1e-12)  # the level-1 round, not level 3's
    with pytest.raises(ValueError, match=r"^no timing round at \(level, batch\) \[\(1, 3\)\] for ddp on 4 nodes$"):
        device_for("ddp", 4, 0, 12, rounds, params=1000, lone=True)


def _bench(runs):
    cfg = {"model": "tiny_cnn", "image_size": 16, "num_classes": 10, "nodes": 3, "global_batch": 6,
           "delay_ms": 0.0, "mtu": 9000}
    return Measurement(spec=cfg, config=cfg, runs=runs,
                       timing_rounds=[_round(3, 2, 1.5), _round(2, 3, 1.2), _round(1, 3, 1.0)])


def _run(strategy, k, mbit, step):
    return {"strategy": strategy, "fc_workers": k, "link_mbit": mbit, "target_gbps": None, "repeat": 0,
            "throughput": 6 / step, "step_time_median_s": step, "bytes_per_step": 0}


def test_predictions_are_perf_predict_on_the_configuration_profile():
    bench = _bench([_run("ddp", 0, 100.0, 0.05), _run("stanza", 1, 100.0, 0.04), _run("ddp", 0, 400.0, 0.03)])
    rows = predict_runs(bench)
    prof = named_profile("tiny_cnn", 16, 10)
    for r in rows:
        dev = device_for(r["strategy"], 3, r["fc_workers"], 6, bench.timing_rounds, prof.params)
        p = predict(prof, Cluster(3, payload_gbps(r["link_mbit"], 9000), 50e-6, dev), Variant(r["strategy"], fc_workers=r["fc_workers"] or None), global_batch=6)
        assert r["predicted_throughput"] == pytest.approx(p.throughput, rel=1e-12)
        assert r["error"] == pytest.approx(p.throughput / r["measured_throughput"] - 1, rel=1e-12)
        assert r["predicted_bytes_per_step"] == p.bytes_per_step
        assert r["predicted_compute_s"] + r["predicted_exposed_comm_s"] == pytest.approx(p.iteration_s, rel=1e-12)
    s = error_summary(rows)
    errs = sorted(abs(r["error"]) for r in rows)
    assert (s["median_abs_error"], s["worst_abs_error"]) == (errs[1], errs[2]) and s["bytes_match"] is False
    assert s["bias"] == pytest.approx(sum(r["error"] for r in rows) / 3, rel=1e-12)


def test_engine_apart_holds_the_engine_seconds_out_of_the_error():
    # measured 1.05 s, engine 0.05 s (4.8 %), model 1.0 s: +5 % against the model alone, 0 % with
    # the engine subtracted; measured 0.99 s, engine 0.005 s (0.5 %), model 1.0 s: a low-share run
    runs = [{"measured_step_s": 1.05, "engine_s": 0.05, "plain_step_s": 1.0},
            {"measured_step_s": 0.99, "engine_s": 0.005, "plain_step_s": 1.0},
            {"measured_step_s": 2.0, "engine_s": None, "plain_step_s": 1.0}]  # engine not measured: left out
    e = engine_apart(runs)
    assert e["configurations"] == 2 and e["engine_share_max"] == pytest.approx(0.05 / 1.05)
    assert e["low_share"]["configurations"] == 1 and e["low_share"]["bias"] == pytest.approx(-0.01)
    sub = e["subtracted"]
    assert sub["median_abs_error"] == pytest.approx((0.0 + 0.015) / 2)
    assert sub["bias"] == pytest.approx((0.0 - 0.015) / 2) and sub["positive"] == 0
    none = engine_apart(runs[:1])["low_share"]
    assert none == {"configurations": 0, "positive": 0}  # no figures where there are no runs


def test_overhead_is_fitted_on_the_other_rates_only():
    rows = predict_runs(_bench([_run("ddp", 0, m, 0.2) for m in (50.0, 100.0, 200.0)] + [_run("stanza", 1, 50.0, 0.1)]))
    cal = {(r["strategy"], r["link_mbit"]): r for r in calibrated(rows)}
    gap = {r["link_mbit"]: r["measured_step_s"] - r["predicted_step_s"] for r in rows if r["strategy"] == "ddp"}
    r = cal[("ddp", 100.0)]
    assert r["overhead_s"] == pytest.approx(max((gap[50.0] + gap[200.0]) / 2, 0.0), rel=1e-12)
    assert r["calibrated_step_s"] == pytest.approx(r["predicted_step_s"] + r["overhead_s"], rel=1e-12)
    assert cal[("stanza", 50.0)]["calibrated_error"] is None  # one rate: nothing out of sample


def test_term_fit_recovers_a_known_line():
    rows = [{"strategy": "ps", "predicted_exposed_comm_s": x, "predicted_compute_s": 0.01,
             "measured_step_s": 0.01 + 0.07 + 1.4 * x} for x in (0.1, 0.3, 0.9)]
    fit = term_fit(rows)["ps"]
    assert fit["comm_scale"] == pytest.approx(1.4, rel=1e-9) and fit["fixed_s"] == pytest.approx(0.07, rel=1e-9)
    assert term_fit(rows[:1])["ps"] is None


def test_measure_spec_checks_in_one_line():
    ok = dict(model="tiny_cnn", image_size=16, num_classes=10, nodes=3, strategies=["ddp", "stanza"], fc_workers=[1],
              global_batch=6, steps=2, link_mbit=[100])
    assert MeasureSpec(**ok).configs() == [("ddp", 0), ("stanza", 1)]
    cases = [({"fc_workers": [2]}, "fc_workers 2 with 3 nodes: expected 1 <= k <= 1"),
             ({"global_batch": 5}, "global_batch 5 is not divisible by the 3 data workers of ddp on 3 nodes"),
             ({"target_gbps": [10]}, "give the bandwidth as target_gbps or as link_mbit (exactly one)"),
             ({"link_mbit": [-1]}, "link_mbit must be a non-empty list of positive numbers, got [-1]"),
             ({"model": "nope"}, "unknown model 'nope'"), ({"warmup": 2}, "warmup must be in 0..steps-1 = 1")]
    for change, msg in cases:
        with pytest.raises(ValueError) as e:
            MeasureSpec(**{**ok, **change})
        assert str(e.value).startswith(msg) and "\n" not in str(e.value)


def test_cache_is_keyed_by_every_parameter_and_the_code(tmp_path):
    c = Cache(tmp_path / "c")
    key = {"model": "tiny_cnn", "link_mbit": 100.0, "repeat": 0}
    assert c.get("run", key) is None
    c.put("run", key, {"throughput": 3.0})
    assert Cache(tmp_path / "c").get("run", key) == {"throughput": 3.0}
    assert Cache(tmp_path / "c").get("run", {**key, "link_mbit": 100.5}) is None
    other = Cache(tmp_path / "c")
    other.fingerprint = "something-else"  # what a changed engine gives: never the old value
    assert other.get("run", key) is None
    again = Cache(tmp_path / "c")
    again.get("run", key)
    assert again.report()["reused"] == 1 and again.report()["measured"] == 0
    none = Cache(None)
    none.put("run", key, 1)
    assert none.get("run", key) is None
    assert cache_dir_for("auto", str(tmp_path / "out" / "x")) == str((tmp_path / "out" / "bench-cache").resolve())
    assert cache_dir_for("", "x") is None


@pytest.mark.slow
def test_timing_rounds_time_real_processes_at_once():
    got = timing_rounds("tiny_cnn", 16, 10, [(2, 4), (1, 4)], reps=2)
    assert [(r["level"], r["batch"]) for r in got] == [(2, 4), (1, 4)]
    for r in got:
        assert all(r[k] > 0 for k in PARTS)
        assert r["step"] >= r["conv_fwd"] + r["fc_fwd"]
    dev = device_for("ddp", 2, 0, 8, got, params=35578)
    assert isinstance(dev, DeviceProfile) and dev.conv_fwd_s > 0


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_without_root_the_measured_part_says_so_in_one_line():
    # A user namespace without a uid mapping: the process is uid 65534 there, as a normal user.
    code = ("import json; from stanza_core.runs.run import MeasureSpec, measure; "
            "r = measure(MeasureSpec(model='tiny_cnn', image_size=16, num_classes=10, nodes=2, "
            "strategies=['ddp'], fc_workers=[1], global_batch=4, steps=2, link_mbit=[100])); "
            "print(json.dumps([r.unavailable, r.runs]))")
    proc = subprocess.run(["unshare", "--user", sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 and "unshare failed" in proc.stderr:
        pytest.skip("user namespaces are disabled here")
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == ("measured part skipped: the emulated cluster needs Linux, root and iproute2; missing: "
                        "root (running as uid 65534)")
    assert json.loads(lines[1]) == [lines[0][len("measured part skipped: "):], []]


def test_bench_from_metrics_reads_runs_made_elsewhere(tmp_path):
    from stanza_core.runs.run import bench_from_metrics

    def metrics(strategy, k, tp, name):
        m = {"config": {"strategy": strategy, "model": "alexnet", "image_size": 224, "num_classes": 1000,
                        "world_size": 4, "global_batch": 128, "steps": 10, "warmup": 2,
                        "fc_workers_effective": k, "device_type": "cuda"},
             "throughput": tp, "step_time_median_s": 128 / tp, "bytes_per_step": 1000, "ranks": []}
        (tmp_path / name).write_text(json.dumps(m))
        return str(tmp_path / name)

    paths = [metrics("ddp", None, 500.0, "a.json"), metrics("stanza", 1, 1500.0, "b.json"),
             metrics("stanza", 1, 1400.0, "c.json")]
    b = bench_from_metrics(paths, link_mbit=10000, target_gbps=10.0)
    assert b.config["nodes"] == 4 and b.config["fc_workers"] == [1] and b.source == ", ".join(paths)
    assert [(r["strategy"], r["fc_workers"], r["repeat"]) for r in b.runs] == [("ddp", 0, 0), ("stanza", 1, 0),
                                                                                 ("stanza", 1, 1)]
    st = next(r for r in b.summary if r["strategy"] == "stanza")
    assert st["throughput"] == 1450.0 and st["speedup_vs_ddp"] == pytest.approx(2.9, rel=1e-12)
    bad = metrics("ps", None, 400.0, "d.json")
    m = json.loads((tmp_path / "d.json").read_text())
    m["config"]["world_size"] = 8
    (tmp_path / "d.json").write_text(json.dumps(m))
    with pytest.raises(ValueError, match="differs from the first run's"):
        bench_from_metrics(paths + [bad], link_mbit=10000)


def test_a_measurement_is_one_dict_and_back():
    b = _bench([_run("ddp", 0, 100.0, 0.05)])
    d = b.to_dict()
    assert set(d) == {"spec", "config", "unavailable", "calibration", "timing_rounds", "runs", "summary",
                      "modelled_only_gbps", "cache"}  # source and note only when set
    assert Measurement.from_dict(json.loads(json.dumps(d))) == b
    assert Measurement.from_dict(d, source="x.json").to_dict()["source"] == "x.json"
    with pytest.raises(ValueError, match=r"^not a measurement: unknown keys \['speedup'\]$"):
        Measurement.from_dict({**d, "speedup": 2})
    # a bench file written by `bench --out` before runs carried a spec reads back as its config
    old = json.loads((Path(__file__).parents[2] / "benchmarks/results/bench_alexnet_10g.json").read_text())
    m = Measurement.from_dict(old)
    assert m.spec == m.config == old["config"] and len(m.runs) == len(old["runs"]) > 0
