"""The program format: what every rank of a run does in each step, in order, as JSON.

Modelled on MLCommons Chakra's execution traces (a node per operation: compute, send, recv,
collective, with its dependencies), for the one program a BSP step is on each rank:

    {"format": "stanza-program", "version": 1,
     "source": "recorded" | "generated",
     "meta": {"strategy", "label", "model", "image_size", "num_classes", "global_batch",
              "world_size", "options", "replay_device", "bucket_mb", ...},
     "groups": {"world": [0, 1, ...], "conv": [...], "pair1": [1, 3], ...},
     "ranks": [{"rank": 0, "role": "conv_worker", "steps": [[op, ...], ...]}, ...]}

An op (stanza_core/comm/record.py says when each is recorded):

    {"id": 3, "type": "compute", "name": "features.0", "phase": "fwd", "seconds": 1.2e-4}
    {"id": 4, "type": "send", "peer": 3, "bytes": 147456, "category": "activations", "tag": 0, "group": "pair1"}
    {"id": 5, "type": "recv", ...same fields...}
    {"id": 6, "type": "collective", "kind": "allreduce", "group": "conv", "bytes": 102760448,
     "category": "conv_grads", "algorithm": "ring"}
    {"id": 7, "type": "wait", "on": [4, 5]}
    {"id": 8, "type": "as_completed", "on": [[1, 2], [3, 4]], "bodies": [[op, ...], [op, ...]],
     "last": [{"at": 5, "op": {collective}}], "observed": [1, 0]}

Sends, receives and collectives are posted without blocking; a wait blocks until every operation
it names has finished (Chakra's dependencies, as a rank's program states them); program order is
the rest. A send matches the receive of the same sender, receiver, process group and tag, in
posting order. `seconds` are the device profile's (undilated); `bytes` are logical (an unscaled
run's), per message, or per rank for a collective (the buffer allreduced).

`read(path)` checks a file and refuses a malformed one in one line (ProgramError);
`normal(program)` is the form two programs are compared in (meta, `observed` and the source
dropped); `difference(a, b)` names the first operation where they differ.
"""
from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

FORMAT = "stanza-program"
VERSION = 1
OP_TYPES = ("compute", "send", "recv", "collective", "wait", "as_completed")
PHASES = ("fwd", "bwd", "update", "overhead")
COLLECTIVES = ("allreduce",)
ALGORITHMS = ("ring",)


class ProgramError(ValueError):
    """A malformed program file: one line saying what and where."""


def document(*, source: str, meta: dict[str, Any], roles: list[str], groups: dict[str, list[int]],
             steps: list[list[list[dict[str, Any]]]]) -> dict[str, Any]:
    """A program: `steps[r]` is rank r's list of steps (each a list of operations)."""
    return {"format": FORMAT, "version": VERSION, "source": source, "meta": meta,
            "groups": {k: [int(r) for r in v] for k, v in groups.items()},
            "ranks": [{"rank": r, "role": roles[r], "steps": s} for r, s in enumerate(steps)]}


def write(path: str | Path, program: dict[str, Any]) -> None:
    from .. import atomic  # imports nothing heavy; kept here so the format module imports nothing of the package at load

    atomic.write_text(Path(path), json.dumps(program) + "\n")


def read(path: str | Path) -> dict[str, Any]:
    """A program file, checked (`check`): ProgramError in one line if it is not one."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise ProgramError(f"{path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise ProgramError(f"{path}: not JSON ({e})") from None
    check(doc, str(path))
    return doc


def _fail(where: str, what: str):
    raise ProgramError(f"{where}: {what}")


def _int(where, v, lo=0):
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        _fail(where, f"expected an integer >= {lo}, got {v!r}")


def check(doc: Any, where: str = "program") -> None:
    """Every field of the format present and of its type, every peer a rank, every group known,
    every id unique within its step and every wait naming an earlier operation."""
    if not isinstance(doc, dict):
        _fail(where, f"expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        _fail(where, f"format must be {FORMAT!r}, got {doc.get('format')!r}")
    if doc.get("version") != VERSION:
        _fail(where, f"version must be {VERSION}, got {doc.get('version')!r}")
    if doc.get("source") not in ("recorded", "generated"):
        _fail(where, f"source must be 'recorded' or 'generated', got {doc.get('source')!r}")
    if not isinstance(doc.get("meta"), dict):
        _fail(where, "meta must be an object")
    ranks = doc.get("ranks")
    if not isinstance(ranks, list) or not ranks:
        _fail(where, "ranks must be a non-empty list")
    world = len(ranks)
    groups = doc.get("groups")
    if not isinstance(groups, dict) or "world" not in groups:
        _fail(where, "groups must be an object holding at least 'world'")
    for name, members in groups.items():
        if not isinstance(members, list) or not members or any(
                isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < world for m in members):
            _fail(f"{where}: group {name!r}", f"expected a non-empty list of ranks in 0..{world - 1}")
    nsteps = None
    for r, rank in enumerate(ranks):
        w = f"{where}: rank {r}"
        if not isinstance(rank, dict) or rank.get("rank") != r:
            _fail(w, f"expected {{'rank': {r}, 'role': ..., 'steps': [...]}}")
        if not isinstance(rank.get("role"), str):
            _fail(w, "role must be a string")
        steps = rank.get("steps")
        if not isinstance(steps, list) or not steps:
            _fail(w, "steps must be a non-empty list of steps")
        if nsteps is None:
            nsteps = len(steps)
        elif len(steps) != nsteps:
            _fail(w, f"has {len(steps)} steps, rank 0 has {nsteps}")
        for t, ops in enumerate(steps):
            if not isinstance(ops, list):
                _fail(f"{w}, step {t}", "expected a list of operations")
            _check_ops(ops, f"{w}, step {t}", r, world, groups, set())


def _check_ops(ops, where, rank, world, groups, seen: set):
    for op in ops:
        if not isinstance(op, dict):
            _fail(where, f"expected an operation object, got {op!r}")
        _check_op(op, where, rank, world, groups, seen)


def _check_op(op, where, rank, world, groups, seen: set):
    oid = op.get("id")
    _int(f"{where}: an operation's id", oid)
    w = f"{where}, op {oid}"
    if oid in seen:
        _fail(w, "id used twice in one step")
    kind = op.get("type")
    if kind not in OP_TYPES:
        _fail(w, f"type must be one of {', '.join(OP_TYPES)}, got {kind!r}")
    if kind == "compute":
        if not isinstance(op.get("name"), str) or op.get("phase") not in PHASES:
            _fail(w, f"a compute needs a name and a phase in {', '.join(PHASES)}")
        s = op.get("seconds")
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s < 0:
            _fail(w, f"seconds must be a finite number >= 0, got {s!r}")
    elif kind in ("send", "recv"):
        _int(f"{w} peer", op.get("peer"))
        if not op["peer"] < world or op["peer"] == rank:
            _fail(w, f"peer must be another rank in 0..{world - 1}, got {op['peer']}")
        _int(f"{w} bytes", op.get("bytes"))
        _int(f"{w} tag", op.get("tag"))
        if not isinstance(op.get("category"), str):
            _fail(w, "category must be a string")
        if op.get("group") is not None and op["group"] not in groups:
            _fail(w, f"group {op['group']!r} is not in the program's groups")
    elif kind == "collective":
        if op.get("kind") not in COLLECTIVES or op.get("algorithm") not in ALGORITHMS:
            _fail(w, f"a collective's kind must be in {COLLECTIVES} and its algorithm in {ALGORITHMS}")
        if op.get("group") not in groups:
            _fail(w, f"group {op.get('group')!r} is not in the program's groups")
        if rank not in groups[op["group"]]:
            _fail(w, f"rank {rank} is not a member of group {op['group']!r}")
        _int(f"{w} bytes", op.get("bytes"))
        if not isinstance(op.get("category"), str):
            _fail(w, "category must be a string")
    elif kind == "wait":
        on = op.get("on")
        if not isinstance(on, list) or not on or any(i not in seen for i in on):
            _fail(w, "a wait's 'on' must list ids of earlier operations of its step")
    else:  # as_completed
        on, bodies, last = op.get("on"), op.get("bodies"), op.get("last", [])
        if not isinstance(on, list) or not on or any(not isinstance(g, list) or any(i not in seen for i in g)
                                                     for g in on):
            _fail(w, "an as_completed's 'on' must be a list of lists of ids of earlier operations")
        if not isinstance(bodies, list) or len(bodies) != len(on):
            _fail(w, "an as_completed needs one body per group of 'on'")
        seen.add(oid)
        for j, body in enumerate(bodies):
            if not isinstance(body, list):
                _fail(f"{w}, body {j}", "expected a list of operations")
            _check_ops(body, f"{w}, body {j}", rank, world, groups, seen)
        if not isinstance(last, list):
            _fail(w, "'last' must be a list")
        for e in last:
            if not isinstance(e, dict) or not isinstance(e.get("op"), dict):
                _fail(w, "each entry of 'last' needs 'at' and 'op'")
            _int(f"{w} last.at", e.get("at"))
            if e["op"].get("type") != "collective":
                _fail(w, "only collectives are launched from the last body")
            _check_op(e["op"], f"{w}, last", rank, world, groups, seen)
        return
    seen.add(oid)


def normal(doc: dict[str, Any]) -> dict[str, Any]:
    """What two programs are compared in: groups and every rank's role and steps, without the
    order in which an as_completed's groups happened to complete (`observed`)."""
    def clean(ops):
        out = []
        for op in ops:
            if op["type"] == "as_completed":
                op = {k: v for k, v in op.items() if k != "observed"}
                op["bodies"] = [clean(b) for b in op["bodies"]]
                op["last"] = [{"at": e["at"], "op": e["op"]} for e in op.get("last", [])]
            out.append(op)
        return out

    return {"groups": {k: sorted(v) for k, v in doc["groups"].items()},
            "ranks": [{"rank": r["rank"], "role": r["role"], "steps": [clean(s) for s in r["steps"]]}
                      for r in doc["ranks"]]}


def difference(a: dict[str, Any], b: dict[str, Any], *, steps: slice | None = None,
               rel_seconds: float = 0.0) -> str | None:
    """The first place where programs `a` and `b` differ (None: equal), operation for
    operation: kinds, peers, bytes, tags, groups, order, waits. Compute seconds are equal within
    `rel_seconds` (0: exactly). `steps` selects the steps compared (default: all)."""
    na, nb = normal(a), normal(b)
    ga, gb = {k: v for k, v in na["groups"].items()}, {k: v for k, v in nb["groups"].items()}
    if ga != gb:
        return f"groups differ: {sorted(ga.items())} vs {sorted(gb.items())}"
    if len(na["ranks"]) != len(nb["ranks"]):
        return f"world size {len(na['ranks'])} vs {len(nb['ranks'])}"
    for ra, rb in zip(na["ranks"], nb["ranks"]):
        if ra["role"] != rb["role"]:
            return f"rank {ra['rank']}: role {ra['role']} vs {rb['role']}"
        sa, sb = ra["steps"][steps or slice(None)], rb["steps"][steps or slice(None)]
        if len(sa) != len(sb):
            return f"rank {ra['rank']}: {len(sa)} steps vs {len(sb)}"
        for t, (oa, ob) in enumerate(zip(sa, sb)):
            d = _ops_difference(oa, ob, rel_seconds)
            if d:
                return f"rank {ra['rank']}, step {t}: {d}"
    return None


def _ops_difference(a, b, rel) -> str | None:
    for i, (x, y) in enumerate(zip(a, b)):
        d = _op_difference(x, y, rel)
        if d:
            return f"op {i}: {d}"
    if len(a) != len(b):
        extra = (a if len(a) > len(b) else b)[min(len(a), len(b))]
        return f"{len(a)} operations vs {len(b)} (first extra: {_short(extra)})"
    return None


def _op_difference(x, y, rel) -> str | None:
    if x["type"] != y["type"]:
        return f"{_short(x)} vs {_short(y)}"
    keys = (set(x) | set(y)) - {"bodies", "last", "seconds"}
    for k in sorted(keys):
        if x.get(k) != y.get(k):
            return f"{k} {x.get(k)!r} vs {y.get(k)!r} ({_short(x)} vs {_short(y)})"
    if x["type"] == "compute":
        s, t = x["seconds"], y["seconds"]
        if abs(s - t) > rel * max(abs(s), abs(t)):
            return f"seconds {s!r} vs {t!r} ({_short(x)})"
    if x["type"] == "as_completed":
        for j, (p, q) in enumerate(zip(x["bodies"], y["bodies"])):
            d = _ops_difference(p, q, rel)
            if d:
                return f"as_completed {x['id']} body {j}: {d}"
        lx, ly = x.get("last", []), y.get("last", [])
        if [e["at"] for e in lx] != [e["at"] for e in ly]:
            return f"as_completed {x['id']}: last launched at {[e['at'] for e in lx]} vs {[e['at'] for e in ly]}"
        for p, q in zip(lx, ly):
            d = _op_difference(p["op"], q["op"], rel)
            if d:
                return f"as_completed {x['id']} last: {d}"
    return None


def _short(op) -> str:
    t = op["type"]
    if t == "compute":
        return f"compute {op['name']} {op['phase']}"
    if t in ("send", "recv"):
        return f"{t} {op['category']} peer {op['peer']} {op['bytes']} B"
    if t == "collective":
        return f"{op['kind']} {op['category']} on {op['group']} {op['bytes']} B"
    return t


def rank_bytes(doc: dict[str, Any], step: int = -1) -> list[dict[str, dict[str, Any]]]:
    """Per rank, the logical bytes one step sends and receives by category, counted as the
    engine's counters count them (comm/accounting.py): a message's bytes where it is posted, a
    ring allreduce 2(n-1)/n of its buffer each way (a Fraction)."""
    out = []
    groups = doc["groups"]
    for rank in doc["ranks"]:
        sent: dict[str, Any] = {}
        recv: dict[str, Any] = {}

        def walk(ops):
            for op in ops:
                t = op["type"]
                if t == "send":
                    sent[op["category"]] = sent.get(op["category"], 0) + op["bytes"]
                elif t == "recv":
                    recv[op["category"]] = recv.get(op["category"], 0) + op["bytes"]
                elif t == "collective":
                    n = len(groups[op["group"]])
                    if n > 1:
                        share = Fraction(2 * (n - 1) * op["bytes"], n)
                        sent[op["category"]] = sent.get(op["category"], 0) + share
                        recv[op["category"]] = recv.get(op["category"], 0) + share
                elif t == "as_completed":
                    for body in op["bodies"]:
                        walk(body)
                    walk([e["op"] for e in op.get("last", [])])

        walk(rank["steps"][step])
        out.append({"rank": rank["rank"], "role": rank["role"], "sent": sent, "recv": recv})
    return out
