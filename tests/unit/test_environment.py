"""environment.yml (conda users) lists the same dependencies, with the same ranges, as
pyproject.toml (pip users), and installs this package."""
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

REPO_ROOT = Path(__file__).resolve().parents[2]

# PyPI name -> conda-forge name, where they differ.
CONDA_NAME = {"torch": "pytorch", "kaleido": "python-kaleido"}


@pytest.fixture(scope="module")
def env():
    return yaml.safe_load((REPO_ROOT / "environment.yml").read_text())


@pytest.fixture(scope="module")
def pyproject():
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def _conda_deps(env) -> dict[str, SpecifierSet]:
    deps = {}
    for d in env["dependencies"]:
        if not isinstance(d, str):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(.*)", d.strip())
        name, spec = m.group(1), m.group(2).replace(" ", "")
        if spec.startswith("="):  # conda's "=3.11" pins a version prefix
            spec = f"=={spec.lstrip('=')}.*"
        deps[canonicalize_name(name)] = SpecifierSet(spec)
    return deps


def test_conda_forge_python_311_and_pip_installs_the_package(env):
    assert env["channels"] == ["conda-forge"]
    deps = _conda_deps(env)
    assert deps["python"] == SpecifierSet("==3.11.*")
    assert "pip" in deps
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    assert len(pip_sections) == 1
    assert any(line.strip() in ("-e .", ".") for line in pip_sections[0])


def test_same_dependencies_and_ranges_as_pyproject(env, pyproject):
    project = pyproject["project"]
    wanted = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]
    expected = {canonicalize_name(CONDA_NAME.get(r.name, r.name)): r.specifier for r in wanted}
    got = {n: s for n, s in _conda_deps(env).items() if n not in ("python", "pip")}
    assert set(got) == set(expected), f"only in environment.yml: {set(got) - set(expected)}; " \
                                      f"only in pyproject.toml: {set(expected) - set(got)}"
    for name, spec in expected.items():
        assert got[name] == spec, name


def test_python_version_is_allowed_by_pyproject(pyproject):
    assert "3.11" in SpecifierSet(pyproject["project"]["requires-python"])
