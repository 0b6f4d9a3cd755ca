"""The workbench a grading jail gets: a copy of `stanza_core` without the references an exercise is
graded against, built at grading time (the package itself is never changed).

    path = jail_library.build(("stanza_core.perf.traffic.expected_bytes", ...))   # a folder named stanza_core
    argv = sandbox.command(..., expose=[(path, REPO_ROOT / "stanza_core"), ...])  # shown where the package is

In the copy, the body of each named function (a method: `module.Class.method`; a class: every
method of it, and an `__init__` that raises) is replaced by `raise PermissionError(...)`, in the
source file itself, and the copy is compiled. The student's process imports only that copy: no
code object, attribute, `vars`, `importlib` or file trick can bring the reference back, since it
is nowhere in the jail (in memory or on disk). Everything else of the package is unchanged, so
an answer may still use what the exercise allows (a library function that calls a forbidden
one internally fails too: a lab forbids only what its answers need not call).

Builds are cached per set of names for the life of the grading process, under one temporary
folder removed at exit.
"""
from __future__ import annotations

import ast
import atexit
import compileall
import functools
import importlib
import importlib.util
import py_compile
import shutil
import tempfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "stanza_core"
MESSAGE = " is a reference this answer is graded against"


@functools.cache
def _root() -> Path:
    path = Path(tempfile.mkdtemp(prefix="stanza-jail-library-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def locate(dotted: str) -> tuple[Path, list[str]]:
    """(the package file that defines `dotted`, its qualified name's parts inside that file)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            mod = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        file = Path(mod.__file__).resolve()
        if not file.is_relative_to(PACKAGE):
            raise ValueError(f"{dotted}: not defined in stanza_core")
        return file.relative_to(PACKAGE), parts[i:]
    raise ValueError(f"{dotted}: no such module")


def _find(body: list, names: list[str]):
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == names[0]:
            return node if len(names) == 1 else _find(node.body, names[1:])
    return None


def _spans(node, dotted: str) -> list[tuple[int, int, int, str]]:
    """(first line, last line, indent, replacement) of each body to replace (1-based, inclusive)."""
    raise_line = f"raise PermissionError({dotted!r} + {MESSAGE!r})"
    if isinstance(node, ast.ClassDef):
        out = []
        for m in node.body:  # its methods (and nested classes'), each body whole
            if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out += _spans(m, dotted)
        if not any(isinstance(m, ast.FunctionDef) and m.name == "__init__" for m in node.body):
            last = node.body[-1]
            out.append((last.end_lineno + 1, last.end_lineno, node.body[0].col_offset,
                        f"def __init__(self, *args, **kwargs):\n    {raise_line}"))
        return out
    first = node.body[0]
    if first.lineno == node.lineno:
        raise ValueError(f"{dotted}: a one-line definition (its body on the def's line) cannot be stripped")
    return [(first.lineno, node.body[-1].end_lineno, first.col_offset, raise_line)]


def _strip(text: str, targets: list[tuple[list[str], str]]) -> str:
    tree = ast.parse(text)
    spans = []
    for names, dotted in targets:
        node = _find(tree.body, names)
        if node is None:
            raise ValueError(f"{dotted}: no definition found to strip")
        spans += _spans(node, dotted)
    lines = text.splitlines(keepends=True)
    for first, last, indent, new in sorted(set(spans), reverse=True):  # bottom up: earlier lines stay put
        block = "".join(" " * indent + ln + "\n" for ln in new.split("\n"))
        lines[first - 1:last] = [block]
    return "".join(lines)


@functools.cache
def build(forbid: tuple[str, ...]) -> Path:
    """A compiled copy of stanza_core with every function of `forbid` (dotted names) raising."""
    compileall.compile_dir(str(PACKAGE), quiet=2)  # (up to date: a look at each file's time)
    dest = _root() / f"b{len(list(_root().iterdir()))}" / "stanza_core"
    shutil.copytree(PACKAGE, dest)  # times kept: the compiled files of unchanged sources stay valid
    per_file: dict[Path, list] = {}
    for dotted in sorted(set(forbid)):
        file, names = locate(dotted)
        if not names:
            raise ValueError(f"{dotted}: a module, not a function")
        per_file.setdefault(file, []).append((names, dotted))
    for file, targets in per_file.items():
        path = dest / file
        path.write_text(_strip(path.read_text(), targets))
        # compiled here, as if at the package's own path (tracebacks name the package's files)
        py_compile.compile(str(path), cfile=importlib.util.cache_from_source(str(path)), dfile=str(PACKAGE / file),
                           doraise=True)
    return dest
