"""The exactness test's absolute tolerance is the rule applied to float order alone: what
benchmarks/exactness_float_order.py measured (benchmarks/results/exactness_float_order.json) for
the configurations tests/dist/test_exactness.py runs, and it stays far below what one wrong label
moves in the same measurement."""
from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest

from stanza_core.experiments import convergence

ROOT = Path(__file__).resolve().parents[2]
MEASURED = json.loads((ROOT / "benchmarks" / "results" / "exactness_float_order.json").read_text())


def load_benchmark():
    spec = importlib.util.spec_from_file_location("exactness_float_order", ROOT / "benchmarks" / "exactness_float_order.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def exactness_cases() -> list[tuple]:
    """test_exactness.CASES read from its source (importing it would need tests/dist on the path)."""
    tree = ast.parse((ROOT / "tests" / "dist" / "test_exactness.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "CASES")
    return ast.literal_eval(node.value)


def default_rtol() -> float:
    """dist_launch.assert_same_params's default rtol, read from its source."""
    tree = ast.parse((ROOT / "tests" / "dist" / "dist_launch.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "assert_same_params")
    names = [a.arg for a in fn.args.args][-len(fn.args.defaults):]
    return ast.literal_eval(fn.args.defaults[names.index("rtol")])


def test_the_file_covers_every_configuration_the_exactness_test_runs():
    bench = load_benchmark()
    measured = {(m, r["image_size"], r["global_batch"], r["steps"]) for m, r in MEASURED["models"].items()}
    assert {c[:4] for c in exactness_cases()} == measured == set(bench.CONFIGS)
    assert MEASURED["rtol"] == bench.RTOL == default_rtol()  # the rtol the atol was measured beside
    assert (MEASURED["lr"], MEASURED["momentum"]) == (0.05, 0.9)  # test_exactness's --lr, TrainConfig's momentum


def problems(r: dict) -> list[str]:
    """What is wrong with one model's entry: its atol is not the rule on its float-order runs, or
    does not stay 10 x below what one wrong label moves."""
    worst = max(c["max_excess"] for c in r["chunkings"].values())
    rule = convergence.exact_bound({"largest excess": worst}) if worst > 0 else 0.0
    out = [] if r["atol"] == rule else [f"atol {r['atol']:g} is not the rule's {rule:g}"]
    if not r["one_wrong_label"]["max_excess"] > 10 * r["atol"]:
        out.append(f"one wrong label moves {r['one_wrong_label']['max_excess']:.1e}, not 10 x atol")
    return out


@pytest.mark.parametrize("model", sorted(MEASURED["models"]))
def test_atol_is_the_rule_on_the_measured_float_order(model):
    r = MEASURED["models"][model]
    assert problems(r) == []
    assert r["atol"] >= max(c["max_excess"] for c in r["chunkings"].values()) * convergence.SAFETY


def test_a_planted_entry_fails():
    # alexnet's float order with the tolerance in force before the measurement (1e-6): not the rule
    planted = {"chunkings": {"12x1": {"max_excess": 1.41e-5}}, "atol": 1e-6, "one_wrong_label": {"max_excess": 1.6e-2}}
    assert problems(planted) == ["atol 1e-06 is not the rule's 0.0002"]
    # a tolerance too wide to see a wrong label
    planted = {**planted, "atol": 2e-4, "one_wrong_label": {"max_excess": 1e-3}}
    assert problems(planted) == ["one wrong label moves 1.0e-03, not 10 x atol"]
