"""The convergence claims' exactness bound is the rule applied to its measurement: the window and
the bound in reproductions/convergence.yaml and experiments.convergence equal what
benchmarks/convergence_spread.py measured (benchmarks/results/convergence_spread_quick_window.json),
and the float-order part of that measurement still holds for this engine (recomputed, 8 steps in
one process). The separation itself, on real runs: tests/dist/test_convergence_bounds_dist.py."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from stanza_core.experiments import convergence

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "benchmarks" / "results" / "convergence_spread_quick_window.json"
EXACT = ("ps", "ddp", "stanza", "stanza_hybrid_m2")


@pytest.fixture(scope="module")
def measured():
    return json.loads(MEASURED.read_text())


@pytest.fixture(scope="module")
def claims():
    spec = yaml.safe_load((ROOT / "reproductions" / "convergence.yaml").read_text())
    return {c["ours"]: c for c in spec["claims"]}


def test_the_rule_is_ten_times_the_largest_spread_rounded_up_to_one_digit():
    assert convergence.SAFETY == 10
    assert convergence.exact_bound({"a": 3.18e-7, "b": 2.4e-7}) == 4e-6
    assert convergence.exact_bound({"a": 2.98e-7}) == 3e-6
    assert convergence.exact_bound({"a": 3.0e-7}) == 3e-6  # 10 x 3.0e-7 is 3.0000000000000004e-6 in floats
    assert convergence.exact_bound({"a": 4.7e-3}) == 5e-2
    assert convergence.envelope_bound({"a": 2.18e-2, "b": 1e-3}) == 3e-2
    assert convergence.max_loss_diff([1.0, 2.0, 3.5], [1.0, 2.5, 3.0], 2) == 0.5
    assert convergence.max_loss_diff([1.0, 2.0, 4.0], [1.0, 2.5, 3.0]) == 1.0


def test_window_and_bound_are_those_measured(measured, claims):
    assert measured["window_steps"] == convergence.EXACT_WINDOW
    # the judged runs' spreads are the file's own losses read over the window (nothing entered by
    # hand), and none of them is among the spreads the bound is set from
    local = measured["strategies"]["local"]["losses"]
    for name in EXACT:
        got = convergence.max_loss_diff(measured["strategies"][name]["losses"], local, convergence.EXACT_WINDOW)
        assert measured["judged_spreads"][name] == got, name
    fp32 = {name: run for name, run in measured["float_order"]["runs"].items() if name.startswith("fp32 ")}
    assert set(measured["exact_spreads"]) == set(measured["envelope_spreads"]) == set(fp32)  # float order only
    for name, run in measured["float_order"]["runs"].items():
        if name.startswith("fp32 "):
            assert measured["exact_spreads"][name] == max(run["loss_diff"][:convergence.EXACT_WINDOW]), name
            assert measured["envelope_spreads"][name] == max(run["loss_diff"]), name
        else:  # the fp64 control: the same chunkings agree within a few ulps of float64 over the whole run
            assert max(run["loss_diff"]) < 1e-14, name
    bound = convergence.exact_bound(measured["exact_spreads"])
    assert bound == measured["bound"] == 3e-6
    # with the judged runs folded in, the bound would be 4e-6: a x1.001 gradient error (3.8e-6,
    # tests/dist) would pass it; set apart, it does not
    assert convergence.exact_bound({**measured["exact_spreads"], **measured["judged_spreads"]}) == 4e-6
    envelope = convergence.envelope_bound(measured["envelope_spreads"])
    assert envelope == measured["envelope_bound"] == 3e-2
    for name in ("ps", "ddp", "stanza"):
        assert claims[f"strategies.{name}.max_loss_diff_vs_local"]["expect"] == {"quick": [0.0, envelope],
                                                                                   "tiny": [0.0, envelope]}
    for name in ("ps", "ddp", "stanza"):
        assert claims[f"strategies.{name}.max_loss_diff_vs_local_window"]["expect"] == {"quick": [0.0, bound],
                                                                                          "tiny": [0.0, bound]}
    assert claims["strategies.stanza_hybrid_m2.max_loss_diff_vs_local_window"]["expect"] == {"quick": [0.0, bound]}
    assert claims["strategies.stanza_bf16.max_loss_diff_vs_local_window"]["expect"]["quick"][0] == bound
    # what the bound separates, in the same measurement: bf16 above it, every exact run well inside
    assert measured["strategies"]["stanza_bf16"]["max_loss_diff_vs_local_window"] > 10 * bound
    assert max(measured["exact_spreads"].values()) * convergence.SAFETY <= bound
    assert max(measured["judged_spreads"].values()) < bound  # the exact runs it judges pass


def test_the_float_order_window_still_holds_for_this_engine(measured):
    """Deterministic on one machine (one thread, CPU). A change of the engine's arithmetic or dropout
    masks moves the first flipped near-tie (from step 17 at b7eb135 to step 5 after the mask changes
    876d06f and 41ef5fa): this fails then, and benchmarks/convergence_spread.py must be run again.

    The bits of each float-order spread depend on the processor too (MKL's and oneDNN's blocking of
    a sum: on a processor with AVX-512 and AMX the chunked runs differ from the measurement by ulps,
    while the unchunked float32 run and the first flip agree; on an AMD EPYC with AVX2 no float32
    pair flips a pool choice within 8 steps at all). So: on the machine the file records
    (float_order_drift.machine()) the flip's step and the spreads bit for bit; elsewhere no flip
    inside the window and each float32 spread in the window inside the exactness bound the claims
    use, the property they rest on (there, a flip moved later is not caught). (Seen on 2026-12-07, Xeon with AVX-512 and AMX: the largest, 6x4 at step 0, is
    3.28e-7 against the file's 2.98e-7, so the bound's margin over float order is 9x there, not 10x.)"""
    mod = load_benchmark("convergence_spread")
    now = mod.float_order(8)
    assert measured["float_order"]["first_pool_switch"] == convergence.EXACT_WINDOW - 1
    same_machine = measured.get("machine") == mod.drift.machine()
    if same_machine:
        assert now["first_pool_switch"] == measured["float_order"]["first_pool_switch"]
    else:  # the flip's step is the processor's too: it must not come inside the window
        assert now["first_pool_switch"] is None or now["first_pool_switch"] >= convergence.EXACT_WINDOW - 1
    for name, run in now["runs"].items():
        if name.startswith("fp32 "):
            if same_machine:
                was = measured["float_order"]["runs"][name]["loss_diff"][:convergence.EXACT_WINDOW]
                assert run["loss_diff"][:convergence.EXACT_WINDOW] == was, name
            else:
                assert max(run["loss_diff"][:convergence.EXACT_WINDOW]) < measured["bound"], name


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
