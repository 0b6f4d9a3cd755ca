"""replay_fidelity.py compares a replayed run only with a real run none of its fitted inputs came
from: the jitter schedule (repeat r's replay takes repeat r - 1's real run, repeat 0's the extra
calibration run), the refusal of a self-fitted pair, and the stored spin + jitter tables that the
refusal catches (withdrawn)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WITHDRAWN = ["replay_fidelity_buckets_jitter_spin.json", "replay_fidelity_buckets_jitter_spin_30steps.json",
             "replay_fidelity_stanza1_40steps_jitter_spin.json"]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("replay_fidelity", ROOT / "benchmarks" / "replay_fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(bench, compute, rep, step_s, jitter_from=None):
    r = {"run_id": bench.run_id("stanza1", compute, rep), "config": "stanza1", "compute": compute, "repeat": rep,
         "buckets": 4, "step_time_median_s": step_s, "bytes_per_step": 100}
    if compute == "replay":
        r["fitted_inputs"] = [{"what": "device profile", "run": f"timing rounds, repeat {rep}"},
                              *([{"what": "jitter factors", "run": jitter_from}] if jitter_from else [])]
    return r


def test_jitter_comes_from_the_previous_repeat_or_the_calibration_run(bench):
    assert bench.jitter_source("ddp", 0)["run"] == "ddp-calibration-0"
    assert bench.jitter_source("ddp", 3)["run"] == "ddp-real-2"
    assert all(bench.jitter_source("ps_ov", r)["run"] != bench.run_id("ps_ov", "real", r) for r in range(20))


def test_a_replay_compared_with_the_run_its_jitter_came_from_is_refused(bench):
    planted = [_run(bench, "real", 0, 1.0), _run(bench, "replay", 0, 1.1, "stanza1-calibration-0"),
               _run(bench, "real", 1, 2.0), _run(bench, "replay", 1, 2.0, "stanza1-real-1")]  # self-fitted
    with pytest.raises(ValueError, match=r"^replayed run stanza1-replay-1 is compared with stanza1-real-1, the run "
                                         r"its jitter factors came from: fit to another run \(jitter_source\)$"):
        bench.fidelity_row("stanza1", planted, 2)


def test_a_held_out_pair_is_compared(bench):
    proper = [_run(bench, "real", 0, 1.0), _run(bench, "replay", 0, 1.1, "stanza1-calibration-0"),
              _run(bench, "real", 1, 2.0), _run(bench, "replay", 1, 2.0, "stanza1-real-0")]
    row = bench.fidelity_row("stanza1", proper, 2)
    assert row["error_per_repeat"] == pytest.approx([0.1, 0.0])
    assert (row["config"], row["real_s"], row["replay_s"], row["same_bytes"]) == ("stanza k=1", 1.5, 1.55, True)
    assert row["error"] == pytest.approx(1.55 / 1.5 - 1)


@pytest.mark.parametrize("name", WITHDRAWN)
def test_the_stored_spin_jitter_tables_are_self_fitted_and_withdrawn(bench, name):
    """Written before the schedule above: every replay took the factors of its own repeat's real run."""
    d = json.loads((ROOT / "benchmarks" / "results" / name).read_text())
    assert d["withdrawn"].startswith("withdrawn: each replayed run's jitter factors came from the real run")
    configs = list(dict.fromkeys(r["config"] for r in d["runs"]))
    for config in configs:
        with pytest.raises(ValueError, match="the run its jitter factors came from"):
            bench.fidelity_row(config, d["runs"], d["args"]["repeats"])
    replays = [r for r in d["runs"] if r["compute"] == "replay"]
    assert all(bench.fitted_inputs(r)[0]["run"] == bench.run_id(r["config"], "real", r["repeat"]) for r in replays)


def test_main_hands_each_replay_the_factors_of_an_earlier_real_run(bench, monkeypatch, tmp_path):
    """main's loop with the emulated cluster, the timing rounds and the factors faked: which real run's
    factors reach each replay (the --replay-jitter file), and what the runs record."""
    import stanza_core.netem

    class Pool:
        def __init__(self, *a):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class Dev:
        def to_dict(self):
            return {}

    got = []  # (run id, the source of the factors it was handed)

    def run_training(nodes, mbit, args, **kw):
        metrics = Path(args[args.index("--metrics") + 1]).stem
        jitter = json.loads(Path(args[args.index("--replay-jitter") + 1]).read_text())["source"] \
            if "--replay-jitter" in args else None
        got.append((metrics, jitter))
        return {"step_time_median_s": 1.0, "steps": [{"time_s": 1.0}], "bytes_per_step": 1}

    monkeypatch.setattr(bench.timing, "TimingPool", Pool)
    monkeypatch.setattr(bench, "engine_scale", lambda pool, a, level: (1.0, 1.0, 1.0))
    monkeypatch.setattr(bench, "profile_here", lambda *a, **k: (Dev(), []))
    monkeypatch.setattr(bench, "bucket_counts", lambda *a: {"model": 8, "conv_body": 4})
    monkeypatch.setattr(bench, "get_model", lambda *a: __import__("torch").nn.Linear(2, 2))
    monkeypatch.setattr(bench, "jitter_factors", lambda m, w, source: {"source": source, "steps": []})
    monkeypatch.setattr(bench, "phase_medians", lambda m, w: {})
    monkeypatch.setattr(stanza_core.netem, "run_training", run_training)
    out = tmp_path / "out.json"
    assert bench.main(["--configs", "stanza1", "--repeats", "3", "--jitter", "--spin", "--out", str(out)]) == 0
    assert got == [("stanza1-calibration-0", None), ("stanza1-real-0", None),
                   ("stanza1-replay-0", "stanza1 calibration run, repeat 0"),
                   ("stanza1-real-1", None), ("stanza1-replay-1", "stanza1 real run, repeat 0"),
                   ("stanza1-real-2", None), ("stanza1-replay-2", "stanza1 real run, repeat 1")]
    runs = json.loads(out.read_text())["runs"]
    assert [bench.fitted_inputs(r)[-1]["run"] for r in runs if r["compute"] == "replay"] == [
        "stanza1-calibration-0", "stanza1-real-0", "stanza1-real-1"]


@pytest.mark.parametrize("name", ["ps", "ps_ov", "ddp", "stanza1", "stanza2"])
def test_a_run_goes_through_its_runconfig_with_the_arguments_it_was_built_with_by_hand(bench, name):
    """fidelity_args (RunConfig.train_args and this benchmark's own flags) gives the training CLI
    what the hand-built arguments gave (the engine reads --dilation 1 and 1.0 alike)."""
    import dataclasses

    from stanza_core.runs.runconfig import RunConfig
    from stanza_core.launch import cli_args

    v = bench.CONFIGS[name]
    real = RunConfig.of(v, model="cifar_alexnet", image_size=32, num_classes=10, nodes=4, global_batch=48, steps=6,
                        warmup=1, link_mbit=200.0)
    replay = dataclasses.replace(real, compute="replay", replay_device="dev.json", dilation=1.0)
    for cfg, extra in ((real, {}), (replay, {"replay_wait": "spin", "replay_jitter": "j.json"})):
        for bucket_mb in (bench.DEFAULT_BUCKET_MB, 0.5):
            got = bench.fidelity_args(cfg, "m.json", bucket_mb, True, **extra)
            flags = {"compute": "replay", "replay_device": "dev.json", "dilation": 1.0} if cfg is replay else {}
            want = cli_args(strategy=v.strategy, model="cifar_alexnet", image_size=32, num_classes=10, global_batch=48,
                            steps=6, warmup=1, fc_workers=v.get("fc_workers"), ps_overlap=v.get("ps_overlap", False), device="cpu",
                            quiet=True, metrics="m.json", bucket_mb=bucket_mb if bucket_mb != bench.DEFAULT_BUCKET_MB
                            else None, overwrite=True, timeout_s=600, timeline=True, **flags, **extra)
            pairs = lambda args: sorted(" ".join(args).replace(" --", "\n--").split("\n"))  # noqa: E731
            assert pairs(got) == pairs(want)
    assert bench.CONFIGS[name].label == {
        "ps": "ps", "ps_ov": "ps overlap", "ddp": "ddp", "stanza1": "stanza k=1", "stanza2": "stanza k=2"}[name]
