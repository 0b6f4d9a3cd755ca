"""The course's graded labs with nbgrader: a self-check of the grader, and the commands of a term.

    python -m tutorials.course [self-check] [--out DIR] [--submissions DIR] [--labs lab1,lab3]
    python -m tutorials.course release   --course DIR [--labs ...] [--force]
    python -m tutorials.course collect   --course DIR --submissions DIR [--labs ...]
    python -m tutorials.course autograde --course DIR [--labs ...] [--students a,b] [--force]
    python -m tutorials.course feedback  --course DIR [--labs ...] [--students a,b]
    python -m tutorials.course export    --course DIR
    python -m tutorials.course bundle    --course DIR --to students.zip
    python -m tutorials.course student-repo --course DIR --to FOLDER   # the repository students clone

The instructor's notebooks are `tutorials/labs/source/<lab>/<lab>.ipynb` (nbgrader's layout):
solution regions between `### BEGIN SOLUTION` / `### END SOLUTION`, hidden tests between
`### BEGIN HIDDEN TESTS` / `### END HIDDEN TESTS`, graded cells with their points in the cell
metadata. A graded markdown cell with a solution region is a "why" answer graded by hand
(nbgrader's formgrader); its solution region holds the model answer and the rubric.

Hidden tests are written against references the student cannot reach (`freeze`):
- `__frozen__(expr)` is evaluated when the release is generated, in this process, with the
  lab's locked setup cells and the test cell's own imports and helper functions, and replaced
  by its value as a literal (in the course folder's copy); `__term__` there is a random.Random
  seeded by the course folder's secret (`term-secret`), so hidden inputs drawn from it change
  from term to term; `name = __frozen__(...)` binds `name` for the cell's later values;
- `__graded__(fn, forbid, *args)` calls the student's `fn` with every function of `forbid` (the
  references the value came from) made to raise while it runs.
Grading (tutorials.grade_notebook) never runs student code in this process or in a kernel beside
the hidden tests: each submission's solution cells run jailed (tutorials.sandbox) and answer the
graded cells' calls with JSON values; the graded cells, and so the points, run here.

Self-check (the default; `make course`): a fresh folder `--out` (default reproductions/out/course,
replaced each run; its release/ is what students open): the release is generated, then student
`reference` (the instructor's notebooks) must get full marks on every autograded cell with its
"why" cells waiting for a hand grade, and student `release` (the unmodified release) zero on
every cell. With --submissions, that folder of `<student>/<lab>/<lab>.ipynb` is graded instead
(one-shot; use the term commands to keep grades).

A term keeps one course folder (`--course`, outside reproductions/out, which `make clean`
deletes) with nbgrader's gradebook and an nbgrader_config.py, so that nbgrader's formgrader
started in it grades the "why" cells by hand: `release` generates labs not yet released (`--force`
regenerates); `collect` copies `<submissions>/<student>/<lab>/<lab>.ipynb` into `submitted/`;
`autograde` grades what was collected and not yet graded (jailed, as above); `feedback` writes
`feedback/<student>/<lab>/<lab>.html`; `export` writes `grades.csv` (nbgrader's, with hand
grades) and `grades.json`; `bundle` writes what students get (the release and a README), after
checking it holds no solution region and no hidden test. Nothing is deleted or overwritten in
place: what a command replaces (a submission, a regenerated lab, the gradebook before each
change, a previous export) is moved or copied under `<course>/backup/<UTC time>/` first.

Exit status: 0 done (and, for the self-check, as expected), 1 a self-check or grading failure,
2 bad input.
"""
from __future__ import annotations

import argparse
import atexit
import ast
import filecmp
import functools
import json
import os
import pprint
import random
import shutil
import sys
import tempfile
import time
import warnings
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "labs" / "source"
REPO_ROOT = HERE.parent
DEFAULT_OUT = REPO_ROOT / "reproductions" / "out" / "course"
CLEANED = REPO_ROOT / "reproductions" / "out"  # `make clean` deletes it
CELL_TIMEOUT_S = 300
MARKER = ".stanza-course"  # marks a self-check folder this command made (and may replace)
TERM_MARKER = ".stanza-course-term"  # marks a term's course folder (never replaced)
LEAKS = ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "__frozen__", "__graded__")

SECRET = "term-secret"  # in the course folder: the seed of this term's hidden inputs


def lab_names(source: Path = SOURCE) -> list[str]:
    return sorted((p.name for p in source.iterdir() if (p / f"{p.name}.ipynb").is_file()),
                  key=lambda n: (len(n), n))


def manual_cells(lab: str, source: Path = SOURCE) -> set[str]:
    """The grade_ids of a lab's cells graded by hand (graded cells that are also answers)."""
    import nbformat
    nb = nbformat.read(source / lab / f"{lab}.ipynb", as_version=4)
    meta = [c.metadata.get("nbgrader", {}) for c in nb.cells]
    return {m["grade_id"] for m in meta if m.get("grade") and m.get("solution")}


def freeze(nb, secret: str = "", lab: str = "") -> list[str]:
    """Replace every `__frozen__(expr)` of `nb`'s graded cells by expr's value, evaluated with the
    notebook's locked setup cells and the graded cell's own imports and functions. In a graded
    cell, `__term__` is a random.Random seeded by (secret, lab, cell): the term's hidden inputs;
    `name = __frozen__(...)` binds `name` for the later values of the cell. Returns the literals."""
    ns: dict = {}
    if not any("__frozen__(" in c.source for c in nb.cells):
        return []
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if c.cell_type == "code" and not meta.get("grade") and not meta.get("solution"):
            exec(compile(c.source, f"<{meta.get('grade_id')}>", "exec"), ns)
    done = []
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if not (c.cell_type == "code" and meta.get("grade")):
            continue
        ns["__term__"] = random.Random(f"{secret}:{lab}:{meta['grade_id']}")
        tree = ast.parse(c.source)
        for node in tree.body:  # the cell's own imports and helper functions may serve its values
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef)):
                exec(compile(ast.Module([node], []), "<helper>", "exec"), ns)
        bound = {id(n.value): n.targets[0].id for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)}
        calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)
                        and isinstance(n.func, ast.Name) and n.func.id == "__frozen__"),
                       key=lambda n: (n.lineno, n.col_offset))
        lines = c.source.splitlines(keepends=True)
        offset = [0]
        for ln in lines:
            offset.append(offset[-1] + len(ln))
        literals = []
        for n in calls:
            (arg,) = n.args
            value = eval(compile(ast.Expression(arg), "<frozen>", "eval"), ns)
            literal = pprint.pformat(value, width=110, sort_dicts=False)
            if ast.literal_eval(literal) != value:
                raise ValueError(f"__frozen__ at line {n.lineno}: {type(value).__name__} is not a literal")
            if id(n) in bound:
                ns[bound[id(n)]] = value
            literals.append(literal)
        text = c.source
        for n, literal in reversed(list(zip(calls, literals))):
            start = offset[n.lineno - 1] + len(lines[n.lineno - 1].encode()[:n.col_offset].decode())
            end = offset[n.end_lineno - 1] + len(lines[n.end_lineno - 1].encode()[:n.end_col_offset].decode())
            text = text[:start] + literal + text[end:]
        done += literals
        c.source = text
    return done


def term_secret(course: Path) -> str:
    """The course folder's secret (made once, readable by its owner only): seeds the hidden inputs."""
    path = course / SECRET
    if not path.exists():
        import secrets
        path.touch(0o600)
        path.write_text(secrets.token_hex(32) + "\n")
    return path.read_text().strip()


def _api(out: Path):
    """An NbGraderAPI over the course folder `out` (config in code: no nbgrader_config.py needed)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    c = Config()
    c.CourseDirectory.root = str(out)
    c.CourseDirectory.course_id = "stanza"
    c.CourseDirectory.db_url = f"sqlite:///{out / 'gradebook.db'}"
    c.Execute.timeout = CELL_TIMEOUT_S
    c.NbGraderAPI.log_level = "WARN"
    # The kernels nbgrader starts talk over Unix sockets, not TCP on localhost (the kernel warns
    # of unencrypted TCP once per notebook otherwise). The socket path must be absolute and
    # short (108 bytes): a folder of this process's, removed at exit.
    c.AsyncKernelManager.transport = "ipc"
    c.AsyncKernelManager.ip = os.path.join(_socket_dir(), "kernel")
    return NbGraderAPI(coursedir=CourseDirectory(config=c), config=c)


@functools.cache
def _socket_dir() -> str:
    path = tempfile.mkdtemp(prefix="stanza-course-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _check(result: dict, what: str) -> None:
    if not result.get("success"):
        tail = [ln for ln in ((result.get("log") or "") + (result.get("error") or "")).strip().splitlines() if ln.strip()][-12:]
        raise RuntimeError(f"nbgrader {what} failed: " + " | ".join(tail))


def _copy_frozen(lab: str, out: Path, source: Path) -> None:
    """The frozen instructor's notebook into <out>/source; its literals into <out>/frozen/<lab>.json
    (outside source/, which nbgrader copies into the release)."""
    import nbformat
    shutil.copytree(source / lab, out / "source" / lab,
                    ignore=shutil.ignore_patterns("*.py", "__pycache__", "grader.py"))
    path = out / "source" / lab / f"{lab}.ipynb"
    nb = nbformat.read(path, as_version=4)
    literals = freeze(nb, term_secret(out), lab)
    nbformat.write(nb, path)
    (out / "frozen").mkdir(exist_ok=True)
    (out / "frozen" / f"{lab}.json").write_text(json.dumps(literals, indent=0) + "\n")


def build_release(out: Path, labs: list[str] | None = None, source: Path = SOURCE):
    """Fresh self-check folder at `out` with the frozen source notebooks; generate every release."""
    if (out / TERM_MARKER).exists():
        raise RuntimeError(f"{out} is a term's course folder: the self-check never replaces it")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("This nbgrader course folder is rewritten by `python -m tutorials.course`.\n")
    labs = labs or lab_names(source)
    for lab in labs:
        _copy_frozen(lab, out, source)
    api = _api(out)
    for lab in labs:
        _check(api.generate_assignment(lab, force=True, create=True), f"generate_assignment {lab}")
    return api


def self_check_submissions(out: Path, labs: list[str]) -> Path:
    """A submissions folder: `reference` = the instructor's notebooks, `release` = the release."""
    subs = out / "self-check"
    for student, root in (("reference", out / "source"), ("release", out / "release")):
        for lab in labs:
            (subs / student / lab).mkdir(parents=True, exist_ok=True)
            shutil.copy(root / lab / f"{lab}.ipynb", subs / student / lab / f"{lab}.ipynb")
    return subs



def grade_one(course: Path, lab: str, student: str, run_unanswered: bool = False) -> dict:
    """Grade one collected submission (tutorials.grade_notebook: the student's code runs jailed);
    {cell: [score, max, needs a hand grade]}. A submission that breaks gets 0 with its reason; a
    failure of the grader itself is printed and the next submission is still graded. An answer
    left as released is not run (0) unless `run_unanswered`."""
    from tutorials import grade_notebook
    try:
        cells, reasons = grade_notebook.grade_submission(course, lab, student, run_unanswered)
    except Exception as e:  # noqa: BLE001 - one line, and the other students are graded
        print(f"{student:<12} {lab:<8} not graded: the grader failed ({type(e).__name__}: {e})", file=sys.stderr)
        return {}
    for cell, why in reasons.items():
        if why:
            print(f"{student:<12} {lab:<8} {cell}: {why}")
    return cells


def _need_jail(course: Path) -> None:
    """Grading needs the jail, and a course folder the jail does not show."""
    from tutorials import autograde, sandbox
    if why := sandbox.available():
        raise RuntimeError(why)
    sandbox.check_hidden(course, REPO_ROOT, autograde.EXPOSE)


def autograde(api, out: Path, submissions: Path, labs: list[str], run_unanswered=("release",)) -> dict:
    """Autograde every <student>/<lab>/ of `submissions` (copied into `out`, replacing earlier
    copies: the self-check's way); {student: {lab: {cell: [score, max, needs a hand grade]}}}.
    The students of `run_unanswered` (the self-check's unmodified release) have every cell run,
    their unanswered ones too: each test must fail on the release's stub."""
    _need_jail(out)
    grades: dict = {}
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir()):
        student = student_dir.name
        for lab in labs:
            if not (student_dir / lab).is_dir():
                continue
            dest = out / "submitted" / student / lab
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(student_dir / lab, dest)
            grades.setdefault(student, {})[lab] = grade_one(out, lab, student, student in run_unanswered)
    return grades


def export_csv(out: Path, to: Path | None = None) -> Path:
    from nbgrader.api import Gradebook
    from nbgrader.plugins.export import CsvExportPlugin

    to = to or out / "grades.csv"
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        CsvExportPlugin(to=str(to)).export(gb)
    return to


def self_check_problems(grades: dict, manual: dict[str, set[str]] | None = None) -> list[str]:
    """What is wrong with a self-check's grades: reference not full marks on an autograded cell (or
    a hand-graded cell not waiting for its grade), release not zero on every cell."""
    manual = manual or {}
    problems = []
    for lab, cells in grades.get("reference", {}).items():
        for c, (s, m, pending) in cells.items():
            if c in manual.get(lab, ()):
                if not pending:
                    problems.append(f"reference {lab} {c}: not waiting for a hand grade")
            elif s != m:
                problems.append(f"reference {lab} {c}: {s} of {m}")
    for lab, cells in grades.get("release", {}).items():
        problems += [f"release {lab} {c}: {s} of {m} (expected 0)" for c, (s, m, _) in cells.items() if s != 0]
    return problems


# ---- a term -------------------------------------------------------------------------------

def _stamp() -> str:
    now = time.time()
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"


def _keep(course: Path, path: Path, stamp: str, move: bool = True) -> Path | None:
    """Move (or copy) `path` under <course>/backup/<stamp>/, at its path relative to the course."""
    if not path.exists():
        return None
    dest = course / "backup" / stamp / path.relative_to(course)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if move:
        shutil.move(str(path), dest)
    elif path.is_dir():
        shutil.copytree(path, dest)
    else:
        shutil.copy2(path, dest)
    return dest


def open_course(course: Path, create: bool = False) -> Path:
    course = course.resolve()
    if course == CLEANED or CLEANED in course.parents:
        raise ValueError(f"--course {course}: inside {CLEANED}, which `make clean` deletes; choose another folder")
    if (course / MARKER).exists():
        raise ValueError(f"--course {course}: a self-check folder (replaced on every self-check)")
    if not (course / TERM_MARKER).exists():
        if not create:
            raise ValueError(f"--course {course}: not a course folder (run `release` first)")
        if course.exists() and any(course.iterdir()):
            raise ValueError(f"--course {course}: not empty and not a course folder made by this command")
        course.mkdir(parents=True, exist_ok=True)
        (course / TERM_MARKER).write_text("A term's nbgrader course folder (python -m tutorials.course).\n")
        # for nbgrader's own tools started in this folder (the formgrader, where "why" cells are graded)
        (course / "nbgrader_config.py").write_text(
            f'c = get_config()  # noqa: F821\nc.CourseDirectory.course_id = "stanza"\nc.CourseDirectory.root = {str(course)!r}\n')
    return course


def release(course: Path, labs: list[str], force: bool = False, source: Path = SOURCE) -> list[str]:
    """Generate each lab's release in a term's folder; a released lab is regenerated only with
    `force`, its previous source and release kept under backup/. Returns the labs generated."""
    stamp, made = _stamp(), []
    api = _api(course)
    for lab in labs:
        if (course / "release" / lab).exists() or (course / "source" / lab).exists():
            if not force:
                print(f"{lab}: already released; --force regenerates it (the old one is kept)")
                continue
            _keep(course, course / "gradebook.db", stamp, move=False)
            for part in ("source", "release"):
                if kept := _keep(course, course / part / lab, stamp):
                    print(f"{lab}: previous {part} kept in {kept}")
        _copy_frozen(lab, course, source)
        _check(api.generate_assignment(lab, force=True, create=True), f"generate_assignment {lab}")
        print(f"{lab}: released in {course / 'release' / lab}")
        made.append(lab)
    return made


def _submission_files(submissions: Path, labs: list[str]):
    """(student, lab, notebook) for <student>/<lab>/<lab>.ipynb or <student>/<lab>.ipynb."""
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir()):
        for lab in labs:
            for nb in (student_dir / lab / f"{lab}.ipynb", student_dir / f"{lab}.ipynb"):
                if nb.is_file():
                    yield student_dir.name, lab, nb
                    break


def collect(course: Path, submissions: Path, labs: list[str]) -> list[tuple[str, str]]:
    """Copy submissions into submitted/; a changed resubmission replaces the old one, which is
    kept under backup/. Returns the (student, lab) pairs that are new or changed."""
    stamp, changed = _stamp(), []
    for student, lab, nb in _submission_files(submissions, labs):
        if not (course / "release" / lab).is_dir():
            print(f"{student} {lab}: skipped, {lab} is not released in this course")
            continue
        dest = course / "submitted" / student / lab / f"{lab}.ipynb"
        if dest.exists() and filecmp.cmp(nb, dest, shallow=False):
            print(f"{student} {lab}: unchanged")
            continue
        if kept := _keep(course, dest.parent, stamp):
            print(f"{student} {lab}: resubmitted; the previous submission is kept in {kept}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        handed_in = submission_time(nb)  # read before the copy: the student's time, not the collection's
        shutil.copy(nb, dest)  # the file's time is the collection's: newer than any earlier grading
        (dest.parent / "timestamp.txt").write_text(handed_in)
        changed.append((student, lab))
    return changed


def submission_time(nb: Path) -> str:
    """When the student handed `nb` in, in nbgrader's form ("2026-10-05 23:59:00.000000 UTC"): the
    `timestamp.txt` beside it (nbgrader's exchange writes one) if there is one, else the file's time."""
    import datetime
    stamp = nb.parent / "timestamp.txt"
    if stamp.is_file() and nb.parent.name == nb.stem:  # <student>/<lab>/: the folder is this lab's
        from nbgrader.utils import parse_utc
        try:
            when = parse_utc(stamp.read_text().strip())
        except (ValueError, TypeError, OverflowError):
            when = None
        if when is not None:
            return when.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    when = datetime.datetime.fromtimestamp(nb.stat().st_mtime, datetime.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


# ---- late work -------------------------------------------------------------------------------

TERM_CONFIG = "term.json"  # in the course folder: {"due": {lab: time}, "late_penalty_per_day", "late_penalty_max"}
LATE_DEFAULTS = {"late_penalty_per_day": 0.1, "late_penalty_max": 1.0}


def term_config(course: Path) -> dict:
    """The term's config (<course>/term.json): each lab's due date ("2026-10-05 23:59 UTC") and the
    late rule: per started day late, `late_penalty_per_day` of the raw score is taken off, at most
    `late_penalty_max` of it (defaults 10 % a day, up to all of it)."""
    path = course / TERM_CONFIG
    cfg = json.loads(path.read_text()) if path.is_file() else {}
    if not isinstance(cfg, dict) or not isinstance(cfg.get("due", {}), dict):
        raise ValueError(f"{path}: expected {{\"due\": {{lab: \"YYYY-MM-DD HH:MM UTC\"}}, ...}}")
    return {**LATE_DEFAULTS, "due": {}, **cfg}


def due_date(course: Path, lab: str):
    """The lab's due date (a naive UTC datetime, as nbgrader's gradebook keeps it), or None."""
    from nbgrader.utils import parse_utc
    when = term_config(course)["due"].get(lab)
    return parse_utc(when) if when else None


def late_penalty(raw_score: float, seconds_late: float, cfg: dict) -> float:
    """Points taken off a submission `seconds_late` after its due date (the term's rule)."""
    import math
    if not seconds_late or seconds_late <= 0:
        return 0.0
    days = math.ceil(seconds_late / 86400)
    return round(max(0.0, raw_score) * min(cfg["late_penalty_max"], cfg["late_penalty_per_day"] * days), 6)


def apply_late_rule(course: Path) -> None:
    """Every lab's due date from the term's config into the gradebook, and each submission's late
    penalty by the term's rule, on its score as it stands (hand grades included): export's first step."""
    from nbgrader.api import Gradebook
    cfg = term_config(course)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for a in gb.assignments:
            a.duedate = due_date(course, a.name)
        gb.db.commit()
        for a in gb.assignments:
            for sub in a.submissions:
                raw = sum(nb.score for nb in sub.notebooks)
                penalty = late_penalty(raw, sub.total_seconds_late, cfg)
                for i, nb in enumerate(sub.notebooks):
                    nb.late_submission_penalty = penalty if i == 0 else 0.0
        gb.db.commit()


def _pairs(course: Path, part: str, labs: list[str], students: list[str] | None):
    root = course / part
    if not root.is_dir():
        return []
    return [(s.name, lab) for s in sorted(root.iterdir()) if s.is_dir() and (students is None or s.name in students)
            for lab in labs if (s / lab / f"{lab}.ipynb").is_file()]


def term_autograde(course: Path, labs: list[str], students: list[str] | None = None, force: bool = False) -> dict:
    """Autograde each collected submission that is newer than its graded copy (all with `force`).
    The gradebook is copied under backup/ first; hand grades already given stay in it."""
    stamp, grades = _stamp(), {}
    _need_jail(course)
    todo = []
    for student, lab in _pairs(course, "submitted", labs, students):
        done = course / "autograded" / student / lab / f"{lab}.ipynb"
        sub = course / "submitted" / student / lab / f"{lab}.ipynb"
        if done.exists() and done.stat().st_mtime >= sub.stat().st_mtime and not force:
            print(f"{student} {lab}: already graded (--force grades it again)")
            continue
        todo.append((student, lab))
    if todo:
        _keep(course, course / "gradebook.db", stamp, move=False)
    for student, lab in todo:
        _keep(course, course / "autograded" / student / lab, stamp, move=False)
        grades.setdefault(student, {})[lab] = cells = grade_one(course, lab, student)
        _print_line(student, lab, cells)
    return grades


def feedback(course: Path, labs: list[str], students: list[str] | None = None) -> list[Path]:
    """nbgrader's generate_feedback for every graded submission; a previous one is kept first."""
    stamp, api, made = _stamp(), _api(course), []
    for student, lab in _pairs(course, "autograded", labs, students):
        _keep(course, course / "feedback" / student / lab, stamp)
        _check(api.generate_feedback(lab, student, force=True), f"generate_feedback {lab} of {student}")
        made.append(course / "feedback" / student / lab / f"{lab}.html")
        print(f"{student} {lab}: {made[-1]}")
    return made


def export(course: Path) -> tuple[Path, Path]:
    """grades.csv (nbgrader's, hand grades included: each lab's due date from the term's config,
    each submission's own timestamp, its late penalty by the term's rule, its score after it) and
    grades.json; a previous export that differs is kept under backup/."""
    from nbgrader.api import Gradebook
    stamp = _stamp()
    apply_late_rule(course)
    new_csv = export_csv(course, course / "grades.csv.new")
    grades: dict = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for a in gb.assignments:
            for sub in a.submissions:
                nb = sub.notebooks[0]
                grades.setdefault(sub.student.id, {})[a.name] = {
                    g.name: [g.score, g.max_score, bool(g.needs_manual_grade)] for g in nb.grades}
    new_json = course / "grades.json.new"
    new_json.write_text(json.dumps(grades, indent=1, sort_keys=True) + "\n")
    for new in (new_csv, new_json):
        final = new.with_suffix("")
        if final.exists() and not filecmp.cmp(new, final, shallow=False):
            print(f"previous {final.name} kept in {_keep(course, final, stamp)}")
        new.replace(final)
    return course / "grades.csv", course / "grades.json"


STUDENT_REPO_README = """\
# Stanza course: the students' repository

The workbench (`stanza_core`), the tutorials T1-T8 and the lectures, and the labs as released:
`tutorials/labs/<lab>/<lab>.ipynb`. Install it once, in a fresh environment, and start Jupyter
from it:

    pip install -e .            # the workbench, as the labs import it
    jupyter lab tutorials/      # the tutorials, the lectures, labs/<lab>/<lab>.ipynb

Fill in every cell marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`) or
`YOUR ANSWER HERE`, and run the test cell below each answer: it is a first check; more tests run
when the lab is graded, and the "why" answers are graded by hand. Do not change the test cells.
The coding labs run your ranks with `tutorials/gradekit.py` and the lab's rank program
(`tutorials/labs/ranks/<lab>.py`).

Hand in each notebook as `<your id>/<lab>/<lab>.ipynb`.

Labs: {labs}
"""
# What the students' repository holds of this one (beside the releases): the workbench, its
# install files, the tutorials and lectures, the rank runner. Never the kit (tutorials/labs/source)
# or the grader (course, autograde, grade_notebook, answers, sandbox, rank_grading, ...).
STUDENT_REPO_FILES = ("stanza_core", "pyproject.toml", "constraints.txt", "environment.yml", "LICENSE",
                      "tutorials/__init__.py", "tutorials/gradekit.py", "tutorials/lectures")
GRADER_ONLY = ("course.py", "autograde.py", "grade_notebook.py", "answers.py", "sandbox.py", "_jail_init.py",
               "rank_grading.py", "jail_library.py", "feedback_lines.py")


def student_repo(course: Path, to: Path) -> Path:
    """Write the repository students clone (a new folder `to`, made a git repository when git is at
    hand): the workbench and the tutorials (tutorials/t*), the release of every released lab under
    tutorials/labs/<lab>/, the coding labs' rank programs without any reference side or check, and
    a README. Refuses if any file holds a solution region, a hidden test or a grader's part."""
    import subprocess
    rel = course / "release"
    labs = lab_names(rel) if rel.is_dir() else []
    if not labs:
        raise ValueError(f"{course}: no lab released yet (run `release` first)")
    if to.exists():
        raise ValueError(f"--to {to}: exists; choose a new name")
    files: dict[str, bytes] = {}
    for name in STUDENT_REPO_FILES:
        src = REPO_ROOT / name
        for p in ([src] if src.is_file() else sorted(src.rglob("*")) if src.is_dir() else []):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
                files[str(p.relative_to(REPO_ROOT))] = p.read_bytes()
    for p in sorted(HERE.glob("t*_*")):  # the tutorials and their helper modules
        if p.is_file() and p.suffix in (".py", ".ipynb"):
            files[f"tutorials/{p.name}"] = p.read_bytes()
    for lab in labs:
        for p in sorted((rel / lab).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                files[f"tutorials/labs/{p.relative_to(rel)}"] = p.read_bytes()
    from tutorials import rank_grading
    for lab in labs:
        if (SOURCE / lab / "grader.py").is_file():
            grader = __import__(f"tutorials.labs.source.{lab}.grader", fromlist=["PARTS"])
            files[f"tutorials/labs/ranks/{lab}.py"] = (
                f'"""The rank program of {lab}, as students get it: no reference side, no checks (its one-process '
                'reference serves gradekit.one_process, for the visible cases)."""\n'
                + rank_grading.jail_source(lab, tuple(grader.PARTS), keep=("reference",))).encode()
    files["README.md"] = STUDENT_REPO_README.format(labs=", ".join(labs)).encode()
    for name, data in files.items():
        if name.startswith("tutorials/labs/source/") or Path(name).name in GRADER_ONLY and name.startswith("tutorials/"):
            raise RuntimeError(f"{name}: the kit or the grader, not for students")
        if leak := [w for w in LEAKS if w.encode() in data]:
            raise RuntimeError(f"{name} holds {leak[0]!r}: not written")
    for name, data in files.items():
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        (to / name).write_bytes(data)
    if shutil.which("git"):
        git = ["git", "-C", str(to), "-c", "user.name=stanza course", "-c", "user.email=course@localhost"]
        for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", f"The course's labs as released: {', '.join(labs)}"]):
            subprocess.run(git + cmd, check=True, capture_output=True)
    return to


STUDENT_README = """\
# Stanza course: the labs

One folder per lab, each with its notebook. Open a notebook in Jupyter, fill in every cell
marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`) or `YOUR ANSWER HERE`, and
run the test cell below each answer: it is a first check; more tests run when the lab is graded,
and the "why" answers are graded by hand. Do not change the test cells.

The notebooks import `stanza_core`: install the students' repository your lecturer gives you
(`git clone` it, then `pip install -e .` in it; the lecturer writes it with
`python -m tutorials.course student-repo`: the workbench, the tutorials T1-T8 the labs go with
and these labs, without any solution) and start Jupyter from that environment, in this folder.
The coding labs run your ranks with `tutorials/gradekit.py`, beside the lab folders.

Hand in each notebook as `<your id>/<lab>/<lab>.ipynb`.

Labs: {labs}
"""


def bundle(course: Path, to: Path) -> Path:
    """What students get: the release of every released lab and a README, as a zip or a folder.
    Never overwrites `to`; refuses if any file holds a solution region or a hidden test."""
    rel = course / "release"
    labs = [lab for lab in lab_names(rel)] if rel.is_dir() else []
    if not labs:
        raise ValueError(f"{course}: no lab released yet (run `release` first)")
    if to.exists():
        raise ValueError(f"--to {to}: exists; choose a new name")
    files = {f"stanza-labs/{p.relative_to(rel)}": p.read_bytes() for lab in labs
             for p in sorted((rel / lab).rglob("*")) if p.is_file() and "__pycache__" not in p.parts}
    files["stanza-labs/README.md"] = STUDENT_README.format(labs=", ".join(labs)).encode()
    coding = [lab for lab in labs if (SOURCE / lab / "grader.py").is_file()]
    if coding:  # the runner of the coding labs' ranks, and their rank programs without any reference
        from tutorials import rank_grading
        for name in ("__init__.py", "gradekit.py"):
            files[f"stanza-labs/tutorials/{name}"] = (HERE / name).read_bytes()
        for lab in coding:
            grader = __import__(f"tutorials.labs.source.{lab}.grader", fromlist=["PARTS"])
            files[f"stanza-labs/tutorials/labs/source/{lab}/grader.py"] = (
                '"""The rank program of this lab, as students get it: no reference side, no checks (its one-process '
                'reference serves gradekit.one_process, for the visible cases)."""\n'
                + rank_grading.jail_source(lab, tuple(grader.PARTS), keep=("reference",))).encode()
    for name, data in files.items():
        if leak := [w for w in LEAKS if w.encode() in data]:
            raise RuntimeError(f"{name} holds {leak[0]!r}: not bundled")
    if to.suffix == ".zip":
        with zipfile.ZipFile(to, "x", zipfile.ZIP_DEFLATED) as z:
            for name, data in files.items():
                z.writestr(name, data)
    else:
        for name, data in files.items():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            (to / name).write_bytes(data)
    return to


# ---- the command ---------------------------------------------------------------------------

COMMANDS = ("self-check", "release", "collect", "autograde", "feedback", "export", "bundle", "student-repo")


def _print_line(student: str, lab: str, cells: dict) -> None:
    got, of = sum(s for s, _, _ in cells.values()), sum(m for _, m, _ in cells.values())
    hand = sum(m for _, m, pending in cells.values() if pending)
    print(f"{student:<12} {lab:<8} {got:g} / {of:g}" + (f"  ({hand:g} to grade by hand)" if hand else ""))


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tutorials.course", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command")
    for name in COMMANDS:
        p = sub.add_parser(name)
        p.add_argument("--labs", default=None, help="comma-separated lab names (default: all)")
        if name == "self-check":
            p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="self-check folder (replaced)")
            p.add_argument("--submissions", type=Path, default=None,
                           help="folder of <student>/<lab>/<lab>.ipynb to grade once (default: the self-check)")
            continue
        p.add_argument("--course", type=Path, required=True, help="the term's course folder (kept)")
        if name == "collect":
            p.add_argument("--submissions", type=Path, required=True, help="folder of <student>/<lab>/<lab>.ipynb")
        if name in ("autograde", "feedback"):
            p.add_argument("--students", default=None, help="comma-separated student ids (default: all)")
        if name in ("release", "autograde"):
            p.add_argument("--force", action="store_true", help="regenerate / grade again (old copies kept)")
        if name == "bundle":
            p.add_argument("--to", type=Path, required=True, help="a new .zip file or folder")
        if name == "student-repo":
            p.add_argument("--to", type=Path, required=True, help="a new folder: the repository students clone")
    return ap


def _self_check(args, labs: list[str]) -> int:
    out = args.out.resolve()
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        print(f"error: --out {out}: not empty and not a self-check folder made by this command", file=sys.stderr)
        return 2
    if args.submissions is not None and not args.submissions.is_dir():
        print(f"error: --submissions {args.submissions}: not a folder", file=sys.stderr)
        return 2
    submissions = args.submissions.resolve() if args.submissions else None
    api = build_release(out, labs)
    print(f"release: {out / 'release'} ({', '.join(labs)})", flush=True)
    subs = submissions or self_check_submissions(out, labs)
    grades = autograde(api, out, subs, labs)
    export_csv(out)
    (out / "grades.json").write_text(json.dumps(grades, indent=1) + "\n")
    for student, per_lab in grades.items():
        for lab, cells in per_lab.items():
            _print_line(student, lab, cells)
    print(f"grades: {out / 'grades.json'}, {out / 'grades.csv'}")
    if submissions is None:
        if problems := self_check_problems(grades, {lab: manual_cells(lab) for lab in labs}):
            print("self-check failed: " + "; ".join(problems), file=sys.stderr)
            return 1
        print("self-check: reference solutions full marks on every autograded cell (the 'why' cells wait "
              "for a hand grade), unmodified release zero on every graded cell")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS + ("-h", "--help"):
        argv.insert(0, "self-check")
    args = _parser().parse_args(argv)
    from stanza_core.extras import MissingExtra, require

    try:  # the "course" extra: without it, one line naming the install
        require("nbgrader", "python -m tutorials.course")
    except MissingExtra as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    known = lab_names()
    labs = [n.strip() for n in args.labs.split(",")] if args.labs else known
    if unknown := [n for n in labs if n not in known]:
        print(f"error: --labs: unknown labs {unknown}; known: {known}", file=sys.stderr)
        return 2
    # nbgrader 0.9's gradebook trips SQLAlchemy 2's autoflush warnings on every submission: noise
    warnings.filterwarnings("ignore", message=".*not in session.*")
    # the kernels import this checkout's stanza_core (first on their path)
    # nbgrader runs the `alembic` command of its own environment: this interpreter's bin first
    os.environ["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    students = [s.strip() for s in args.students.split(",")] if getattr(args, "students", None) else None
    try:
        if args.command == "self-check":
            return _self_check(args, labs)
        course = open_course(args.course, create=args.command == "release")
        if args.command == "release":
            release(course, labs, args.force)
        elif args.command == "collect":
            if not args.submissions.is_dir():
                raise ValueError(f"--submissions {args.submissions}: not a folder")
            print(f"collected {len(collect(course, args.submissions.resolve(), labs))} new or changed submissions")
        elif args.command == "autograde":
            term_autograde(course, labs, students, args.force)
        elif args.command == "feedback":
            feedback(course, labs, students)
        elif args.command == "export":
            print("grades: " + ", ".join(str(p) for p in export(course)))
        elif args.command == "bundle":
            print(f"student bundle: {bundle(course, args.to.resolve())}")
        elif args.command == "student-repo":
            print(f"students' repository: {student_repo(course, args.to.resolve())}")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
