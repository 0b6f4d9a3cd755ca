"""One submitted notebook to scores: the cells the jail runs, the grader's namespace, the autograded
notebook and the gradebook rows (tutorials.autograde runs the student's side).

    cells = grade_submission(course, lab, student)   # {grade_id: [score, max, needs a hand grade]}
"""
from __future__ import annotations

import copy
import functools
import shutil
from pathlib import Path

from tutorials import autograde

READ_ERRORS = (OSError, ValueError, KeyError, TypeError, AttributeError)


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) if isinstance(cell, dict) else {}


def _setup(cell) -> bool:
    m = _meta(cell)
    return cell.cell_type == "code" and not m.get("grade") and not m.get("solution")


@functools.lru_cache(maxsize=16)
def _trusted_namespace(source_path: str, mtime: float) -> dict:
    """The lab's locked setup cells run here, once per grading process (instructor's code only)."""
    import nbformat
    nb = nbformat.read(source_path, as_version=4)
    ns: dict = {"__name__": "__grader__"}
    for c in nb.cells:
        if _setup(c):
            exec(compile(c.source, f"<{_meta(c).get('grade_id')}>", "exec"), ns)
    return ns


def cell_forbids(cell_source: str, ns: dict) -> tuple[str, ...]:
    """The dotted names of every `forbid = [...]` list of a graded cell (the references its hidden
    values came from), evaluated as the cell would: with the lab's setup and the cell's own imports."""
    import ast
    tree = ast.parse(cell_source)
    lists = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
             and [getattr(t, "id", None) for t in n.targets] == ["forbid"]]
    if not lists:
        return ()
    ns = dict(ns)
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            exec(compile(ast.Module([node], []), "<imports>", "exec"), ns)
    names = {autograde.dotted(f) for value in lists
             for f in eval(compile(ast.Expression(value), "<forbid>", "eval"), ns)}
    return tuple(sorted(names))


def student_answers(path: Path, source) -> tuple[dict[str, str], str | None]:
    """{solution grade_id: the student's source} of a submitted notebook, or ({}, why it is unreadable)."""
    import nbformat
    wanted = {_meta(c)["grade_id"]: c.cell_type for c in source.cells if _meta(c).get("solution")}
    try:
        nb = nbformat.read(str(path), as_version=4)
        got = {}
        for c in nb.cells:
            gid = _meta(c).get("grade_id")
            if gid in wanted and gid not in got and isinstance(c.get("source"), str):
                got[gid] = c.source
    except READ_ERRORS + (nbformat.reader.NotJSONError,) as e:
        return {}, f"the notebook could not be read ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"
    return got, None


def grade_cells(source, release, answers: dict[str, str], broken: str | None, run_unanswered: bool = False):
    """Grade the code cells of `source` (frozen) against `answers`; returns the autograded notebook
    (the release with the answers and the verdicts) and {grade_id: reason or None}. A test cell whose
    answer is as released gets 0 without being run, unless `run_unanswered` (the self-check's
    unmodified release: every test must fail on the release's stub)."""
    reasons: dict = {}
    out = copy.deepcopy(release)
    functions = [_meta(c)["grade_id"] for c in source.cells if c.cell_type == "code" and _meta(c).get("solution")]
    screened = {f: why for f in functions if f in answers and (why := autograde.screen(answers[f]))}
    cells = []
    for c in source.cells:
        gid = _meta(c).get("grade_id")
        if _setup(c):
            cells.append((gid, c.source))
        elif c.cell_type == "code" and _meta(c).get("solution") and gid not in screened:
            cells.append((gid, answers.get(gid, "")))
    # an answer left as released (`raise NotImplementedError()`) is not run: its test cell gets 0, as
    # the release does (the self-check shows it), without starting a jail or a rank for it
    released = {_meta(c)["grade_id"]: c.source for c in release.cells if _meta(c).get("solution")}
    unanswered = set() if run_unanswered else {f for f in functions if answers.get(f, released.get(f)) == released.get(f)}
    setup = next((i for i, c in enumerate(source.cells) if c.cell_type == "code" and not _setup(c)), 0)
    setup = sum(1 for c in source.cells[:setup] if _setup(c))  # the leading locked cells: the shared jail's
    session = autograde.Session(cells, screened, setup)
    secret = (source.path.parents[2] / "term-secret").read_text().strip()
    try:
        ns_base = _trusted_namespace(str(source.path), source.mtime)
        for c in source.cells:
            m = _meta(c)
            if not (c.cell_type == "code" and m.get("grade")):
                continue
            if broken:
                reasons[m["grade_id"]] = broken
                continue
            if m["grade_id"].removeprefix("test_") in unanswered:
                reasons[m["grade_id"]] = "no answer: the cell is as released (not run)"
                continue
            ns = dict(ns_base)
            without = cell_forbids(c.source, ns_base)  # this cell's calls: a jail without them
            ns.update({f: autograde.Proxy(session, f, without) for f in functions})
            if (Path(__file__).parent / "labs" / "source" / source.path.parent.name / "grader.py").is_file():
                from tutorials import rank_grading
                ns["gradekit"] = rank_grading.Shim(session, secret)
            ns["__graded__"] = lambda fn, forbid, *a, **k: session.call(
                fn.name, a, k, [autograde.dotted(f) for f in forbid], fn.without)
            reasons[m["grade_id"]] = autograde._verdict(c.source, ns)
    finally:
        session.close()
    for c in out.cells:
        m = _meta(c)
        gid = m.get("grade_id")
        if m.get("solution") and gid in answers:
            c.source = answers[gid]
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
            if m.get("grade"):
                why = reasons.get(gid)
                c.outputs = [{"output_type": "stream", "name": "stdout", "text": "passed\n"}] if why is None else [
                    {"output_type": "error", "ename": "NotGraded" if broken else "Failed", "evalue": why,
                     "traceback": [why]}]
    return out, reasons


def save(course: Path, lab: str, student: str, nb, submitted: Path) -> dict:
    """Write autograded/<student>/<lab>/ and the gradebook's rows, as nbgrader's autograder does."""
    import nbformat
    from nbgrader import utils
    from nbgrader.api import Gradebook

    dest = course / "autograded" / student / lab
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    nbformat.write(nbformat.from_dict(nb), dest / f"{lab}.ipynb")
    stamp = submitted.parent / "timestamp.txt"
    if stamp.is_file():
        shutil.copy(stamp, dest / "timestamp.txt")
    cells = {}
    import warnings
    warnings.filterwarnings("ignore", message=".*not in session.*")  # nbgrader 0.9's gradebook under SQLAlchemy 2
    from tutorials import course as _course
    handed_in = utils.parse_utc(stamp.read_text().strip()) if stamp.is_file() else None
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.update_or_create_student(student)
        if (due := _course.due_date(course, lab)) is not None:
            gb.update_or_create_assignment(lab, duedate=due)
        gb.update_or_create_submission(lab, student, **({"timestamp": handed_in} if handed_in else {}))
        for c in nbformat.from_dict(nb).cells:
            if utils.is_grade(c):
                g = gb.find_grade(c.metadata.nbgrader.grade_id, lab, lab, student)
                g.auto_score, _ = utils.determine_grade(c)
                g.needs_manual_grade = g.manual_score is not None or g.auto_score is None
                cells[g.name] = [g.score, g.max_score, bool(g.needs_manual_grade)]
            if utils.is_solution(c) or utils.is_task(c):
                comment = gb.find_comment(c.metadata.nbgrader.grade_id, lab, lab, student)
                unchanged = c.metadata.nbgrader.get("checksum") == utils.compute_checksum(c) and not utils.is_task(c)
                comment.auto_comment = "No response." if unchanged else None
        gb.db.commit()
        nb_row = gb.find_submission_notebook(lab, lab, student)
        cells = {g.name: [g.score, g.max_score, bool(g.needs_manual_grade)] for g in nb_row.grades}
    return cells


class _Frozen:
    """The course's frozen instructor notebook, with where it came from (for the namespace cache)."""

    def __init__(self, path: Path):
        import nbformat
        self.path, self.mtime = path, path.stat().st_mtime
        self.cells = nbformat.read(str(path), as_version=4).cells


def grade_submission(course: Path, lab: str, student: str, run_unanswered: bool = False) -> tuple[dict, dict]:
    """Grade <course>/submitted/<student>/<lab>/<lab>.ipynb: ({cell: [score, max, pending]}, {cell: reason})."""
    import nbformat
    source = _Frozen(course / "source" / lab / f"{lab}.ipynb")
    release = nbformat.read(str(course / "release" / lab / f"{lab}.ipynb"), as_version=4)
    submitted = course / "submitted" / student / lab / f"{lab}.ipynb"
    answers, broken = student_answers(submitted, source)
    nb, reasons = grade_cells(source, release, answers, broken, run_unanswered)
    return save(course, lab, student, nb, submitted), reasons
