"""Every module `pip install .` ships imports in a venv that holds the base install and nothing else.

test_packaging.py reads the imports; this test runs them. Installing torch into a fresh venv takes
minutes, so the venv is built from what this dev venv already has (its versions are constraints.txt's
pins), as pip would resolve it:

1. the closure: pyproject.toml's [project].dependencies, then each distribution's Requires-Dist
   (importlib.metadata), markers evaluated for this interpreter, a requirement behind an extra
   followed only where that extra was asked for (`jsonschema[format-nongpl]`);
2. a real venv (`python -m venv --without-pip`, this interpreter, no system site-packages) whose
   site-packages holds symlinks to exactly those distributions' files (their RECORD, .dist-info
   included): a directory that only one distribution owns is linked whole, a directory that
   distributions share (a namespace package, the top-level __pycache__) is made and filled file by
   file, so nothing of another distribution comes along; files pip puts beside site-packages
   (share/jupyter) are linked too, the console scripts in bin/ are not (their shebang is this venv's);
3. stanza_core as `pip install .` ships it: the packages [tool.setuptools.packages.find] finds
   (setuptools' finder's rule, restated), linked into site-packages with a .dist-info written from pyproject.toml;
   the repository's other folders (tutorials, benchmarks, scripts, tests) are not there;
4. one `python -I -B` subprocess in that venv imports every shipped module, `__main__` modules
   included (their `if __name__ == "__main__"` keeps them from running; an unguarded one that exits
   or raises is reported), and writes what each import raised.

The child needs only the standard library, so the venv needs nothing beyond the closure. The same run
imports a planted package (one module imports pytest, a dev-only package), which must be reported:
the test can fail. Imports inside functions are test_packaging.py's (static) business.
"""
import fnmatch
import importlib.metadata as md
import importlib.util
import json
import os
import pkgutil
import subprocess
import sys
import sysconfig
import textwrap
import time
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
SITE = Path(sysconfig.get_paths()["purelib"])  # the dev venv's site-packages
PREFIX = Path(sys.prefix)
SELF = canonicalize_name(PROJECT["name"])
PLANTED = "stanza_planted"  # the package the test plants next to stanza_core

# The child: standard library only. argv[1] is JSON {path, modules, absent, out}.
CHILD = textwrap.dedent(r"""
    import importlib, importlib.metadata, importlib.util, json, sys, traceback

    args = json.loads(sys.argv[1])
    sys.path[:0] = args["path"]
    report = {"prefix": sys.prefix, "base_prefix": sys.base_prefix, "sys_path": sys.path,
              "dists": sorted(d.metadata["Name"] for d in importlib.metadata.distributions()),
              "found": [name for name in args["absent"] if importlib.util.find_spec(name) is not None],
              "results": {}}
    sys.argv = ["import-every-module"]  # a module that parses arguments at import sees none
    for module in args["modules"]:
        try:
            if importlib.util.find_spec(module) is None:
                result = ["error", "", "find_spec found no module"]
            else:
                importlib.import_module(module)
                result = ["ok", "", ""]
        except ModuleNotFoundError as e:
            result = ["missing", e.name or "", str(e)]
        except BaseException as e:  # SystemExit included: a module that runs at import
            result = ["error", "", "".join(traceback.format_exception_only(e)).strip()]
        report["results"][module] = result
    with open(args["out"], "w") as f:
        json.dump(report, f)
""")


def _installed() -> dict[str, md.Distribution]:
    """{canonical name: distribution} of the dev venv's site-packages (not the editable stanza-core)."""
    dists = {canonicalize_name(d.metadata["Name"]): d for d in md.distributions(path=[str(SITE)])}
    dists.pop(SELF, None)
    return dists


def base_closure(installed: dict[str, md.Distribution]) -> tuple[dict[str, md.Distribution], list[str]]:
    """The distributions `pip install .` installs (no extras), and the problems met on the way
    (a requirement not installed here, or installed at a version outside its range)."""
    env = default_environment()
    closure, problems, done = {}, [], set()
    todo = [(Requirement(r), "pyproject.toml", "") for r in PROJECT["dependencies"]]
    while todo:
        req, by, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
            continue  # another platform or Python, or an extra nobody asked for
        name = canonicalize_name(req.name)
        dist = installed.get(name)
        if dist is None:
            problems.append(f"{req} (required by {by}) is not installed in {PREFIX}")
            continue
        if not req.specifier.contains(dist.version, prereleases=True):
            problems.append(f"{req} (required by {by}): {PREFIX} has {dist.version}")
        closure[name] = dist
        for wanted in {"", *map(canonicalize_name, req.extras)}:
            if (name, wanted) not in done:
                done.add((name, wanted))
                todo += [(Requirement(r), f"{name}[{wanted}]" if wanted else name, wanted) for r in dist.requires or []]
    return closure, problems


def find_packages(where: str, include=("*",), exclude=()) -> list[str]:
    """setuptools.find_packages (PackageFinder): folders with an __init__.py, below packages only,
    whose dotted name matches an include pattern and no exclude pattern (fnmatch)."""
    found, todo = [], [(Path(where) / d.name, d.name) for d in os.scandir(where) if d.is_dir()]
    while todo:
        folder, package = todo.pop()
        if "." in folder.name or not (folder / "__init__.py").is_file():
            continue  # not a package: nothing below it ships either
        if any(fnmatch.fnmatchcase(package, p) for p in include) and not any(fnmatch.fnmatchcase(package, p) for p in exclude):
            found.append(package)
        todo += [(folder / d.name, f"{package}.{d.name}") for d in os.scandir(folder) if d.is_dir()]
    return sorted(found)


def _shipped_modules(where: Path, include, exclude=()) -> list[str]:
    """Every module of the packages setuptools' finder ships from `where`, `__main__` included."""
    modules = []
    for package in sorted(find_packages(where=str(where), include=include, exclude=exclude)):
        modules.append(package)
        folder = where / package.replace(".", "/")
        modules += [f"{package}.{m.name}" for m in pkgutil.iter_modules([str(folder)]) if not m.ispkg]
    return modules


def _relparts(f) -> tuple[str, ...]:
    """A RECORD path (site-packages-relative, `..` for bin/ and share/) as parts relative to the prefix."""
    return Path(os.path.normpath(SITE / f)).relative_to(PREFIX).parts


def _link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists() and not dst.is_symlink():
        dst.symlink_to(src, target_is_directory=src.is_dir())


def build_base_venv(target: Path, closure: dict[str, md.Distribution], installed: dict[str, md.Distribution]) -> Path:
    """A venv at `target` whose site-packages holds the closure and stanza_core; its python."""
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(target)], check=True)
    python = target / "bin" / "python"
    site = Path(subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    site_rel = SITE.relative_to(PREFIX).parts
    # who owns each directory (prefix-relative): every distribution of the dev venv with a file below it
    owners: dict[tuple[str, ...], set[str]] = {}
    files: dict[str, list[tuple[str, ...]]] = {}
    for name, dist in installed.items():
        if dist.files is None:
            raise AssertionError(f"{name} has no RECORD: cannot tell its files")
        parts_list = files[name] = [_relparts(f) for f in dist.files]
        for parts in parts_list:
            for i in range(len(site_rel) + 1, len(parts)):
                owners.setdefault(parts[:i], set()).add(name)
    for name in closure:
        for parts in files[name]:
            if parts[0] == "bin":
                continue  # console scripts: their shebang runs the dev venv's python
            if parts[:len(site_rel)] != site_rel:  # beside site-packages: share/jupyter/...
                _link(PREFIX.joinpath(*parts), target.joinpath(*parts))
                continue
            for i in range(len(site_rel) + 1, len(parts)):
                if owners[parts[:i]] == {name}:  # a directory only this distribution has: whole
                    _link(PREFIX.joinpath(*parts[:i]), site.joinpath(*parts[len(site_rel):i]))
                    break
            else:  # a file in a shared directory: the file, and its bytecode if compiled after install
                src, dst = PREFIX.joinpath(*parts), site.joinpath(*parts[len(site_rel):])
                _link(src, dst)
                if src.suffix == ".py":
                    pyc = Path(importlib.util.cache_from_source(str(src)))
                    if pyc.exists():
                        _link(pyc, dst.parent / "__pycache__" / pyc.name)
    # stanza_core as a wheel of this checkout would lay it out, and its metadata
    finder = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    for top in {p.split(".")[0] for p in find_packages(where=str(ROOT), include=finder.get("include", ["*"]),
                                                       exclude=finder.get("exclude", ()))}:
        _link(ROOT / top, site / top)
    info = site / f"{PROJECT['name'].replace('-', '_')}-{PROJECT['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\n" f"Name: {PROJECT['name']}\nVersion: {PROJECT['version']}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in PROJECT["dependencies"]))
    (info / "entry_points.txt").write_text("[console_scripts]\n" + "".join(
        f"{k} = {v}\n" for k, v in PROJECT.get("scripts", {}).items()))
    return python


def _plant(folder: Path) -> list[str]:
    """A package whose modules' imports have known outcomes (test_a_planted_...): its modules."""
    sources = {
        "__init__": "",
        "undeclared": "import pytest  # dev extra only: not in the closure\n",
        "undeclared_from": "from sklearn.datasets import load_digits  # dev extra only\n",
        "declared": "import numpy, torch, yaml  # base dependencies\n",
        "broken": "raise RuntimeError('fails at import')\n",
        "__main__": "if __name__ == '__main__':\n    raise SystemExit('ran at import')\n",
    }
    (folder / PLANTED).mkdir(parents=True)
    for stem, text in sources.items():
        (folder / PLANTED / f"{stem}.py").write_text(text)
    return _shipped_modules(folder, [f"{PLANTED}*"])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Build the venv, import every shipped module and the planted ones in it: the child's report."""
    started = time.perf_counter()
    installed = _installed()
    closure, problems = base_closure(installed)
    assert problems == [], "the dev venv cannot stand for `pip install .`:\n" + "\n".join(problems)
    tmp = tmp_path_factory.mktemp("base_venv")
    python = build_base_venv(tmp / "venv", closure, installed)
    built = time.perf_counter() - started
    planted = _plant(tmp / "planted")
    finder = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    shipped = _shipped_modules(ROOT, finder.get("include", ["*"]), finder.get("exclude", ()))
    # every top-level module of the dev venv that no closure distribution provides must be absent
    provided = md.packages_distributions()
    absent = sorted(top for top, dists in provided.items()
                    if not {canonicalize_name(d) for d in dists} & (set(closure) | {SELF})
                    and top.isidentifier() and not top.startswith("_"))
    args = {"path": [str(tmp / "planted")], "modules": shipped + planted, "absent": absent,
            "out": str(tmp / "report.json")}
    proc = subprocess.run([str(python), "-I", "-B", "-c", CHILD, json.dumps(args)], cwd=tmp, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((tmp / "report.json").read_text())
    report.update(closure=closure, shipped=shipped, planted=planted, absent=absent, venv=tmp / "venv",
                  provided=provided, seconds=(built, time.perf_counter() - started - built))
    print(f"\nbase venv: {len(closure)} distributions, linked in {built:.1f} s; "
          f"{len(shipped)} modules imported in {report['seconds'][1]:.1f} s")
    return report


def _failures(run, modules) -> list[str]:
    """One line per module whose import failed: the missing name and who provides it, or the error."""
    closure, bad = set(run["closure"]), []
    for module in modules:
        kind, name, message = run["results"][module]
        if kind == "missing":
            dists = sorted(canonicalize_name(d) for d in run["provided"].get(name.split(".")[0], []))
            where = (f"distribution {', '.join(dists)}, not a base dependency" if dists and not set(dists) & closure
                     else f"distribution {', '.join(dists) or 'not installed'}")
            bad.append(f"{module}: imports {name} ({where})")
        elif kind != "ok":
            bad.append(f"{module}: {message}")
    return bad


def test_closure_is_pyprojects_dependencies_and_what_they_require():
    closure, problems = base_closure(_installed())
    assert problems == []
    assert {canonicalize_name(Requirement(r).name) for r in PROJECT["dependencies"]} <= set(closure)
    for dev_only in ("pytest", "selenium", "scikit-learn", "jupyterlab", "nbgrader", "jupytext", "scipy"):
        assert dev_only not in closure, f"{dev_only} is only in the dev extra, yet the base install pulls it in"


def test_the_venv_holds_the_closure_and_nothing_else(run):
    assert Path(run["prefix"]) == run["venv"] and run["base_prefix"] != run["prefix"]
    leaks = [p for p in run["sys_path"] if str(PREFIX) in p or p.rstrip("/") == str(ROOT)
             or ("site-packages" in p and not p.startswith(str(run["venv"])))]
    assert leaks == [], f"the child's sys.path reaches outside its venv: {leaks}"
    assert {canonicalize_name(d) for d in run["dists"]} == set(run["closure"]) | {SELF}
    assert "pytest" in run["absent"] and run["found"] == [], f"importable though not in the closure: {run['found']}"


def test_every_shipped_module_imports_with_the_base_dependencies(run):
    assert "stanza_core.__main__" in run["shipped"] and not any(
        m.startswith(("tests", "tutorials", "benchmarks", "lab", "scripts", "notebooks")) for m in run["shipped"])
    bad = _failures(run, run["shipped"])
    assert bad == [], "in a venv with pyproject.toml's base dependencies only:\n" + "\n".join(bad)


def test_a_planted_undeclared_import_is_reported(run):
    """The same run imported a planted package: its undeclared imports fail the check above."""
    assert _failures(run, run["planted"]) == [
        f"{PLANTED}.broken: RuntimeError: fails at import",
        f"{PLANTED}.undeclared: imports pytest (distribution pytest, not a base dependency)",
        f"{PLANTED}.undeclared_from: imports sklearn (distribution scikit-learn, not a base dependency)",
    ]
