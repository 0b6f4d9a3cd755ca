"""What a user meets after `pip install`: each message is one line, `error: ...`, naming the fix.

A missing extra is made missing by a None in sys.modules (the import then raises ImportError,
as it does when the package is not installed)."""
import importlib.util
import sys
from pathlib import Path

import pytest

from stanza_core import DIST_NAME
from stanza_core.engine import train
from stanza_core.perf import __main__ as perf_main
from stanza_core.reproduce import run as reproduce_run

ROOT = Path(__file__).resolve().parents[2]


def _one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_reproduce_outside_a_checkout_names_a_checkout_or_specs(monkeypatch, tmp_path, capsys):
    installed = tmp_path / "site-packages"  # stanza_core's parent in a wheel install: no reproductions/
    installed.mkdir()
    monkeypatch.setattr(reproduce_run, "REPO_ROOT", installed)
    assert reproduce_run.main([]) == 2
    line = _one_error_line(capsys)
    assert "clone the repository" in line and "--specs" in line and str(installed) in line, line
    assert not (installed / "reproductions").exists()  # nothing written into the install


def test_a_missing_course_extra_names_its_pip_install(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT))
    from tutorials import course

    monkeypatch.setitem(sys.modules, "nbgrader", None)
    assert course.main(["self-check"]) == 2
    line = _one_error_line(capsys)
    assert f'pip install "{DIST_NAME}[course]"' in line and "needs nbgrader" in line, line


def test_a_missing_bench_extra_names_its_pip_install(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("fit_compute_model", ROOT / "benchmarks" / "fit_compute_model.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    spec.loader.exec_module(mod)  # importable without scipy: only the fit needs it
    assert mod.main([]) == 2
    line = _one_error_line(capsys)
    assert f'pip install "{DIST_NAME}[bench]"' in line and "needs scipy" in line, line


def test_an_installed_extra_is_the_plain_import():
    from stanza_core.extras import require

    assert require("yaml", "test") is sys.modules["yaml"]  # not an extra's module, present: imported
    with pytest.raises(ModuleNotFoundError):  # not an extra's module, absent: a real error, not a hint
        require("no_such_module_xyz", "test")


@pytest.mark.parametrize("strategy", ["stanza"])
def test_bare_train_with_a_multi_rank_strategy_names_torchrun(strategy, monkeypatch, capsys):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert train.main(["--strategy", strategy, "--model", "tiny_cnn", "--dataset", "synthetic"]) == 2
    line = _one_error_line(capsys)
    assert "torchrun --nproc-per-node" in line and "--strategy local" in line, line


@pytest.mark.parametrize("script, module, build", [
    ("stanza-train", "stanza_core.train", train.build_parser),
    ("stanza-perf", "stanza_core.perf", perf_main.build_parser),
])
def test_usage_names_the_command_that_was_run(script, module, build, monkeypatch):
    monkeypatch.setattr(sys, "argv", [f"/venv/bin/{script}"])
    assert build().format_usage().startswith(f"usage: {script} ")
    monkeypatch.setattr(sys, "argv", [f"/src/{module.replace('.', '/')}.py"])
    assert build().format_usage().startswith(f"usage: python -m {module} ")
