"""The course's graded labs with nbgrader: build the student release, autograde submissions.

    python -m tutorials.course [--out DIR] [--submissions DIR] [--labs lab1,lab3]

The instructor's notebooks are `tutorials/labs/source/<lab>/<lab>.ipynb` (nbgrader's layout):
solution regions between `### BEGIN SOLUTION` / `### END SOLUTION`, hidden tests between
`### BEGIN HIDDEN TESTS` / `### END HIDDEN TESTS`, graded test cells with their points in the
cell metadata. The command

1. copies them into a fresh nbgrader course folder `<out>` (default reproductions/out/course)
   and runs `generate_assignment` on each: `<out>/release/<lab>/<lab>.ipynb` is what students
   get (no solution, no hidden test);
2. autogrades a folder of submissions laid out as nbgrader's `submitted/`:
   `<submissions>/<student>/<lab>/<lab>.ipynb`. Without --submissions it grades a self-check:
   student `reference` (the instructor's notebooks) must get full marks and student `release`
   (the unmodified release) zero on every graded cell; the exit status says whether they did;
3. writes `<out>/grades.json` ({student: {lab: {cell: [score, max]}}}) and nbgrader's own
   `<out>/grades.csv`, and prints one line per student and lab.

Exit status: 0 done (and, for the self-check, as expected), 1 a self-check or grading failure,
2 bad input. The folder `<out>` is replaced on each run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "labs" / "source"
REPO_ROOT = HERE.parent
DEFAULT_OUT = REPO_ROOT / "reproductions" / "out" / "course"
CELL_TIMEOUT_S = 300
MARKER = ".stanza-course"  # marks a folder this command made (and may replace)


def lab_names(source: Path = SOURCE) -> list[str]:
    return sorted(p.name for p in source.iterdir() if (p / f"{p.name}.ipynb").is_file())


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
    return NbGraderAPI(coursedir=CourseDirectory(config=c), config=c)


def _check(result: dict, what: str) -> None:
    if not result.get("success"):
        tail = [ln for ln in ((result.get("log") or "") + (result.get("error") or "")).strip().splitlines() if ln.strip()][-12:]
        raise RuntimeError(f"nbgrader {what} failed: " + " | ".join(tail))


def build_release(out: Path, labs: list[str] | None = None, source: Path = SOURCE):
    """Fresh course folder at `out` with the source notebooks; generate every lab's release."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("This nbgrader course folder is rewritten by `python -m tutorials.course`.\n")
    labs = labs or lab_names(source)
    for lab in labs:
        shutil.copytree(source / lab, out / "source" / lab, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
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


def autograde(api, out: Path, submissions: Path, labs: list[str]) -> dict:
    """Autograde every <student>/<lab>/ of `submissions`; {student: {lab: {cell: [score, max]}}}."""
    from nbgrader.api import Gradebook

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
            _check(api.autograde(lab, student, force=True, create=True), f"autograde {lab} of {student}")
            with Gradebook(api.coursedir.db_url) as gb:
                nb = gb.find_submission_notebook(lab, lab, student)
                grades.setdefault(student, {})[lab] = {g.name: [g.score, g.max_score] for g in nb.grades}
    return grades


def export_csv(out: Path) -> None:
    from nbgrader.plugins.export import CsvExportPlugin
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        CsvExportPlugin(to=str(out / "grades.csv")).export(gb)


def self_check_problems(grades: dict) -> list[str]:
    """What is wrong with a self-check's grades: not full marks for reference, not zero for release."""
    problems = []
    for lab, cells in grades.get("reference", {}).items():
        problems += [f"reference {lab} {c}: {s} of {m}" for c, (s, m) in cells.items() if s != m]
    for lab, cells in grades.get("release", {}).items():
        problems += [f"release {lab} {c}: {s} of {m} (expected 0)" for c, (s, m) in cells.items() if s != 0]
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tutorials.course", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="nbgrader course folder (replaced)")
    ap.add_argument("--submissions", type=Path, default=None,
                    help="folder of <student>/<lab>/<lab>.ipynb to grade (default: the self-check)")
    ap.add_argument("--labs", default=None, help="comma-separated lab names (default: all)")
    args = ap.parse_args(argv)
    known = lab_names()
    labs = [n.strip() for n in args.labs.split(",")] if args.labs else known
    if unknown := [n for n in labs if n not in known]:
        print(f"error: --labs: unknown labs {unknown}; known: {known}", file=sys.stderr)
        return 2
    if args.submissions is not None and not args.submissions.is_dir():
        print(f"error: --submissions {args.submissions}: not a folder", file=sys.stderr)
        return 2
    # nbgrader 0.9's gradebook trips SQLAlchemy 2's autoflush warnings on every submission: noise
    warnings.filterwarnings("ignore", message=".*not in session.*")
    out = args.out.resolve()
    if out.exists() and out != DEFAULT_OUT.resolve() and any(out.iterdir()) and not (out / MARKER).exists():
        print(f"error: --out {out}: not empty and not a course folder made by this command", file=sys.stderr)
        return 2
    submissions = args.submissions.resolve() if args.submissions else None
    # the kernels import this checkout's stanza_core (first on their path)
    # nbgrader runs the `alembic` command of its own environment: this interpreter's bin first
    os.environ["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    try:
        api = build_release(out, labs)
        print(f"release: {out / 'release'} ({', '.join(labs)})", flush=True)
        subs = submissions or self_check_submissions(out, labs)
        grades = autograde(api, out, subs, labs)
        export_csv(out)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    (out / "grades.json").write_text(json.dumps(grades, indent=1) + "\n")
    for student, per_lab in grades.items():
        for lab, cells in per_lab.items():
            got, of = sum(s for s, _ in cells.values()), sum(m for _, m in cells.values())
            print(f"{student:<12} {lab:<18} {got:g} / {of:g}")
    print(f"grades: {out / 'grades.json'}, {out / 'grades.csv'}")
    if submissions is None:
        if problems := self_check_problems(grades):
            print("self-check failed: " + "; ".join(problems), file=sys.stderr)
            return 1
        print("self-check: reference solutions full marks, unmodified release zero on every graded cell")
    return 0


if __name__ == "__main__":
    sys.exit(main())
