"""pyproject.toml says what the code needs: every third-party import of stanza_core is a base
dependency (read from the source, imports inside functions included, mapped to distributions
by this venv), every base dependency is used, what the tests, benchmarks, scripts and tutorials
import is in the dev extra; the digits ship with the package; the console scripts and
`--version` work."""
import ast
import functools
import importlib
import importlib.metadata as md
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# Base dependencies that no module imports, and why they are needed all the same.
NOT_IMPORTED = {"ipykernel": "reproduce runs every notebook in `python -m ipykernel_launcher`",
                "jupyter-server-mathjax": "reproduce.offline copies its MathJax files (found, not imported)"}


@functools.lru_cache(maxsize=1)
def _providers() -> dict[str, list[str]]:
    """{top-level module: [distributions]} of this venv (seconds to build: built once)."""
    return md.packages_distributions()


def _names(requirements) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def _third_party_imports(folder: Path, local: set[str]):
    """(file, line, top-level module) of every absolute import under `folder` that is neither the
    standard library nor this repository's own code."""
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top not in sys.stdlib_module_names and top not in local and top != "__future__":
                    yield path.relative_to(ROOT), node.lineno, top


SYSTEM_MODULES = {"simgrid": "SimGrid's bindings: Debian's python3-simgrid, installed by scripts/install_simgrid.sh "
                             "(PyPI has a source distribution only); stanza_core/sim says in one line when it is missing"}


def _undeclared(folder: Path, declared: set[str], local: set[str]) -> list[str]:
    providers = _providers()
    bad = []
    for where, line, top in _third_party_imports(folder, local):
        if top in SYSTEM_MODULES:
            continue
        dists = {canonicalize_name(d) for d in providers.get(top, [])}
        if not dists & declared:
            bad.append(f"{where}:{line} imports {top} (distribution {', '.join(sorted(dists)) or 'not installed'})")
    return bad


def test_every_import_of_the_package_is_a_base_dependency():
    assert _undeclared(ROOT / "stanza_core", _names(PYPROJECT["dependencies"]), {"stanza_core"}) == []


def test_every_base_dependency_is_imported_or_says_why_not():
    providers = _providers()
    imported = {canonicalize_name(d) for _, _, top in _third_party_imports(ROOT / "stanza_core", {"stanza_core"})
                for d in providers.get(top, [])}
    unused = _names(PYPROJECT["dependencies"]) - imported - set(NOT_IMPORTED)
    assert unused == set(), f"base dependencies nothing imports: {sorted(unused)}"


FOLDERS = ["tests", "benchmarks", "lab", "scripts", "tutorials", "notebooks"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_what_the_repository_imports_is_in_base_or_dev(folder):
    # the repository's own modules, imported by basename (a test's helper, a benchmark reusing a test)
    local = {p.stem for f in FOLDERS for p in (ROOT / f).rglob("*.py")} | {"stanza_core", *FOLDERS} | {
        p.parent.name for f in FOLDERS for p in (ROOT / f).rglob("__init__.py")}  # packages (a plug-in strategy)
    declared = _names(PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["dev"])
    assert _undeclared(ROOT / folder, declared, local) == []


def test_dev_holds_every_other_extra():
    """`make install` installs .[dev]: with it every extra's packages, at the same ranges."""
    extras = PYPROJECT["optional-dependencies"]
    dev = {Requirement(r).name: Requirement(r).specifier for r in extras["dev"]}
    for extra in set(extras) - {"dev"}:
        for r in map(Requirement, extras[extra]):
            assert dev.get(r.name) == r.specifier, f"{extra}: {r} is not in dev as it is"


def test_requires_python_311():
    spec = SpecifierSet(PYPROJECT["requires-python"])
    assert "3.11" in spec and "3.10" not in spec  # the tests read pyproject.toml with tomllib


def test_the_shipped_digits_are_scikit_learns():
    """The oracle: stanza_core/digits.npz holds load_digits' images and labels in its order."""
    datasets = pytest.importorskip("sklearn.datasets")
    d = datasets.load_digits()
    with np.load(ROOT / "stanza_core" / "digits.npz", allow_pickle=False) as f:
        images, labels = f["images"], f["labels"]
    assert images.shape == (1797, 8, 8) and np.array_equal(images, d.images)
    assert np.array_equal(labels, d.target)


def test_digits_load_without_scikit_learn(monkeypatch):
    from stanza_core.data import open_dataset

    monkeypatch.setitem(sys.modules, "sklearn", None)  # any import of it now fails
    ds = open_dataset("digits", 16, 10, seed=0)
    x, y = ds.get([0, 1, 1796])
    assert (ds.size, ds.num_classes, tuple(x.shape)) == (1797, 10, (3, 3, 16, 16))
    assert y.tolist() == [0, 1, 8]  # load_digits().target[[0, 1, -1]]


def test_console_scripts_resolve_to_callables():
    scripts = PYPROJECT["scripts"]
    assert set(scripts) == {"stanza-train", "stanza-perf", "stanza-reproduce"}
    for name, target in scripts.items():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), name


@pytest.mark.parametrize("module", ["stanza_core.train", "stanza_core.perf.__main__", "stanza_core.reproduce.__main__"])
def test_version_prints_the_package_version_and_exits_0(module, capsys):
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as e:  # argparse's version action exits; reproduce returns
        raise SystemExit(main(["--version"]))
    assert e.value.code in (0, None)
    assert capsys.readouterr().out == f"stanza-core {md.version('stanza-core')}\n"
    assert md.version("stanza-core") == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
