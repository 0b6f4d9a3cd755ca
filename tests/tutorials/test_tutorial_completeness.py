"""Every tutorial is complete: a jupytext pair in sync, committed without outputs, a parameters
cell with out_dir, and a test that runs it; each ends with exercises pointing to its graded lab
(tutorials/labs/source/labN, tested by test_labs.py); T6-T8 also state their learning goals."""
import re
from pathlib import Path

import jupytext
import nbformat
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = sorted((REPO_ROOT / "tutorials").glob("t[0-9]_*.ipynb"))
TESTS = Path(__file__).parent


def test_there_are_eight_tutorials():
    assert [p.stem.split("_")[0] for p in TUTORIALS] == [f"t{i}" for i in range(1, 9)]


def test_pointers_between_tutorials_name_existing_ones():
    stems = {p.stem for p in TUTORIALS}
    for p in TUTORIALS:
        for name in re.findall(r"`(t\d_[a-z_]+)`", p.with_suffix(".py").read_text()):
            assert name in stems or (REPO_ROOT / "tutorials" / f"{name}.py").is_file(), (p.name, name)


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
    last = nb.cells[-1]  # a graded lab each
    assert last.cell_type == "markdown" and last.source.startswith("## Exercises")
    lab = f"lab{number[1:]}"
    assert (REPO_ROOT / "tutorials" / "labs" / "source" / lab / f"{lab}.ipynb").is_file()
    assert f"reproductions/out/course/release/{lab}/{lab}.ipynb" in last.source  # the release, no solutions
    if int(number[1:]) >= 6:
        assert "**Learning goals.**" in nb.cells[0].source
    assert nb_path.name in (TESTS / "test_tutorials.py").read_text()
    py = nb_path.with_suffix(".py")
    text = jupytext.read(py)
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in text.cells]
