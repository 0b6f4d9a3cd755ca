"""Every notebook is reproducible and tested: a reproductions YAML points at it, a test file in
tests/notebooks names it, it is committed without outputs, and it follows the notebook rules
(a first markdown cell with the deviations, one `name: type = value  # help` parameters cell,
no loops or definitions in code cells, its jupytext pair in sync)."""
import re
from pathlib import Path

import pytest

for _pkg in ("plotly", "papermill", "nbformat", "jupytext", "ipykernel"):  # the notebook stack (not on every GPU VM)
    pytest.importorskip(_pkg, reason=f"the notebook tests need {_pkg}")

import jupytext
import nbformat

from stanza_core.reproduce import load_spec

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
SPECS = sorted((REPO_ROOT / "reproductions").glob("*.yaml"))
PARAM_LINE = re.compile(r"^\w+: [\w\[\], ]+ = .+  # \S.*$")
LOGIC = re.compile(r"^\s*(for|while|def|class|async def|with)\b|\bfor \w+ in\b|\blambda\b", re.M)


def test_there_are_notebooks_and_specs():
    assert NOTEBOOKS and SPECS


@pytest.mark.parametrize("spec_path", SPECS, ids=lambda p: p.stem)
def test_spec_loads(spec_path):
    load_spec(spec_path)  # schema, notebook path and parameter names are checked on load


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_has_a_spec_and_a_test(nb_path):
    specs = [s for s in SPECS if load_spec(s).notebook == nb_path.resolve()]
    assert specs, f"no reproductions/*.yaml has notebook: notebooks/{nb_path.name}"
    tests = [t for t in (REPO_ROOT / "tests" / "notebooks").glob("test_*.py")
             if t.name != Path(__file__).name and nb_path.name in t.read_text()]
    assert tests, f"no tests/notebooks/test_*.py names {nb_path.name}"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_follows_the_rules(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "commit notebooks without outputs"
    first = nb.cells[0]
    assert first.cell_type == "markdown" and "Deviations from the paper" in first.source
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and params[0] is code[0], "one parameters cell, the first code cell"
    lines = [ln for ln in params[0].source.splitlines() if ln.strip()]
    bad = [ln for ln in lines if not PARAM_LINE.match(ln)]
    assert not bad, f"parameters must be `name: type = value  # help`: {bad}"
    assert any(ln.startswith("out_dir: str = ") for ln in lines)
    logic = [c.source for c in code[1:] if LOGIC.search(c.source)]
    assert not logic, f"notebook cells hold calls only; move this into stanza_core: {logic}"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_jupytext_pair_is_in_sync(nb_path):
    py = nb_path.with_suffix(".py")
    if not py.exists():
        pytest.skip(f"{nb_path.name} has no py:percent pair")
    ipynb, text = nbformat.read(nb_path, as_version=4), jupytext.read(py)
    assert [(c.cell_type, c.source) for c in ipynb.cells] == [(c.cell_type, c.source) for c in text.cells]
