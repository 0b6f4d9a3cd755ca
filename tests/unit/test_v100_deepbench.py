"""The V100 row of compute model v3 against DeepBench's V100 FP32 kernels, pass by pass, on the
half the fit never saw (stanza_core/perf/deepbench.py; benchmarks/fit_v100_deepbench.py fits the
other half). Goals (median abs. error): GEMMs <= 15 %, convolution forward, data gradient and
weight gradient each <= 20 %; the AlexNet and VGG-16 FC heads at 32 samples within 25 % of
DeepBench's nearest shapes. The train half is fitted: reported in docs/performance-model.md, never
asserted as agreement here."""
import json
from pathlib import Path

import numpy as np
import pytest

from stanza_core.anatomy import LayerRow
from stanza_core.perf import DEVICE_TABLE, DeviceProfile, named_profile
from stanza_core.perf import compute as C
from stanza_core.perf import deepbench as DB
from stanza_core.perf.rows import V100_V3, V100_V3_VERSION

ROOT = Path(__file__).resolve().parents[2]
FIT = json.loads((ROOT / "benchmarks" / "results" / "deepbench_v100_fit.json").read_text())
GOALS = {"gemm": 0.15, "fwd": 0.20, "dgrad": 0.20, "wgrad": 0.20}
HEAD_GOAL = 0.25
V100, V100_V2 = DEVICE_TABLE["v100"], DEVICE_TABLE["v100-v2"]
# Missed by the committed row on the held-out half (docs/performance-model.md: by how much); strict:
# the test fails once a pass meets its goal, so this list cannot outlive the miss.
MISSED = {"fwd", "dgrad", "wgrad"}


@pytest.fixture(scope="module")
def rows():
    return DB.load()


def test_the_split_and_the_constants_are_the_recorded_fit(rows):
    sp = DB.split(rows)
    assert sp["train"] == FIT["split"]["train"] and sp["held_out"] == FIT["split"]["held_out"]
    assert not set(sp["train"]) & set(sp["held_out"])
    assert set(sp["train"]) | set(sp["held_out"]) == {str(i) for d in rows.values() for i in d["id"]}
    assert {p: len(rows[p]["id"]) for p in DB.PASSES} == {"gemm": 160, "fwd": 62, "dgrad": 52, "wgrad": 62}
    assert FIT["fitted"] == pytest.approx(V100_V3, rel=1e-5) and FIT["parameters"] == len(V100_V3)  # refits agree to ~1e-6
    # a shape's transposes and batches sit on one side of the split
    for d in rows.values():
        side = {}
        for i, g in zip(d["id"], d["group"]):
            assert side.setdefault(g, i in sp["held_out"]) == (i in sp["held_out"])
    # the JSON's errors are what the table row gives now
    for half in ("train", "held_out"):
        got = DB.errors(V100, rows, sp[half])
        for p in DB.PASSES:
            assert got[p]["median_abs_error"] == pytest.approx(FIT["errors"][half][p]["median_abs_error"], rel=1e-9)


@pytest.mark.parametrize("p", DB.PASSES)
def test_held_out_kernels_meet_the_goal_per_pass(rows, p, request):
    if p in MISSED:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"{p}: the v3 row misses the goal on held-out kernels"))
    e = DB.errors(V100, rows, FIT["split"]["held_out"])[p]
    assert e["n"] >= 20
    assert e["median_abs_error"] <= GOALS[p], f"{p}: held-out median {e['median_abs_error']:.1%} > {GOALS[p]:.0%}"


@pytest.mark.parametrize("model", sorted(DB.HEADS))
def test_fc_heads_at_32_samples_within_25_percent(rows, model):
    h = DB.head(V100, model, rows)
    assert len(h["shapes"]) == 9 and h["same_shape"] >= 2  # 4096 x 32 x 4096 is DeepBench's own (fc7 forward, data gradient)
    assert abs(h["error"]) <= HEAD_GOAL, f"{model}: {h['predicted_s'] * 1e3:.2f} ms vs {h['deepbench_s'] * 1e3:.2f} ms"


def test_the_v2_row_fails_these_goals(rows):
    # the same checks on compute model v2.2's V100 row (H200-fitted GEMM efficiency, fixed tiles, one
    # backward ratio): they can fail, and do
    e = DB.errors(V100_V2, rows, FIT["split"]["held_out"])
    assert e["gemm"]["median_abs_error"] > 1.0 > GOALS["gemm"]
    assert all(abs(DB.head(V100_V2, m, rows)["error"]) > 2 for m in DB.HEADS)


def conv_row(c_in, c_out, area, stride, pixels):
    k = c_in * area
    return LayerRow("c", "Conv2d", "conv", c_out * k + c_out, 2.0 * pixels * c_out * k, c_out * pixels,
                    4 * c_out * pixels, 0, 1, area, stride)


def test_the_rows_the_model_costs_are_the_rows_tested(rows):
    # a DeepBench convolution as a profile's Conv2d row: layer_cost (on the secant, exact at b0) gives
    # the forward and dgrad + wgrad the check priced, kernel floors included
    conv = rows["fwd"]
    pred = DB.predict(V100, rows)
    by_id = {p: dict(zip(rows[p]["id"], pred[p])) for p in ("fwd", "dgrad", "wgrad")}
    seen = 0
    for r in DB._read("v100_fp32_conv.csv")[::7]:
        b, area, stride = int(r["N"]), int(r["R_fh"]) * int(r["S_fw"]), int(r["stride_w"]) * int(r["stride_h"])
        row = conv_row(int(r["C"]), int(r["K"]), area, stride, int(r["P"]) * int(r["Q"]))
        first = r["bwd_data_ms"].startswith("N/A")
        cost = C.layer_cost(row, V100, first=first, batch=b)
        i = f"conv:{r['row']}"
        assert cost.seconds("fwd", b) == pytest.approx(by_id["fwd"][i], rel=1e-9)
        assert cost.seconds("bwd", b) == pytest.approx(by_id["wgrad"][i] + (0 if first else by_id["dgrad"][i]), rel=1e-9)
        seen += 1
    assert seen >= 8 and len(conv["id"]) == 62
    # a Linear layer 4096 -> 4096 at 32 samples: its forward is DeepBench's 4096 x 32 x 4096, priced alike
    lin = LayerRow("fc", "Linear", "fc", 4096 * 4097, 2.0 * 4096 * 4096, 4096, 4 * 4096, 8192)
    g = rows["gemm"]
    i = int(np.flatnonzero((g["m"] == 4096) & (g["n"] == 32) & (g["k"] == 4096))[0])
    assert C.layer_cost(lin, V100, batch=32).seconds("fwd", 32) == pytest.approx(pred["gemm"][i], rel=1e-9)


def test_the_row_says_its_version():
    prof = named_profile("alexnet")
    assert DeviceProfile.from_table("v100", prof).row_version == V100_V3_VERSION == V100.row_version
    assert DeviceProfile.from_table("v100-v2", prof).row_version == "v100 row v2 (compute model v2.2)"
    assert DEVICE_TABLE["h200"].row_version == "h200 row v2 (compute model v2.2)" and DEVICE_TABLE["h200"].kernel_model == 2
    assert V100.kernel_model == 3 and V100_V2.kernel_model == 2


def test_the_docs_carry_the_recorded_fit():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fit_v100_deepbench", ROOT / "benchmarks" / "fit_v100_deepbench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    doc = (ROOT / "docs" / "performance-model.md").read_text()
    assert f"{mod.BEGIN}\n{mod.tables(FIT)}{mod.END}" in doc


@pytest.mark.slow
def test_v100_fit_check_reproduces_the_committed_constants():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fit_v100_deepbench.py"), "--check"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
