"""What students install holds no solution, rubric answer, hidden test or grader of the labs: the
wheel and the sdist that pyproject.toml builds (from the repository's tracked files) are grepped
for every line of every solution region, hidden test and model answer of the instructor's kit
(tutorials/labs/source), and for the kit's files. (The student bundle, the release as students get
it, is grepped in test_labs.py, with the frozen values.)"""
import re
import subprocess
import sys
import tarfile
import zipfile

import nbformat
import pytest

from tutorials import course

MARKS = ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "__frozen__", "__graded__", "**Rubric.**",
         "**Model answer.**")


def _kit_lines() -> set[str]:
    """What the kit holds and students must not: every line (over 24 characters) of its hidden tests
    and model answers, and every code solution region whole (a single line of an answer may be a
    line of stanza_core's own code, which the labs ask students to write again)."""
    lines = set()
    for lab in course.lab_names():
        for c in nbformat.read(course.SOURCE / lab / f"{lab}.ipynb", as_version=4).cells:
            for region in re.findall(r"BEGIN HIDDEN TESTS\n(.*?)### END", c.source, flags=re.S):
                lines |= {ln.strip() for ln in region.splitlines() if len(ln.strip()) > 24}
            for region in re.findall(r"BEGIN SOLUTION\n(.*?)### END", c.source, flags=re.S):
                if c.cell_type == "markdown":
                    lines |= {ln.strip().lstrip("# ").strip() for ln in region.splitlines()
                              if len(ln.strip().lstrip("# ").strip()) > 24}
                else:
                    lines.add("\n".join(ln.strip() for ln in region.strip().splitlines()))
    return lines


def _found(lines: set[str], blob: bytes) -> list[str]:
    flat = b"\n".join(ln.strip() for ln in blob.splitlines())
    return [ln for ln in lines if ln.encode() in flat]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_wheel_and_sdist_hold_nothing_of_the_kit(tmp_path):
    files = subprocess.run(["git", "ls-files", "-z"], cwd=course.REPO_ROOT, capture_output=True, check=True).stdout
    src = tmp_path / "src"
    for name in filter(None, files.decode().split("\0")):
        if (course.REPO_ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes((course.REPO_ROOT / name).read_bytes())
    dist = tmp_path / "dist"
    for kind in ("wheel", "sdist"):  # each in a process of its own, as a build frontend does
        build = f"import sys; from setuptools import build_meta as b; b.build_{kind}(sys.argv[1])"
        subprocess.run([sys.executable, "-c", build, str(dist)], cwd=src, check=True, capture_output=True, timeout=240)
    wheel, sdist = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert len(wheel) == len(sdist) == 1
    members = {}
    with zipfile.ZipFile(wheel[0]) as z:
        members |= {f"wheel:{n}": z.read(n) for n in z.namelist()}
    with tarfile.open(sdist[0]) as t:
        members |= {f"sdist:{m.name}": t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
    assert any(n.endswith("stanza_core/__init__.py") for n in members)  # the build is the real package
    assert not [n for n in members if "tutorials/labs/" in n or n.endswith("grader.py")], "the kit is in the install"
    # the repository's own tests may travel with an sdist: they name the markers, never an answer
    blob = b"\n".join(data for n, data in members.items() if "/tests/" not in n)
    assert not [m for m in MARKS if m.encode() in blob]
    lines = _kit_lines()
    assert len(lines) > 100  # the grep has something to find
    leaked = _found(lines, blob)
    assert not leaked, leaked[:3]


def test_the_grep_finds_a_planted_solution_line():
    """The check above can fail: a kit line in an installed file is found."""
    region = next(ln for ln in sorted(_kit_lines()) if "\n" in ln)
    blob = b"print('x')\ndef f():\n" + "\n".join("    " + ln for ln in region.splitlines()).encode() + b"\n"
    assert _found(_kit_lines(), blob) == [region]
