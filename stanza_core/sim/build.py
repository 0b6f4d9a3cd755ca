"""Writing a step's program: the operations a strategy's generator emits (strategies/<name>/
schedule.py), in the format of sim/program.py, posted the way `comm.Comm` posts them.

    ops = Ops()
    ops.compute("step", "overhead", s)
    sent = ops.p2p([("send", peer, nbytes, "activations", 0), ...], group="pair1")  # sorted as Comm.p2p sorts
    w = ops.collective("conv", nbytes, "conv_grads")
    ops.wait(sent + [w])
    node = ops.as_completed([[...ids...], ...]); body = node.body(j); node.last(at, group, nbytes, category)

`emit(ops, events, ...)` writes a Workload trace (sim/compute.py) as computes, handing each
gradient-ready event to the caller (bucket rules differ: `GradBucketRule`, `DdpBucketRule`) and
each batch-norm allreduce to the `bn` group (a blocking allreduce, as the engine's).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from ..buckets import bucket_groups
from ..comm.record import canonical


class Ops:
    """One list of operations (a step, or one body of an as_completed), ids from a shared counter."""

    def __init__(self, counter: list[int] | None = None):
        self.ops: list[dict[str, Any]] = []
        self._n = counter if counter is not None else [0]

    def _add(self, op: dict[str, Any]) -> int:
        op = {"id": self._n[0], **op}
        self._n[0] += 1
        self.ops.append(op)
        return op["id"]

    def compute(self, name: str, phase: str, seconds: float):
        if seconds > 0:
            self._add({"type": "compute", "name": name, "phase": phase, "seconds": float(seconds)})

    def p2p(self, posts: Iterable[tuple], group: str | None = None) -> list[int]:
        """Post (kind, peer, nbytes, category[, tag]) messages in the order Comm.p2p posts them
        (sorted by peer, then kind); their ids in that order."""
        ids = []
        for kind, peer, nbytes, category, *tag in sorted(posts, key=lambda o: (o[1], o[0])):
            ids.append(self._add({"type": kind, "peer": int(peer), "bytes": int(nbytes), "category": category,
                                  "tag": int(tag[0]) if tag else 0, "group": group}))
        return ids

    def collective(self, group: str | None, nbytes: int, category: str) -> int:
        return self._add(collective_op(group, nbytes, category))

    def wait(self, ids: Iterable[int | None]):
        ids = [i for i in ids if i is not None]
        if ids:
            self._add({"type": "wait", "on": sorted(ids)})

    def as_completed(self, on: list[list[int]]) -> "AnyNode":
        node = {"type": "as_completed", "on": [sorted(g) for g in on], "bodies": [[] for _ in on], "last": []}
        self._add(node)
        return AnyNode(node, self._n)

    def step(self) -> list[dict[str, Any]]:
        """The operations as a recorded step holds them (numbered in program order)."""
        return canonical(self.ops)


def collective_op(group: str | None, nbytes: int, category: str) -> dict[str, Any]:
    return {"type": "collective", "kind": "allreduce", "group": group or "world", "bytes": int(nbytes),
            "category": category, "algorithm": "ring"}


class AnyNode:
    """An as_completed being written: one body per group, and the last body's collectives."""

    def __init__(self, node: dict[str, Any], counter: list[int]):
        self.node, self._n = node, counter

    def body(self, j: int) -> Ops:
        ops = Ops(self._n)
        ops.ops = self.node["bodies"][j]
        return ops

    def last(self, at: int, group: str | None, nbytes: int, category: str) -> int:
        op = {"id": self._n[0], **collective_op(group, nbytes, category)}
        self._n[0] += 1
        self.node["last"].append({"at": at, "op": op})
        return op["id"]


def emit(ops: Ops, events: list[tuple], on_ready: Callable[[int], None] | None = None):
    """A Workload trace into `ops`: computes; ("ready", k) to `on_ready`; a batch-norm allreduce
    as a blocking allreduce of the `bn` group (category bn_stats)."""
    for ev in events:
        if ev[0] == "compute":
            ops.compute(ev[1], ev[2], ev[3])
        elif ev[0] == "ready":
            if on_ready is not None:
                on_ready(ev[1])
        elif ev[0] == "bn":
            ops.wait([ops.collective("bn", ev[1], "bn_stats")])


class GradBucketRule:
    """The engine's own buckets (strategies.stanza.engine.GradBuckets): parameters in reverse
    order, cut by the engine's bucket rule; a bucket is launched when each of its parameters has
    been final `backwards` times (an FC worker accumulates over the CONV workers it serves). A
    group of one launches nothing."""

    def __init__(self, numels: list[int], cap_bytes: int, *, elem_bytes: int = 4, alone: bool = False):
        order = list(reversed(range(len(numels))))
        groups = bucket_groups([numels[k] * elem_bytes for k in order], cap_bytes)
        self.buckets = [[order[i] for i in g] for g in groups] or [[]]
        self.bucket_of = {k: i for i, b in enumerate(self.buckets) for k in b}
        self.nbytes = [sum(numels[k] for k in b) * elem_bytes for b in self.buckets]
        self.alone = alone
        self.pending: list[int] = []

    def start(self, backwards: int = 1):
        self.pending = [len(b) * backwards for b in self.buckets]

    def ready(self, k: int) -> int | None:
        """Parameter k is final once more: the bucket it completes, or None."""
        i = self.bucket_of[k]
        self.pending[i] -= 1
        return i if self.pending[i] == 0 and not self.alone else None


class DdpBucketRule:
    """torch DDP's buckets after its first step (rebuilt in the order gradients became final, each
    closed once it holds at least the cap: buckets.bucket_groups(close_at_cap=True)), launched in
    order as each completes."""

    def __init__(self, numels: list[int], ready_order: list[int], cap_bytes: int, elem_bytes: int = 4):
        groups = bucket_groups([numels[k] * elem_bytes for k in ready_order], cap_bytes, close_at_cap=True)
        self.buckets = [[ready_order[i] for i in g] for g in groups]
        self.bucket_of = {k: i for i, b in enumerate(self.buckets) for k in b}
        self.nbytes = [sum(numels[k] for k in b) * elem_bytes for b in self.buckets]
        self.pending = [len(b) for b in self.buckets]
        self.next = 0

    def ready(self, k: int) -> list[int]:
        """Parameter k is final: the buckets launched now (in order: a bucket waits for the ones before it)."""
        self.pending[self.bucket_of[k]] -= 1
        out = []
        while self.next < len(self.buckets) and self.pending[self.next] == 0:
            out.append(self.next)
            self.next += 1
        return out


def ready_order(events: list[tuple]) -> list[int]:
    return [ev[1] for ev in events if ev[0] == "ready"]
