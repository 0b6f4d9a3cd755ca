"""Students are sent to the student release that `make course` builds,
reproductions/out/course/release/labN/labN.ipynb, and never to tutorials/labs/source, which holds
the solutions and the hidden tests: not from a tutorial (its .py, its .ipynb, the scripts beside
it), not from the lecture notebooks in notebooks/, not from the parts of docs/ a student reads
(docs/course.md up to its section for instructors on grading)."""
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = REPO_ROOT / "tutorials"
SOURCE = re.compile(r"labs[/\\]+source")
INSTRUCTORS = "## Graded labs: nbgrader"  # docs/course.md: from here on, the instructors' part

STUDENT_FILES = sorted([*TUTORIALS.glob("t[0-9]_*.py"), *TUTORIALS.glob("t[0-9]_*.ipynb"),
                        *(REPO_ROOT / "notebooks").glob("*.py"), *(REPO_ROOT / "notebooks").glob("*.ipynb")])
PAIRED = sorted(TUTORIALS.glob("t[0-9]_*.ipynb"))


def test_the_student_files_are_found():
    assert len(PAIRED) == 8 and len(STUDENT_FILES) > 2 * len(PAIRED)


@pytest.mark.parametrize("path", STUDENT_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_student_file_names_the_lab_sources(path):
    hit = SOURCE.search(path.read_text())
    assert hit is None, path.read_text()[max(0, hit.start() - 200):hit.end() + 100]


@pytest.mark.parametrize("path", PAIRED, ids=lambda p: p.stem)
def test_each_tutorial_sends_students_to_its_lab_in_the_release(path):
    lab = f"lab{path.stem[1]}"
    exercises = path.with_suffix(".py").read_text().split("## Exercises", 1)
    assert len(exercises) == 2, "no exercises section"
    assert f"reproductions/out/course/release/{lab}/{lab}.ipynb" in exercises[1]
    assert "make course" in exercises[1]


def test_the_student_part_of_the_course_doc_names_the_release_only():
    text = (REPO_ROOT / "docs" / "course.md").read_text()
    assert INSTRUCTORS in text
    student_part = text.split(INSTRUCTORS, 1)[0]
    assert SOURCE.search(student_part) is None
    assert "reproductions/out/course/release/labN/labN.ipynb" in student_part
    for other in (REPO_ROOT / "docs").glob("*.md"):
        if other.name != "course.md":
            assert SOURCE.search(other.read_text()) is None, other.name
