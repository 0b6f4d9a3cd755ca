"""Helpers for the papermill tests: run a notebook the way `make reproduce` does (same runner,
same venv kernel), but with its YAML's `tiny` parameters and into pytest's tmp_path.

stanza_core.reproduce is imported inside the fixtures: it needs the notebook stack (plotly,
papermill), which some GPU VM images lack, and each test module skips with that reason first."""
import json
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spec_of():
    """spec_of("anatomy") -> the checked Spec of reproductions/anatomy.yaml."""
    from stanza_core.reproduce import load_spec

    return lambda name: load_spec(REPO_ROOT / "reproductions" / f"{name}.yaml")


@pytest.fixture
def run_notebook(tmp_path):
    """run_notebook(spec, **overrides) -> (results dict, out_dir, executed notebook path).

    Runs the spec's notebook with its tiny parameters (updated by `overrides`); a failing cell
    raises papermill's PapermillExecutionError."""
    from stanza_core.reproduce import execute

    def run(spec, **overrides):
        out = tmp_path / spec.name
        executed = tmp_path / spec.notebook.name
        execute(spec.notebook, executed, {**spec.params["tiny"], **overrides, "out_dir": str(out)},
                timeout_s=spec.timeout_s, progress_bar=False)
        return json.loads((out / "results.json").read_text()), out, executed

    return run


@pytest.fixture(scope="session")
def bench_cache(tmp_path_factory):
    """Measured runs shared by the notebook tests of one session (the cache keys every
    parameter and a fingerprint of the measuring code, so sharing never serves another run)."""
    return str(tmp_path_factory.getbasetemp() / "bench-cache")
