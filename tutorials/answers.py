"""The student's side of grading: runs jailed (tutorials.sandbox), answers calls with plain JSON values.

    python -c "import tutorials.answers as a; a.main()"     # stdin: requests, stdout: replies, one JSON a line

First request: {"cells": [[name, code], ...]}: the lab's locked setup cells and the student's
solution cells, in the notebook's order, executed here (a cell that raises is reported and the
next one still runs, as in Jupyter). Then {"id", "fn", "args", "kwargs", "forbid"}: call the
student's function `fn`; while it runs, every function named in `forbid` (dotted names: the
references the expected values came from) raises when called, in any thread and through any
alias. Reply {"id", "value"} or {"id", "error": one line}.

Nothing here decides a grade: this process holds no expected value, and whatever it replies is
read by the grader (tutorials.autograde) as data, never as code. Values cross as JSON; a tuple is
{"__tuple__": [...]}, a dict with keys that are not strings {"__dict__": [[key, value], ...]};
anything else (an object with its own comparisons, a tensor) is refused.
"""
from __future__ import annotations

import importlib
import io
import json
import math
import os
import sys
import traceback

MAX_LINE = 4 << 20  # bytes of one reply


def encode(value, depth: int = 0, objects: bool = False):
    """A plain JSON value for `value`, or TypeError. `objects`: the grader's arguments may also
    carry other objects (a profile, a cluster), pickled: only the jail ever unpickles them."""
    if depth > 20:
        raise TypeError("a value nested more than 20 deep")
    if value is None or type(value) in (bool, str):
        return value
    if type(value) is int:
        return value
    if type(value) is float:
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if type(value) is list:
        return [encode(v, depth + 1, objects) for v in value]
    if type(value) is tuple:
        return {"__tuple__": [encode(v, depth + 1, objects) for v in value]}
    if type(value) is dict:
        if all(type(k) is str and not k.startswith("__") for k in value):
            return {k: encode(v, depth + 1, objects) for k, v in value.items()}
        return {"__dict__": [[encode(k, depth + 1, objects), encode(v, depth + 1, objects)] for k, v in value.items()]}
    if type(value).__module__ == "torch" and type(value).__name__ == "Tensor":
        return {"__tensor__": [str(value.dtype).removeprefix("torch."), list(value.shape),
                               encode(value.detach().flatten().tolist(), depth + 1)]}
    if objects:
        import base64
        import pickle
        return {"__pickle__": base64.b64encode(pickle.dumps(value)).decode()}
    raise TypeError(f"a {type(value).__module__}.{type(value).__qualname__}, not a number, string, list, "
                    "tuple or dict")


def decode(value, objects: bool = False):
    """The Python value of encode's JSON (also used by the grader, on what comes back, with
    objects=False: a pickle is refused)."""
    if isinstance(value, list):
        return [decode(v, objects) for v in value]
    if isinstance(value, dict):
        if set(value) == {"__pickle__"}:
            if not objects:
                raise ValueError("an object where a plain value was expected")
            import base64
            import pickle
            return pickle.loads(base64.b64decode(value["__pickle__"]))
        if set(value) == {"__tuple__"}:
            return tuple(decode(v, objects) for v in value["__tuple__"])
        if set(value) == {"__float__"}:
            return float(value["__float__"])
        if set(value) == {"__tensor__"}:
            import torch
            dtype, shape, data = value["__tensor__"]
            if dtype not in ("float32", "float64", "int64", "int32", "bool", "float16", "bfloat16", "uint8", "int8"):
                raise ValueError(f"a tensor of {dtype}")
            return torch.tensor(decode(data), dtype=getattr(torch, dtype)).reshape([int(n) for n in shape])
        if set(value) == {"__dict__"}:
            return {_key(decode(k, objects)): decode(v, objects) for k, v in value["__dict__"]}
        return {k: decode(v, objects) for k, v in value.items()}
    return value


def _key(k):
    return tuple(k) if isinstance(k, list) else k


def one_line(e: BaseException) -> str:
    text = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    where = ""
    for f in reversed(traceback.extract_tb(e.__traceback__)):
        if f.filename.startswith("<cell "):
            where = f" ({f.filename[1:-1]}, line {f.lineno})"
            break
    return (f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__) + where


def run_cells(cells, ns: dict) -> list[str]:
    """Run (name, code) cells in `ns` in order; each failure as "name: its one line", as Jupyter
    would show it, and the next cell runs."""
    errors = []
    for name, code in cells:
        try:
            exec(compile(code, f"<cell {name}>", "exec"), ns)
        except BaseException as e:  # noqa: BLE001 - reported, as Jupyter would show it
            errors.append(f"{name}: {one_line(e)}")
    return errors


def _resolve(dotted: str):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(dotted)


def _function(obj):
    while hasattr(obj, "__wrapped__"):
        if hasattr(obj, "cache_clear"):
            obj.cache_clear()
        obj = obj.__wrapped__
    obj = getattr(obj, "__func__", obj)
    return obj.__init__ if isinstance(obj, type) else obj


def _poison(dotted: str):
    """Make the function named `dotted` raise PermissionError (a builtin: the poisoned code runs with
    the function's own globals); returns how to undo it."""
    fn = _function(_resolve(dotted))
    code = fn.__code__
    src = ("def make():\n" + "".join(f"    {v} = None\n" for v in code.co_freevars)
           + "    def poisoned(*args, **kwargs):\n"
           + "".join(f"        {v}\n" for v in code.co_freevars)
           + f"        raise PermissionError({dotted!r} + ' is a reference this answer is graded against')\n"
           + "    return poisoned\n")
    ns: dict = {}
    exec(src, ns)
    poisoned = ns["make"]().__code__
    fn.__code__ = poisoned.replace(co_name=code.co_name)
    return lambda: setattr(fn, "__code__", code)


def _ranks(req: dict, ns: dict):
    """Run a lab's rank program (its source comes with the request) with the student's functions:
    {"results": [{rank, value, calls, output}]} or {"failure": one line}."""
    import types

    import cloudpickle
    try:
        from tutorials import gradekit
        mod = types.ModuleType(req["module"])
        sys.modules[req["module"]] = mod
        exec(compile(req["ranks"], req["module"], "exec"), mod.__dict__)
        cloudpickle.register_pickle_by_value(mod)
        missing = [fn for fn in req["functions"].values() if not callable(ns.get(fn))]
        if missing:
            return {"failure": f"{missing[0]} is not defined"}
        student = gradekit.StudentCode.of(**{k: ns[fn] for k, fn in req["functions"].items()})
        case = decode(req["case"])
        # the ranks fork from this process (it holds torch already, set to one thread): no launcher
        # interpreter per run. A rank can do no more here than the student's cells could already.
        import torch
        torch.set_num_threads(1)
        gradekit._FRESH = True
        results = gradekit.run_ranks(mod.program, case["world_size"], case, student, budget_s=case["budget_s"])
        return {"results": encode([{"rank": r.rank, "value": r.value, "calls": r.calls, "output": r.output[-2000:]}
                                   for r in results])}
    except Exception as e:  # noqa: BLE001 - RankFailure and the student's own errors: one line
        return {"failure": str(e) if type(e).__name__ == "RankFailure" else one_line(e)}


def _quiet() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # what the student's code prints goes nowhere
        os.dup2(null, fd)
    sys.stdout = sys.stderr = io.TextIOWrapper(open(os.devnull, "wb"), write_through=True)


def main() -> None:
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    requests = os.fdopen(os.dup(0), "r")
    _quiet()
    serve(requests, replies, {"__name__": "__main__"})


class _Lines:
    """Whole lines read from a file descriptor as it becomes readable (None at its end)."""

    def __init__(self, fd: int):
        self.fd, self.buf = fd, b""

    def read(self):
        try:
            data = os.read(self.fd, 1 << 16)
        except OSError:
            data = b""
        if not data:
            return None
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        if len(self.buf) > MAX_LINE:  # never a line: what was read so far goes on as one
            lines.append(self.buf)
            self.buf = b""
        return lines


def zygote() -> None:
    """PID 1 of a shared grading jail (tutorials.autograde.Zygote). Runs the lab's leading locked
    setup cells once (the instructor's code: imports, helpers), then, for each submission, forks
    a child that runs that submission's cells and answers its calls (serve); a fork is a copy of a
    process that never ran a student's code, so no submission sees another's. It relays each
    child's replies to the grader, tagged with the child's id, and runs no student code itself.

    Requests (one JSON a line): {"setup": cells} first; {"fork": id}; {"to": id, "req": request};
    {"kill": id}. Replies: {"setup": errors}; {"child": id, "line": text}; {"child": id, "gone": status}.
    One child at a time: a fork or a kill ends every other process of the jail first, and empties
    its /tmp and home, so a submission leaves nothing behind for the next."""
    import ctypes
    import selectors
    import shutil
    import signal
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: a child cannot trace or read this process
    out_fd, in_fd = os.dup(1), os.dup(0)
    _quiet()
    ns: dict = {"__name__": "__main__"}

    def send(obj):
        data = (json.dumps(obj) + "\n").encode()
        while data:
            data = data[os.write(out_fd, data):]

    requests = _Lines(in_fd)
    child = None  # [id, pid, to the child, its replies]

    def end_all():
        nonlocal child
        for p in os.listdir("/proc"):
            if p.isdigit() and int(p) != os.getpid():
                try:
                    os.kill(int(p), signal.SIGKILL)
                except OSError:
                    pass
        reap()
        if child:
            for fd in (child[2], child[3].fd):
                try:
                    sel.unregister(fd) if fd == child[3].fd else None
                except (KeyError, ValueError):
                    pass
                try:
                    os.close(fd)
                except OSError:
                    pass
            child = None
        for d in ("/tmp", "/home/student"):
            for p in os.listdir(d) if os.path.isdir(d) else ():
                path = os.path.join(d, p)
                shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) and not os.path.islink(path) else \
                    os.unlink(path) if os.path.lexists(path) else None

    def reap():
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return

    sel = selectors.DefaultSelector()
    sel.register(in_fd, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select(timeout=1.0):
            if key.fd == in_fd:
                lines = requests.read()
                if lines is None:
                    end_all()
                    os._exit(0)
                for line in lines:
                    req = json.loads(line)
                    if "setup" in req:
                        send({"setup": run_cells(req["setup"], ns)})
                    elif "fork" in req:
                        end_all()
                        to_r, to_w = os.pipe()
                        from_r, from_w = os.pipe()
                        pid = os.fork()
                        if pid == 0:  # the child: the submission's own process
                            try:
                                os.setsid()
                                for fd in (in_fd, out_fd, to_w, from_r):
                                    os.close(fd)
                                sel.close()
                                serve(os.fdopen(to_r, "r"), os.fdopen(from_w, "w", buffering=1), ns)
                            finally:
                                os._exit(0)
                        os.close(to_r)
                        os.close(from_w)
                        child = [req["fork"], pid, to_w, _Lines(from_r)]
                        sel.register(from_r, selectors.EVENT_READ)
                    elif "to" in req:
                        if child and child[0] == req["to"]:
                            try:
                                data = (json.dumps(req["req"]) + "\n").encode()
                                while data:
                                    data = data[os.write(child[2], data):]
                            except OSError:
                                pass  # gone: its replies' end says so
                        else:
                            send({"child": req["to"], "gone": "no such process"})
                    elif "kill" in req:
                        if child and child[0] == req["kill"]:
                            end_all()
            elif child and key.fd == child[3].fd:
                lines = child[3].read()
                if lines is None:
                    cid, pid = child[0], child[1]
                    status = "exit status 0"
                    try:
                        _, st = os.waitpid(pid, 0)
                        code = os.waitstatus_to_exitcode(st)
                        status = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
                    except ChildProcessError:
                        pass
                    end_all()
                    send({"child": cid, "gone": status})
                    continue
                for line in lines:
                    send({"child": child[0], "line": line.decode(errors="replace")})
        reap()


def serve(requests, replies, ns: dict) -> None:
    """Answer the grader's requests (read from `requests`, one JSON a line) in namespace `ns`."""
    def reply(obj):
        try:
            line = json.dumps(obj, allow_nan=False)
        except (TypeError, ValueError) as e:
            line = json.dumps({"id": obj.get("id"), "error": f"the answer could not be sent: {e}"})
        if len(line) > MAX_LINE:
            line = json.dumps({"id": obj.get("id"), "error": f"the answer is larger than {MAX_LINE} bytes"})
        replies.write(line + "\n")

    for line in requests:
        req = json.loads(line)
        if "cells" in req:
            reply({"id": req.get("id"), "value": run_cells(req["cells"], ns)})
            continue
        if "ranks" in req:
            reply({"id": req["id"], "value": _ranks(req, ns)})
            continue
        undo = []
        try:
            for dotted in req.get("forbid", ()):
                undo.append(_poison(dotted))
            fn = ns.get(req["fn"])
            if not callable(fn):
                raise NameError(f"{req['fn']} is not defined")
            value = fn(*decode(req["args"], True), **decode(req["kwargs"], True))
            out = {"id": req["id"], "value": encode(value)}
        except BaseException as e:  # noqa: BLE001 - the answer is wrong, not the grader
            out = {"id": req["id"], "error": one_line(e)}
        finally:
            for u in reversed(undo):  # one function may be named twice (an alias, a cache of it)
                u()
        reply(out)
