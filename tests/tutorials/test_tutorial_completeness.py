"""Every tutorial is complete: a jupytext pair in sync, committed without outputs, a parameters
cell with out_dir, and a test that runs it; T1-T5 end with exercises pointing to their graded lab
(tutorials/labs/source/labN, tested by test_labs.py)."""
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
    number = nb_path.stem.split("_")[0]
    if int(number[1:]) <= 5:  # T1-T5: a graded lab each
        last = nb.cells[-1]
        assert last.cell_type == "markdown" and last.source.startswith("## Exercises")
        lab = f"lab{number[1:]}"
        assert (REPO_ROOT / "tutorials" / "labs" / "source" / lab / f"{lab}.ipynb").is_file()
        assert f"labs/source/{lab}/{lab}.ipynb" in last.source
    assert nb_path.name in (TESTS / "test_tutorials.py").read_text()
    py = nb_path.with_suffix(".py")
    text = jupytext.read(py)
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in text.cells]
