"""benchmarks/validate_model.py builds its parameters through the notebook's own object
(validation.ValidationParams) and reports on bench files; bad input is one line, exit 2."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("validate_model", ROOT / "benchmarks" / "validate_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_input_and_a_missing_file_are_one_line_errors(capsys):
    vm = _script()
    assert vm.main([]) == 2
    assert capsys.readouterr().err.strip() == "error: give bench results files, or --measure"
    assert vm.main(["/nonexistent/bench.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such file" in err[0]


def test_a_bench_file_reaches_the_validation_with_the_notebooks_parameters(monkeypatch, capsys):
    """The script's path up to the validation (timing the bench's rounds would take ~40 s: the
    rounds step is replaced by one that records what it was given)."""
    vm = _script()
    from stanza_core.experiments import validation

    seen = {}

    def rounds(b):
        seen["bench"] = b
        raise ValueError("stop here")
    monkeypatch.setattr(validation, "measure_rounds_for", rounds)
    bench = str(ROOT / "benchmarks" / "results" / "bench_alexnet_10g.json")
    assert vm.main([bench]) == 2 and capsys.readouterr().err.strip() == "error: stop here"
    assert seen["bench"].config["model"] == "alexnet" and seen["bench"].runs
