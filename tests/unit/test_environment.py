"""environment.yml (conda users) is generated from constraints.txt (the versions CI tests), and
constraints.txt pins every dependency pyproject.toml names, inside its range."""
import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("environment_yml", REPO_ROOT / "scripts" / "environment_yml.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pins() -> dict[str, str]:
    lines = [ln.split("#", 1)[0].strip() for ln in (REPO_ROOT / "constraints.txt").read_text().splitlines()]
    return {canonicalize_name(name): version for name, version in (ln.split("==") for ln in lines if ln)}


def test_environment_yml_is_what_constraints_txt_generates(gen):
    assert gen.main(["--check"]) == 0, "run: python scripts/environment_yml.py"


def test_it_installs_every_pin_and_the_package(gen):
    env = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"] and env["dependencies"][:2] == ["python=3.11", "pip"]
    pip = env["dependencies"][2]["pip"]
    assert pip[-1] == "-e .[dev]"
    got = {canonicalize_name(Requirement(r).name): str(Requirement(r).specifier) for r in pip[:-1]}
    assert got == {n: f"=={v}" for n, v in _pins().items()}


def test_a_changed_pin_is_caught(gen):
    original = (REPO_ROOT / "constraints.txt").read_text()
    name, version = next(iter(_pins().items()))
    changed = re.sub(rf"(?im)^({re.escape(name)})=={re.escape(version)}$", rf"\1=={version}.1", original, count=1)
    assert changed != original and gen.render(changed) != (REPO_ROOT / "environment.yml").read_text()


def test_constraints_pin_every_dependency_inside_its_range():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    pins = _pins()
    wanted = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    for r in map(Requirement, wanted):
        name = canonicalize_name(r.name)
        assert name in pins, f"{r.name} is not pinned in constraints.txt"
        assert r.specifier.contains(pins[name], prereleases=True), f"{r.name}=={pins[name]} is outside {r.specifier}"


def test_python_version_is_allowed_by_pyproject():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    from packaging.specifiers import SpecifierSet

    assert "3.11" in SpecifierSet(project["requires-python"])
