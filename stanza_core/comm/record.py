"""A rank's program, recorded from the real engine: what it does in each step, in order.

`Comm.record()` turns it on (the training CLI's `--record-program PATH`, replayed compute only);
from then on, inside every step, `Comm` and the replayed compute report each operation here:

    compute      a replayed wait: layer (or "step", "optimizer"), phase (fwd, bwd, update,
                 overhead) and its seconds on the device profile, undilated (D = 1)
    send / recv  a message posted: peer, logical bytes, category, tag, process group
    collective   a collective launched: kind (allreduce), group, logical bytes per rank, category,
                 algorithm (ring: the one gloo runs and the performance model prices)
    wait         a wait for posted operations to finish: `on`, the ids of the ones it waits for
    as_completed a wait for whichever of several groups of operations completes first, then the
                 next (`Comm.as_completed`: the FC worker's "as each activation arrives", the
                 parameter server's "as each piece's pushes arrive"): `on`, one list of ids per
                 group; `bodies`, what the rank does after each group completes, by group; `last`,
                 the collectives launched inside whichever body runs last (a gradient bucket that
                 closes with the last backward), each with `at`, the position in that body it is
                 launched from

Operations are numbered in program order within a step. Bodies are recorded as they run (in the
order their groups completed, `observed`) and then put in group order and renumbered, and every
wait's `on` is a set (sorted): a step's program does not depend on which message came first, so
the program a strategy's generator writes (strategies/<name>/schedule.py) can equal it operation
for operation. The format is stanza_core.sim.program's.
"""
from __future__ import annotations

from typing import Any, Iterable


class Recorder:
    """One rank's steps as lists of operations (the module docstring)."""

    def __init__(self, rank: int):
        self.rank = rank
        self.steps: list[list[dict[str, Any]]] = []
        self._ops: list[dict[str, Any]] | None = None  # where the next operation goes (a step, a body)
        self._handles: dict[int, tuple[Any, int]] = {}  # id(work or future) -> (it, op id): kept alive
        self._next = 0
        self._frames: list[dict[str, Any]] = []  # as_completed nodes being recorded

    # -- steps ---------------------------------------------------------------------------------
    def begin_step(self):
        self.steps.append([])
        self._ops, self._next, self._frames = self.steps[-1], 0, []
        self._handles.clear()

    def end_step(self):
        if self._frames:
            raise RuntimeError("record: a step ended inside an as_completed loop")
        self.steps[-1] = canonical(self.steps[-1])
        self._ops = None
        self._handles.clear()

    @property
    def active(self) -> bool:
        return self._ops is not None

    def _add(self, op: dict[str, Any]) -> int:
        op = {"id": self._next, **op}
        self._next += 1
        frame = self._frames[-1] if self._frames else None
        if frame is not None and op["type"] == "collective" and frame["_left"] == 0:
            # launched from the body that runs last: a bucket the last backward closed
            frame["last"].append({"at": len(self._ops), "op": op})
        else:
            self._ops.append(op)
        return op["id"]

    # -- operations ----------------------------------------------------------------------------
    def compute(self, name: str, phase: str, seconds: float):
        if self.active and seconds > 0:
            self._add({"type": "compute", "name": name, "phase": phase, "seconds": float(seconds)})

    def p2p(self, kind: str, peer: int, nbytes: int, category: str, tag: int, group: str | None) -> int | None:
        if not self.active:
            return None
        return self._add({"type": kind, "peer": int(peer), "bytes": int(nbytes), "category": category,
                          "tag": int(tag), "group": group})

    def collective(self, kind: str, group: str | None, nbytes: int, category: str) -> int | None:
        if not self.active:
            return None
        return self._add({"type": "collective", "kind": kind, "group": group or "world", "bytes": int(nbytes),
                          "category": category, "algorithm": "ring"})

    def bind(self, handle, op_id: int | None):
        """`handle` (a Work or a Future) is the one of operation `op_id`: a later wait names it."""
        if op_id is not None and handle is not None:
            self._handles[id(handle)] = (handle, op_id)

    def ids(self, handles: Iterable) -> list[int]:
        out = []
        for h in handles:
            if h is None:
                continue
            got = self._handles.get(id(h))
            if got is None:
                raise RuntimeError("record: a wait names an operation this step did not post")
            out.append(got[1])
        return out

    def wait(self, handles: Iterable):
        if self.active:
            ids = self.ids(handles)
            if ids:
                self._add({"type": "wait", "on": ids})

    # -- as_completed ----------------------------------------------------------------------------
    def begin_any(self, groups: list[list]):
        if not self.active:
            return
        node = {"type": "as_completed", "on": [self.ids(g) for g in groups],
                "bodies": [[] for _ in groups], "last": [], "observed": []}
        self._add(node)
        self._frames.append({"node": node, "outer": self._ops, "_left": len(groups), "last": node["last"]})

    def body(self, i: int):
        """Group i has completed: what follows is its body."""
        if not self.active:
            return
        frame = self._frames[-1]
        frame["_left"] -= 1
        frame["node"]["observed"].append(i)
        self._ops = frame["node"]["bodies"][i]

    def end_any(self):
        if not self.active:
            return
        frame = self._frames.pop()
        self._ops = frame["outer"]

    def to_list(self) -> list[list[dict[str, Any]]]:
        return self.steps


def canonical(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A step's operations renumbered in program order (bodies in group order, then the last
    body's collectives), every `on` sorted: the form two programs are compared in."""
    order: list[dict[str, Any]] = []

    def walk(seq):
        for op in seq:
            order.append(op)
            if op["type"] == "as_completed":
                for body in op["bodies"]:
                    walk(body)
                for entry in op["last"]:
                    order.append(entry["op"])

    walk(ops)
    new = {op["id"]: i for i, op in enumerate(order)}

    def remap(seq):
        out = []
        for op in seq:
            op = dict(op, id=new[op["id"]])
            if op["type"] == "wait":
                op["on"] = sorted(new[i] for i in op["on"])
            elif op["type"] == "as_completed":
                op["on"] = [sorted(new[i] for i in g) for g in op["on"]]
                op["bodies"] = [remap(b) for b in op["bodies"]]
                op["last"] = [{"at": e["at"], "op": remap([e["op"]])[0]} for e in op["last"]]
            out.append(op)
        return out

    return remap(ops)
