"""The graded labs (tutorials/labs/source, nbgrader): the release holds no solution and no hidden
test; autograding gives the reference solutions full marks, the unmodified release zero on every
graded cell, and a planted wrong answer loses exactly the points of its own test cell; every
graded function is named in its exercise's text; each source .ipynb is in sync with its .py."""
import ast
import json
import re
import shutil
from pathlib import Path

import jupytext
import nbformat
import pytest

from tutorials import course

LABS = course.lab_names()

# One plausible wrong answer per lab: (function's grade_id, new body). Each passes its visible
# test (a student would not notice) and must fail the hidden ones at other inputs.
PLANTED = {
    "lab1": ("fc_param_share", "return 0.9  # a number read off a figure"),
    "lab2": ("stanza_bytes_per_step", "return 2 * 4 * A * G + (N - k) * round(2 * (N - k - 1) * 4 * Pc / (N - k)) "
                                      "+ k * round(2 * (k - 1) * 4 * Pf / k)  # labels forgotten"),
    "lab3": ("label_bytes_per_step", "return 48  # T2's G = 6, copied"),
    "lab4": ("bucket_count", "return 1  # right only when one bucket holds everything"),
    "lab5": ("ps_over_stanza_limit", "return P / Pc  # right only when b (A + 1) << Pc"),
    "lab6": ("bn_stats_bytes", "return 2 * 4 * 4 * channels if n > 1 else 0  # the ring's (n - 1) / n left out"),
    "lab7": ("bsp_waits", "return [max(compute_s) - c for c in compute_s]  # the allreduce itself left out"),
    "lab8": ("exposed_after_backward", "return max(0.0, ready_s[-1] + sum(comm_s) - backward_s)  # every bucket after the last"),
}


def _source(lab):
    return nbformat.read(course.SOURCE / lab / f"{lab}.ipynb", as_version=4)


def _grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def test_there_is_a_lab_per_tutorial():
    assert LABS == [f"lab{i}" for i in range(1, 9)]


@pytest.mark.parametrize("lab", LABS)
def test_source_pair_in_sync_and_cells_marked(lab):
    nb = _source(lab)
    nbformat.validate(nb)
    text = jupytext.read(course.SOURCE / lab / f"{lab}.py")
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in text.cells]
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    ids = [_grade_id(c) for c in nb.cells]
    assert None not in ids and len(set(ids)) == len(ids), "every cell has a unique nbgrader grade_id"
    tests = [c for c in nb.cells if c.metadata["nbgrader"].get("grade")]
    solutions = [c for c in nb.cells if c.metadata["nbgrader"].get("solution")]
    assert len(tests) == len(solutions) >= 3
    for c in solutions:
        assert "### BEGIN SOLUTION" in c.source and "### END SOLUTION" in c.source
    for c in tests:  # graded at inputs the student does not see
        assert c.metadata["nbgrader"]["points"] > 0 and "### BEGIN HIDDEN TESTS" in c.source


@pytest.mark.parametrize("lab", LABS)
def test_every_graded_function_is_named_in_its_exercise_text(lab):
    cells = _source(lab).cells
    for i, c in enumerate(cells):
        if not c.metadata["nbgrader"].get("solution"):
            continue
        text = next(cells[j].source for j in range(i - 1, -1, -1) if cells[j].cell_type == "markdown")
        defined = [n.name for n in ast.parse(c.source).body if isinstance(n, ast.FunctionDef)]
        assert defined, f"{lab}: solution cell {_grade_id(c)} defines no function"
        for name in defined:
            assert f"`{name}(" in text, f"{lab}: {name} is not named in its exercise's text"
        test = cells[i + 1]
        assert test.metadata["nbgrader"].get("grade") and re.search(rf"\b{defined[0]}\(", test.source)


def _plant(nb, grade_id, body):
    cell = next(c for c in nb.cells if _grade_id(c) == grade_id)
    new, n = re.subn(r"### BEGIN SOLUTION\n.*?### END SOLUTION", "### BEGIN SOLUTION\n    " + body.replace("\\", "\\\\")
                     + "\n    ### END SOLUTION", cell.source, flags=re.S)
    assert n == 1
    cell.source = new


def _grade_one(course_dir: str, student_dir: str, labs: list[str]) -> dict:
    """Autograde one student in a course folder of its own (a process of the pool below)."""
    import warnings
    warnings.filterwarnings("ignore", message=".*not in session.*")
    out = Path(course_dir)
    return course.autograde(course._api(out), out, Path(student_dir), labs)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Build the release and autograde three students: reference, release, planted. Each student
    is graded in its own copy of the course folder, two at a time (24 kernels: ~2 minutes serial)."""
    pytest.importorskip("nbgrader")
    import multiprocessing
    import os
    import sys
    from concurrent.futures import ProcessPoolExecutor
    os.environ["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(course.REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    root = tmp_path_factory.mktemp("course")
    out = root / "course"
    course.build_release(out, LABS)
    subs = course.self_check_submissions(out, LABS)
    for lab, (grade_id, body) in PLANTED.items():
        nb = nbformat.read(out / "source" / lab / f"{lab}.ipynb", as_version=4)
        _plant(nb, grade_id, body)
        (subs / "planted" / lab).mkdir(parents=True)
        nbformat.write(nb, subs / "planted" / lab / f"{lab}.ipynb")
    students = sorted(p.name for p in subs.iterdir())
    copies = {}
    for student in students:
        copies[student] = root / f"course-{student}"
        shutil.copytree(out, copies[student], ignore=shutil.ignore_patterns("self-check"))
        shutil.copytree(subs / student, root / "subs" / student / student)
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {s: pool.submit(_grade_one, str(copies[s]), str(root / "subs" / s), LABS) for s in students}
        grades = {s: f.result()[s] for s, f in futures.items()}
    return out, grades


@pytest.mark.slow
def test_release_has_no_solution_and_no_hidden_test(graded):
    out, _ = graded
    for lab in LABS:
        text = (out / "release" / lab / f"{lab}.ipynb").read_text()
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
        source = _source(lab)
        solutions = sum(bool(c.metadata["nbgrader"].get("solution")) for c in source.cells)
        release = nbformat.read(out / "release" / lab / f"{lab}.ipynb", as_version=4)
        code = "\n".join(c.source for c in release.cells if c.cell_type == "code")
        assert code.count("raise NotImplementedError()") == solutions
        for c in source.cells:  # the hidden tests' inputs are nowhere in the release
            if c.metadata["nbgrader"].get("grade"):
                hidden = c.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
                assert hidden.strip() and hidden.strip() not in text


@pytest.mark.slow
def test_reference_full_marks_release_zero_on_every_cell(graded):
    _, grades = graded
    assert set(grades["reference"]) == set(grades["release"]) == set(LABS)
    assert course.self_check_problems({k: grades[k] for k in ("reference", "release")}) == []
    for lab in LABS:
        assert len(grades["release"][lab]) >= 3
        assert all(m > 0 for _, m in grades["reference"][lab].values())


@pytest.mark.slow
def test_a_planted_wrong_answer_loses_exactly_its_cells_points(graded):
    _, grades = graded
    for lab, (grade_id, _) in PLANTED.items():
        cells = grades["planted"][lab]
        lost = {c: m - s for c, (s, m) in cells.items() if s != m}
        assert lost == {f"test_{grade_id}": cells[f"test_{grade_id}"][1]}, (lab, cells)


def test_make_course_is_one_command():
    text = (course.REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^course: install\n\t\$\(BIN\)/python -m tutorials\.course .*SUBMISSIONS", text, re.M)
