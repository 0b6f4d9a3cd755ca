"""scripts/gpu_check.py's engine-against-plain and replay checks, on a CPU machine: the pure
functions that build the runs and judge the ratios, and (slow) the `--device cpu --tiny` dry run
that drives the same code paths end to end with small models (its figures mean nothing)."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop("gpu_check", None)


def test_engine_runs_per_gpu_count(gc):
    t = gc.Target()
    one = gc.engine_runs(t, "vgg16", gpus=1)
    assert [(label, n) for label, n, _ in one] == [("local", 0), ("ddp_ws1", 1)]
    args = one[1][2]
    assert args[:2] == ["--strategy", "ddp"] and args[args.index("--backend") + 1] == "nccl"
    for flag, want in (("--model", "vgg16"), ("--image-size", "224"), ("--global-batch", "32"),
                       ("--num-classes", "1000"), ("--device", "cuda")):
        assert args[args.index(flag) + 1] == want
    two = gc.engine_runs(t, "vgg16", gpus=2)
    label, n, args = two[-1]
    assert (label, n) == ("stanza_k1_n2", 2) and args[args.index("--fc-workers") + 1] == "1"
    assert args[args.index("--backend") + 1] == "nccl"
    assert [label for label, _, _ in gc.engine_runs(gc.TINY, "tiny_cnn", gpus=4)] == ["local", "ddp_ws1"]
    compiled = {label: args for label, _, args in gc.engine_runs(t, "alexnet", gpus=1)}
    assert list(compiled) == ["local", "ddp_ws1", "local_compile", "local_cudagraphs"]
    assert "--compile" in compiled["local_compile"] and "--compile-mode" not in compiled["local_compile"]
    args = compiled["local_cudagraphs"]
    assert args[args.index("--compile-mode") + 1] == "reduce-overhead"
    assert {gc.REFERENCE[label][0] for label in compiled} == {"plain", "plain_ddp"}
    assert gc.REFERENCE["ddp_ws1"] == ("plain_ddp", gc.RATIO_GOAL)


def test_every_engine_run_parses_as_a_training_config(gc, tmp_path):
    from stanza_core.train import parse_config

    for target, gpus in ((gc.Target(), 2), (gc.TINY, 0)):
        for model in target.models:
            for _, _, args in gc.engine_runs(target, model, gpus):
                cfg = parse_config(args + ["--metrics", str(tmp_path / "m.json"), "--quiet"])
                assert cfg.model == model and cfg.steps == target.steps and cfg.warmup == target.warmup


def test_ratio_judged_against_the_5_percent_goal(gc):
    assert gc.judge_ratio(0.0105, 0.01)["within_goal"] is True
    r = gc.judge_ratio(0.0072, 0.0037)
    assert r["ratio"] == pytest.approx(0.0072 / 0.0037) and r["within_goal"] is False
    assert gc.judge_ratio(None, 0.01)["ratio"] is None and gc.judge_ratio(0.01, None)["within_goal"] is None
    assert gc.judge_ratio(0.0035, 0.0043, gc.COMPILE_GOAL)["within_goal"] is True  # 1.23x faster
    assert gc.judge_ratio(0.0040, 0.0043, gc.COMPILE_GOAL)["within_goal"] is False  # 1.08x faster


def test_replay_against_real_fails_outside_its_bound(gc):
    """The replayed step at D = 1 must be within 5 % of the real one: the H100's 42.9 ms replayed
    against 29.4 ms real (x1.46) fails, a planted 30.5 ms passes."""
    assert gc.judge_replay(0.0429, 0.0294) is False
    assert gc.judge_replay(0.0305, 0.0294) is True and gc.judge_replay(0.0280, 0.0294) is True
    assert gc.judge_replay(0.0429, None) is None


def test_summary_states_each_ratio_and_the_verdict(gc):
    res = {"engine_vs_plain": [
        {"model": "alexnet", "engine": "local", "ok": True, "error": "", **gc.judge_ratio(0.0072, 0.0037)},
        {"model": "vgg16", "engine": "local", "ok": True, "error": "", **gc.judge_ratio(0.0267, 0.0265)},
        {"model": "vgg16", "engine": "ddp_ws1", "ok": False, "error": "error: boom", **gc.judge_ratio(None, 0.0265)}],
        "replay_vs_real": {"ok": True, "model": "vgg16", "profile": "p.json", "replayed_step_s": 0.0376,
                           "real_step_s": 0.0267, "replayed_over_real": 0.0376 / 0.0267, "engine_s_per_step": 0.0109}}
    text = gc.summary(res, 1, "GPU", 10.0)
    assert "alexnet  local" in text and "x1.946 NOT within 5 %" in text
    assert "vgg16    local" in text and "x1.008 within 5 %" in text
    assert "FAIL  engine vgg16    ddp_ws1          error: boom" in text
    assert "replay D=1 vgg16: 37.60 ms replayed vs 26.70 ms real (x1.41; engine 10.90 ms per step)" in text


def test_summary_lines_are_never_cut(gc):
    long = "error: " + "x" * 300
    res = {"engine_vs_plain": [{"model": "vgg16", "engine": "ddp_ws1", "ok": False, "error": long,
                                **gc.judge_ratio(None, 0.0265)}],
           "replay_vs_real": {"ok": False, "model": "vgg16", "replayed_step_s": 0.0429, "real_step_s": 0.0294,
                              "replayed_over_real": 1.46, "engine_s_per_step": 0.0135, "bound": 0.05,
                              "within_bound": False, "judged": True}}
    text = gc.summary(res, 1, "GPU", 10.0)
    assert long in text
    assert "FAIL  replay_vs_real" in text and "replayed_over_real=1.46" in text and "within_bound=False" in text
    assert "(x1.46; engine 13.50 ms per step): NOT within 5%" in text


def test_tiny_goes_with_the_cpu_only(gc, tmp_path, capsys):
    for argv in (["--tiny"], ["--device", "cpu"]):
        assert gc.main(argv + ["--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "--device cpu and --tiny go together" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_dry_run_on_cpu_drives_the_new_checks_end_to_end(tmp_path):
    out = tmp_path / "o"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--tiny", "--out", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["dry_run"] and res["calibrate_tiny_cnn"]["ok"]
    rows = {(r["model"], r["engine"]): r for r in res["engine_vs_plain"]}
    assert set(rows) == {("tiny_cnn", "local"), ("tiny_cnn", "ddp_ws1")}
    assert rows["tiny_cnn", "ddp_ws1"]["reference"] == "plain_ddp"
    for r in rows.values():
        assert r["ok"] and r["engine_s"] > 0 and r["plain_s"] > 0
        assert r["ratio"] == pytest.approx(r["engine_s"] / r["plain_s"])
    assert rows["tiny_cnn", "ddp_ws1"]["backend"] == "gloo"
    rv = res["replay_vs_real"]
    assert rv["ok"] and rv["replayed_step_s"] > 0 and rv["real_step_s"] == rows["tiny_cnn", "local"]["engine_s"]
    text = (out / "summary.txt").read_text()
    assert "engine tiny_cnn local" in text and "replay D=1 tiny_cnn" in text
