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

from tutorials import answers, feedback_lines, sandbox

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

    def __init__(self, cells: list[tuple[str, str]], deadline: float, forbid: tuple[str, ...] = ()):
        self.deadline, self.next_id, self.forbid = deadline, 0, forbid
        self.cell_lines = {name: code.count("\n") + 1 for name, code in cells}  # what feedback may name
        self.err = tempfile.TemporaryFile()
        code = f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); import tutorials.answers as a; a.main()"
        env = {"PATH": "/usr/bin:/bin", "HOME": "/home/student", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
               "MPLBACKEND": "Agg"}
        self.root = tempfile.mkdtemp(prefix="stanza-jail-")  # the jail's mount point, removed at close
        expose = EXPOSE
        if forbid:  # the workbench without the references these calls are graded against, where the package is
            from tutorials import jail_library
            expose = [(jail_library.build(forbid), REPO_ROOT / "stanza_core")] + EXPOSE[1:]
        argv = sandbox.command([sandbox.sys.executable, "-I", "-c", code], REPO_ROOT, expose, env, root=self.root)
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

    def _ask(self, req: dict, limit: float, forbid=()):
        req["id"] = self.next_id = self.next_id + 1
        try:
            self._write((json.dumps(req) + "\n").encode())
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
                if "error" in reply:  # the student's process's words: only what the grader can check
                    raise AnswerError(feedback_lines.exception(str(reply["error"]), self.cell_lines,
                                                               set(forbid) | set(self.forbid)))
                return answers.decode(reply["value"])
            except (ValueError, TypeError, KeyError, AttributeError):
                self.close()
                raise JailGone("the answer was not a plain JSON value (the process was ended)") from None

    def _write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

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
                          "kwargs": answers.encode(dict(kwargs), objects=True), "forbid": forbid}, CALL_S, forbid)

    def ranks(self, req: dict):
        return self._ask(req, RANKS_S)

    def close(self):
        _end_jail(self.proc, self.root)


def _end_jail(proc, root) -> None:
    """Kill a jail's whole process group and remove its (emptied) root folder."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    try:
        os.rmdir(root)
    except OSError:
        pass


class Zygote:
    """A shared grading jail (answers.zygote is its PID 1): the lab's leading locked setup cells
    (imports: torch, the workbench) run once, then each submission's process is a fork of it, not
    a new interpreter. One per (setup cells, workbench) for the life of the grading process."""

    def __init__(self, setup: tuple, forbid: tuple[str, ...]):
        self.err = tempfile.TemporaryFile()
        code = f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); import tutorials.answers as a; a.zygote()"
        env = {"PATH": "/usr/bin:/bin", "HOME": "/home/student", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
               "MPLBACKEND": "Agg"}
        self.root = tempfile.mkdtemp(prefix="stanza-jail-")
        expose = EXPOSE
        if forbid:
            from tutorials import jail_library
            expose = [(jail_library.build(forbid), REPO_ROOT / "stanza_core")] + EXPOSE[1:]
        argv = sandbox.command([sandbox.sys.executable, "-I", "-c", code], REPO_ROOT, expose, env, root=self.root)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     start_new_session=True)
        self.lock, self.queues, self.status, self.next_child = threading.Lock(), {}, {}, 0
        self.setup: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.send({"setup": [list(c) for c in setup]})
        try:
            self.setup_errors = self.setup.get(timeout=SUBMISSION_S)
        except queue.Empty:
            self.close()
            raise JailGone(f"the shared jail did not start within {SUBMISSION_S:g} s") from None
        if self.setup_errors is None:
            raise JailGone("the shared jail could not be started")

    def _read(self):
        while True:
            line = self.proc.stdout.readline()
            if not line:
                with self.lock:
                    for q in self.queues.values():
                        q.put(b"")
                self.setup.put(None)
                return
            msg = json.loads(line)
            if "setup" in msg:
                self.setup.put(msg["setup"])
                continue
            with self.lock:
                q = self.queues.get(msg["child"])
            if q is None:
                continue
            if "gone" in msg:
                self.status[msg["child"]] = str(msg["gone"])
                q.put(b"")
            else:
                q.put(msg["line"].encode() + b"\n")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, obj) -> None:
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def fork(self) -> tuple[int, queue.Queue]:
        with self.lock:
            self.next_child += 1
            cid, q = self.next_child, queue.Queue()
            self.queues = {cid: q}  # one child at a time: the fork ends the others
        self.send({"fork": cid})
        return cid, q

    def close(self):
        _end_jail(self.proc, self.root)


_ZYGOTES: dict = {}


def close_shared_jails() -> None:
    """End every shared jail of this process (course.autograde does, once a run is graded)."""
    while _ZYGOTES:
        _ZYGOTES.popitem()[1].close()


import atexit  # noqa: E402

atexit.register(close_shared_jails)


class ForkedJail(Jail):
    """One submission's process, forked in a shared jail (Zygote): what a Jail is, started in
    milliseconds. The leading setup cells ran in the zygote; the rest run here."""

    def __init__(self, cells: list[tuple[str, str]], deadline: float, forbid: tuple[str, ...] = (), setup: int = 0):
        self.deadline, self.next_id, self.forbid = deadline, 0, forbid
        self.cell_lines = {name: code.count("\n") + 1 for name, code in cells}
        n = setup  # the leading cells that are the lab's own (locked setup): the zygote runs them
        key = (tuple(tuple(c) for c in cells[:n]), forbid)
        zygote = _ZYGOTES.get(key)
        if zygote is None or not zygote.alive():
            try:
                zygote = _ZYGOTES[key] = Zygote(key[0], forbid)
            except OSError as e:
                raise JailGone(f"the shared jail could not be started ({type(e).__name__})") from None
        self.zygote = zygote
        self.child, self.lines = zygote.fork()
        self.setup_errors = zygote.setup_errors + (self._ask({"cells": [list(c) for c in cells[n:]]}, SUBMISSION_S)
                                                   or [])

    def _write(self, data: bytes) -> None:
        self.zygote.send({"to": self.child, "req": json.loads(data)})

    def _gone(self, when: str) -> str:
        self.close()
        status = self.zygote.status.get(self.child)
        if status is None:
            return f"the notebook's process ended {when} (its jail ended)"
        return f"the notebook's process ended {when} ({status})"

    def close(self):
        if self.zygote.alive():
            try:
                self.zygote.send({"kill": self.child})
            except OSError:
                pass


SHARED = True  # each submission a fork of a shared jail (ForkedJail); False: a jail of its own (Jail)


def new_jail(cells, deadline, forbid=(), setup: int = 0) -> Jail:
    """A submission's jailed process; `setup`: how many leading cells are the lab's locked setup."""
    return ForkedJail(cells, deadline, forbid, setup) if SHARED else Jail(cells, deadline, forbid)


def dotted(f) -> str:
    f = getattr(f, "__func__", f)
    return f"{f.__module__}.{f.__qualname__}"


class Proxy:
    """A student's function, as the grader's test cells see it; `without`: the dotted names of the
    references the cell's values came from, absent from the workbench of the jail that answers."""

    def __init__(self, session, name: str, without: tuple[str, ...] = ()):
        self.session, self.name, self.without = session, name, without

    def __call__(self, *args, **kwargs):
        return self.session.call(self.name, args, kwargs, [], self.without)


class Session:
    """The calls of one submission: one jail per workbench (the whole package, or a copy without
    the references of a graded cell: tutorials.jail_library), each started again (once per cell)
    if the last one died."""

    def __init__(self, cells, screened: dict[str, str], setup: int = 0):
        self.cells, self.screened, self.setup = cells, screened, setup
        self.deadline = time.monotonic() + SUBMISSION_S
        self.jails: dict[tuple, Jail] = {}
        self.dead = None

    def call(self, fn, args, kwargs, forbid, without: tuple[str, ...] = ()):
        if fn in self.screened:
            raise AnswerError(f"{fn} {self.screened[fn]}")
        if missing := sorted(set(forbid) - set(without)):  # the lab's own mistake: its self-check says so
            raise AnswerError(f"the grader forbids {missing[0]} but its jail holds it (not graded)")
        return self._use(tuple(sorted(set(without))), lambda jail: jail.call(fn, args, kwargs, forbid))

    def ask_ranks(self, req: dict):
        for fn in req["functions"].values():
            if fn in self.screened:
                raise AnswerError(f"{fn} {self.screened[fn]}")
        return self._use((), lambda jail: jail.ranks(req))

    def _use(self, key: tuple, ask):
        if self.dead:
            raise AnswerError(self.dead)
        if key not in self.jails:
            try:
                self.jails[key] = new_jail(self.cells, self.deadline, key, self.setup)
            except AnswerError as e:
                self.dead = str(e)
                raise
        try:
            return ask(self.jails[key])
        except JailGone as e:
            del self.jails[key]
            if time.monotonic() >= self.deadline:
                self.dead = str(e)
            raise

    def close(self):
        for jail in self.jails.values():
            jail.close()


def _verdict(cell_source: str, ns: dict) -> str | None:
    """Run a graded cell here; None if it passed, else the one line a student may see: which check
    failed and its kind (value, type or shape; a coding lab's check by name: parameters after N
    steps, bytes, schedule, memory, deadlock / timeout), the exception's type and the student's
    own line; never a hidden input, an expected value or an exception's text
    (tutorials.feedback_lines)."""
    import contextlib
    import io

    from tutorials.gradekit import RankFailure
    lines = cell_source.splitlines()
    hidden_from = next((i + 1 for i, ln in enumerate(lines) if ln.strip() == HIDDEN), 10**9)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # what the test cells print is the student's to see
            exec(compile(cell_source, "<test>", "exec"), ns)
    except (AnswerError, RankFailure) as e:  # already in the words a student may see
        line = _test_line(e)
        return str(e) + (" (in a hidden test)" if line >= hidden_from else "")
    except Exception as e:  # noqa: BLE001 - the test's assert (or a value the test could not use)
        line = _test_line(e)
        if line < hidden_from:
            shown = lines[line - 1].strip() if line else ""
            return f"the visible test failed: {shown[:160]}"
        failed = getattr(ns.get("gradekit"), "failed", None)
        if failed:  # a coding lab's check, by name and kind
            check, kind = failed[0]
            return f"a hidden check failed: {check!r} ({kind})"
        return "a hidden test failed: " + ("a wrong value" if isinstance(e, AssertionError) else
                                           f"{type(e).__name__}: the answer has the wrong type or shape")
    return None


def _test_line(e: BaseException) -> int:
    return next((f.lineno for f in reversed(traceback.extract_tb(e.__traceback__)) if f.filename == "<test>"), 0)
