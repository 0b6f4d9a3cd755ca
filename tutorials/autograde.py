"""Autograde one submitted notebook without ever running the student's code in this process.

    session = Session(cells, screened)          # one submission's jailed process, started on first use
    reason = verdict(test_cell_source, namespace_with_proxies)   # None: passed
(tutorials.grade_notebook builds the cells and namespaces, writes autograded/ and the gradebook.)

The student's solution cells run jailed (tutorials.sandbox), after the lab's locked setup cells
taken from the instructor's notebook (a changed or deleted locked cell changes nothing), in a
process that answers calls with plain JSON values (tutorials.answers). The graded cells of the
frozen instructor's notebook (`<course>/source`, hidden tests and frozen values included) run
here, in a namespace built from the lab's setup cells where each of the student's functions is a
proxy: calling it sends the arguments to the jail and returns the decoded answer. A test cell's
points are the verdict of its asserts, computed here; nothing the student's process says about
itself counts. `__graded__(fn, forbid, *args)` calls the student's `fn` with every function of
`forbid` made to raise inside the jail while it runs.

The autograded notebook written for nbgrader (formgrader, feedback) is the release's (visible
tests only) with the student's answers in the solution cells and, under each graded cell, the
verdict as its only output: "passed", or an error with one line (the student's own exception,
or "a hidden test failed": never a hidden input or an expected value). The gradebook gets the
scores as nbgrader's own autograder would write them ("why" cells wait for a hand grade unless
left unchanged).

A submission that cannot be read, whose jail cannot start, crashes, hangs (CALL_S per call,
SUBMISSION_S in all) or answers garbage gets 0 on what it did not answer, with one line; the
next submission is graded as usual.
"""
from __future__ import annotations

import ast
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
import traceback
from pathlib import Path

from tutorials import answers, sandbox

CALL_S = 60.0  # one call of a student's function (the slowest reference answer takes ~10 s)
SUBMISSION_S = 300.0  # one notebook, every call and the setup together
REPO_ROOT = Path(__file__).resolve().parent.parent
EXPOSE = [REPO_ROOT / "stanza_core", REPO_ROOT / "tutorials" / "__init__.py", REPO_ROOT / "tutorials" / "answers.py",
          REPO_ROOT / "tutorials" / "gradekit.py"]
RANKS_S = 200.0  # one run of a coding lab's ranks in the jail (their own budget and start-up included)
# What an answer may not use: the ways around the jail's poisoned references and the grader's
# view of the process (reloading or re-executing a library, reading frames, code objects and files).
BLOCKED = {"exec", "eval", "compile", "__import__", "importlib", "reload", "runpy", "setprofile", "settrace",
           "ctypes", "gc", "inspect", "linecache", "__code__", "__globals__", "__builtins__", "__closure__",
           "open", "globals", "modules", "getframe", "_getframe", "subprocess", "system", "marshal", "pickle",
           "cloudpickle", "__wrapped__", "__reduce__", "f_back", "f_globals", "f_locals"}
HIDDEN = "### BEGIN HIDDEN TESTS"


class AnswerError(Exception):
    """A call the student's process did not answer with a value (one line)."""


class JailGone(AnswerError):
    """The student's process is gone or unusable: later calls need a new one."""


def screen(code: str) -> str | None:
    """None, or the one line saying which construct of BLOCKED a solution cell uses."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return f"SyntaxError: {e.msg} (line {e.lineno})"
    for node in ast.walk(tree):
        name = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                else node.name if isinstance(node, ast.alias) else None)
        if isinstance(node, ast.alias):
            name = next((p for p in node.name.split(".") if p in BLOCKED), node.asname)
        if name in BLOCKED:
            return f"uses {name}, which answers may not use (the grader refuses it)"
    return None


class Jail:
    """One student's jailed process: setup + solution cells, then calls."""

    def __init__(self, cells: list[tuple[str, str]], deadline: float):
        self.deadline, self.next_id = deadline, 0
        self.err = tempfile.TemporaryFile()
        code = f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); import tutorials.answers as a; a.main()"
        env = {"PATH": "/usr/bin:/bin", "HOME": "/home/student", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
               "MPLBACKEND": "Agg"}
        self.root = tempfile.mkdtemp(prefix="stanza-jail-")  # the jail's mount point, removed at close
        argv = sandbox.command([sandbox.sys.executable, "-I", "-c", code], REPO_ROOT, EXPOSE, env, root=self.root)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.setup_errors = self._ask({"cells": cells}, SUBMISSION_S)

    def _read(self):
        while True:
            line = self.proc.stdout.readline(answers.MAX_LINE + 2)
            self.lines.put(line)
            if not line:
                return

    def _ask(self, req: dict, limit: float):
        req["id"] = self.next_id = self.next_id + 1
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            raise JailGone(self._gone("before the call")) from None
        end = min(time.monotonic() + limit, self.deadline)
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                self.close()
                raise JailGone(f"timed out: no answer within {limit if end < self.deadline else SUBMISSION_S:g} s"
                               + (" (the notebook's time is spent)" if end >= self.deadline else "")) from None
            if not line:
                raise JailGone(self._gone("during the call"))
            try:
                reply = json.loads(line)
                if not isinstance(reply, dict) or reply.get("id") != req["id"]:
                    continue  # not the answer to this call: something else the process wrote
                if "error" in reply:
                    raise AnswerError(str(reply["error"])[:300])
                return answers.decode(reply["value"])
            except (ValueError, TypeError, KeyError, AttributeError):
                self.close()
                raise JailGone("the answer was not a plain JSON value (the process was ended)") from None

    def _gone(self, when: str) -> str:
        self.close()
        code = self.proc.returncode
        self.err.seek(0)
        jail = [ln for ln in self.err.read()[-2000:].decode(errors="replace").splitlines() if ln.startswith("jail:")]
        if jail:
            return jail[-1]
        return f"the notebook's process ended {when} (" + (f"killed by signal {-code}" if code and code < 0
                                                          else f"exit status {code}") + ")"

    def call(self, fn: str, args: tuple, kwargs: dict, forbid: list[str]):
        return self._ask({"fn": fn, "args": answers.encode(list(args), objects=True),
                          "kwargs": answers.encode(dict(kwargs), objects=True), "forbid": forbid}, CALL_S)

    def ranks(self, req: dict):
        return self._ask(req, RANKS_S)

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        try:
            os.rmdir(self.root)
        except OSError:
            pass


def dotted(f) -> str:
    f = getattr(f, "__func__", f)
    return f"{f.__module__}.{f.__qualname__}"


class Proxy:
    """A student's function, as the grader's test cells see it."""

    def __init__(self, session, name: str):
        self.session, self.name = session, name

    def __call__(self, *args, **kwargs):
        return self.session.call(self.name, args, kwargs, [])


class Session:
    """The calls of one submission: a jail, started again (once per cell) if the last one died."""

    def __init__(self, cells, screened: dict[str, str]):
        self.cells, self.screened = cells, screened
        self.deadline = time.monotonic() + SUBMISSION_S
        self.jail, self.dead = None, None

    def call(self, fn, args, kwargs, forbid):
        if fn in self.screened:
            raise AnswerError(f"{fn} {self.screened[fn]}")
        return self._use(lambda jail: jail.call(fn, args, kwargs, forbid))

    def ask_ranks(self, req: dict):
        for fn in req["functions"].values():
            if fn in self.screened:
                raise AnswerError(f"{fn} {self.screened[fn]}")
        return self._use(lambda jail: jail.ranks(req))

    def _use(self, ask):
        if self.dead:
            raise AnswerError(self.dead)
        if self.jail is None:
            try:
                self.jail = Jail(self.cells, self.deadline)
            except AnswerError as e:
                self.dead = str(e)
                raise
        try:
            return ask(self.jail)
        except JailGone as e:
            self.jail = None
            if time.monotonic() >= self.deadline:
                self.dead = str(e)
            raise

    def close(self):
        if self.jail:
            self.jail.close()


def _verdict(cell_source: str, ns: dict) -> str | None:
    """Run a graded cell here; None if it passed, else the one line a student may see."""
    import contextlib
    import io

    from tutorials.gradekit import RankFailure
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # what the test cells print is the student's to see
            exec(compile(cell_source, "<test>", "exec"), ns)
    except (AnswerError, RankFailure) as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - the test's assert (or a value the test could not use)
        line = next((f.lineno for f in reversed(traceback.extract_tb(e.__traceback__)) if f.filename == "<test>"), 0)
        hidden_from = next((i + 1 for i, ln in enumerate(cell_source.splitlines()) if ln.strip() == HIDDEN), 10**9)
        if line < hidden_from:
            shown = cell_source.splitlines()[line - 1].strip() if line else ""
            return f"the visible test failed: {shown[:160]}"
        return "a hidden test failed" + ("" if isinstance(e, AssertionError) else
                                         f" ({type(e).__name__}: the answer has the wrong type or shape)")
    return None
