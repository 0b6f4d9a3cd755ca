"""The release metadata agree with each other: pyproject's version follows the CHANGELOG, the
citation names the latest release and its date, the license is an SPDX expression, and the
sdist carries the tests, the pins, the conda environment, the changelog and the citation."""
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _changelog() -> tuple[bool, Version, str]:
    """(whether [Unreleased] lists anything, the latest released version, its date)."""
    text = (ROOT / "CHANGELOG.md").read_text()
    unreleased = re.search(r"^## \[Unreleased\]\n(.*?)^## \[", text, re.M | re.S)
    released = re.search(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})", text, re.M)
    assert released, "CHANGELOG.md: no released version heading '## [X.Y.Z] - YYYY-MM-DD'"
    pending = bool(unreleased and re.search(r"^- ", unreleased.group(1), re.M))
    return pending, Version(released.group(1)), released.group(2)


def test_the_version_follows_the_changelog():
    pending, latest, _ = _changelog()
    version = Version(PROJECT["version"])
    if pending:  # changes after the latest release: a development version of the next one
        assert version.is_devrelease and version.release > latest.release, (version, latest)
    else:
        assert version == latest


def test_the_citation_names_the_latest_release_and_its_date():
    _, latest, date = _changelog()
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert Version(str(cff["version"])) == latest and str(cff["date-released"]) == date
    assert cff["license"] == PROJECT["license"] == "MIT"
    assert {k.lower() for k in PROJECT["keywords"]} >= {k.lower() for k in cff["keywords"]}


def test_packaging_metadata():
    assert PROJECT["license-files"] == ["LICENSE"] and (ROOT / "LICENSE").is_file()
    assert not any(c.startswith("License ::") for c in PROJECT["classifiers"])  # PEP 639: the SPDX field says it
    assert "Programming Language :: Python :: 3.11" in PROJECT["classifiers"]
    assert all(u.startswith("https://") for u in PROJECT["urls"].values())


def test_the_sdist_carries_tests_pins_and_citation(tmp_path):
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"], capture_output=True,
                           text=True)
    if files.returncode != 0:
        pytest.skip("not a git checkout: the sdist is built from a checkout's files")
    src = tmp_path / "src"
    for rel in files.stdout.splitlines():
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((ROOT / rel).read_bytes())
    done = subprocess.run([sys.executable, "-c", "from setuptools import build_meta as b; print(b.build_sdist('dist'))"],
                          cwd=src, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    with tarfile.open(src / "dist" / done.stdout.strip().splitlines()[-1]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for want in ("LICENSE", "CHANGELOG.md", "CITATION.cff", "constraints.txt", "environment.yml",
                 "tests/unit/test_release_metadata.py", "tests/conftest.py",
                 "stanza_core/reproduce/static/require.js", "stanza_core/reproduce/templates/slides.html.j2"):
        assert want in names, want


def test_the_devcontainer_reproduces_and_make_lab_opens_the_notebooks():
    import json

    dc = json.loads((ROOT / ".devcontainer" / "devcontainer.json").read_text())
    assert dc["postCreateCommand"] == "make reproduce" and "python:3.11" in dc["image"]
    # --no-print-directory: under `make test` the parent's MAKEFLAGS would add "Entering directory" lines
    lab = subprocess.run(["make", "--no-print-directory", "-n", "lab"], cwd=ROOT, capture_output=True, text=True)
    assert lab.returncode == 0 and lab.stdout.strip().splitlines()[-1] == ".venv/bin/python -m jupyterlab notebooks"
