"""Every tutorial is complete: a jupytext pair in sync, committed without outputs, a parameters
cell with out_dir, exercises at the end, a solutions module, and a test that runs it."""
import re
from pathlib import Path

import jupytext
import nbformat
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = sorted((REPO_ROOT / "tutorials").glob("t[0-9]_*.ipynb"))
TESTS = Path(__file__).parent


def test_there_are_five_tutorials():
    assert [p.stem.split("_")[0] for p in TUTORIALS] == ["t1", "t2", "t3", "t4", "t5"]


@pytest.mark.parametrize("nb_path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_is_complete(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "commit tutorials without outputs"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# T")
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and params[0] is code[0]
    assert re.search(r"^out_dir: str = ", params[0].source, re.M)
    last = nb.cells[-1]
    assert last.cell_type == "markdown" and last.source.startswith("## Exercises")
    number = nb_path.stem.split("_")[0]
    solutions = REPO_ROOT / "tutorials" / "solutions" / f"{number}.py"
    assert solutions.is_file(), f"no tutorials/solutions/{number}.py"
    assert f"solutions/{number}.py" in last.source
    assert f"test_{number}_" in (TESTS / "test_solutions.py").read_text()
    assert nb_path.name in (TESTS / "test_tutorials.py").read_text()
    py = nb_path.with_suffix(".py")
    text = jupytext.read(py)
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in text.cells]
