"""Lab 9's grader: the sends and receives of one Stanza step, run on gloo ranks (tutorials.gradekit).

Ranks 0..N-2 are CONV workers, rank N-1 the one FC worker (k = 1). Every rank builds the same
small CNN from the case's seed and keeps its part; CONV worker i gets samples i*b..(i+1)*b-1 of
the global batch of G (b = G / (N-1)), the FC worker gets no data. A case's `mine` names the
student's functions it runs (conv_worker, fc_worker, allreduce_conv_grads); the other steps run
this module's own, so each exercise is graded on its function alone. Then this program takes one
SGD step (lr LR) on each rank's part with the gradients left in `.grad`, and returns the part's
parameters.

fc_worker_k: Stanza with k = 2 FC workers (stanza_core.topology's layout): CONV worker i sends to
FC worker Nc + i mod k; each FC worker serves several CONV workers, whose activations arrive in
reverse rank order (CONV worker i waits ARRIVAL_S x (Nc - 1 - i) first), and the FC workers
allreduce their FC gradients among themselves (plan.fc_group).

Checks, computed in the grading process: the parameters equal one SGD step of the whole model on
the whole global batch (mean cross-entropy over G) taken in one process; the bytes each rank sent
and received point to point, and its ring share of the CONV allreduce, equal
stanza_core.perf.expected_bytes for the same model, N, k = 1 and G.
"""
from __future__ import annotations

import time
import types

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from tutorials import gradekit

LR = 0.1
TOL = 1e-6  # fp32: the distributed sums run in another order (measured: up to 1.5e-8 after the step)
IMAGE = (3, 8, 8)
# A case runs a full step: the functions named in `mine` are the student's, the others this
# module's own (so that each exercise is graded on its own function). budget_s: seconds for the
# ranks once started (a correct step takes well under one).
CASES = {
    "try_conv": dict(world_size=2, global_batch=4, seed=0, mine=("conv_worker",), budget_s=20.0),
    "try_fc": dict(world_size=3, global_batch=4, seed=1, mine=("fc_worker",), budget_s=20.0),  # two slices to scale
    "try_allreduce": dict(world_size=3, global_batch=4, seed=2, mine=("allreduce_conv_grads",), budget_s=20.0),
    "conv2": dict(world_size=2, global_batch=5, seed=21, mine=("conv_worker",), budget_s=20.0),
    "conv4": dict(world_size=4, global_batch=9, seed=22, mine=("conv_worker",), budget_s=20.0),
    "fc2": dict(world_size=2, global_batch=3, seed=23, mine=("fc_worker",), budget_s=20.0),
    "fc4": dict(world_size=4, global_batch=6, seed=24, mine=("fc_worker",), budget_s=20.0),
    "allreduce3": dict(world_size=3, global_batch=8, seed=25, mine=("allreduce_conv_grads",), budget_s=20.0),
    "allreduce4": dict(world_size=4, global_batch=6, seed=26, mine=("allreduce_conv_grads",), budget_s=20.0),
    "try_fc_k": dict(world_size=4, global_batch=4, seed=3, fc_workers=2, mine=("fc_worker_k",), budget_s=20.0),
    "fck4": dict(world_size=4, global_batch=6, seed=27, fc_workers=2, mine=("fc_worker_k",), budget_s=20.0),
    "fck5": dict(world_size=5, global_batch=6, seed=28, fc_workers=2, mine=("fc_worker_k",), budget_s=20.0),
}
ARRIVAL_S = 0.05  # k FC workers: CONV worker i sends after ARRIVAL_S x (Nc - 1 - i), the last first
PARTS = {part: {f"{part}, {CASES[c]['world_size']} ranks: {what}": c for c in cases for what in ("parameters", "bytes")}
         for part, cases in (("conv_worker", ("conv2", "conv4")), ("fc_worker", ("fc2", "fc4")),
                             ("allreduce_conv_grads", ("allreduce3", "allreduce4")))}
PARTS["fc_worker_k"] = {f"fc_worker_k, {CASES[c]['world_size']} ranks, k = 2: {what}": c for c in ("fck4", "fck5")
                        for what in ("parameters", "bytes")}
CHECKS = [c for part in PARTS.values() for c in part]
TIME_LIMIT_S = 240  # the whole grading process (nbgrader gives a cell 300 s)


def build(seed: int) -> tuple[nn.Module, nn.Module]:
    """The CONV body and the FC head, the same on every rank for one seed."""
    torch.manual_seed(seed)
    conv = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
    fc = nn.Sequential(nn.Linear(32, 24), nn.ReLU(), nn.Linear(24, 10))
    return conv, fc


def batch(seed: int, g: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed + 1000)
    return torch.randn(g, *IMAGE, generator=gen), torch.randint(0, 10, (g,), generator=gen)


def sgd(part: nn.Module) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        for p in part.parameters():
            if p.grad is not None:
                p -= LR * p.grad
    return {n: p.detach().clone() for n, p in part.named_parameters()}


def _conv_side(conv, x, y, plan):  # this module's CONV worker, for the exercises that are not about it
    a = conv(x)
    dist.send(a.detach(), plan.fc_rank)
    dist.send(y, plan.fc_rank)
    grad = torch.empty_like(a)
    dist.recv(grad, plan.fc_rank)
    a.backward(grad)


def _fc_side(fc, plan):
    for i in plan.conv_ranks:
        a, y = torch.empty(plan.batch, *plan.boundary), torch.empty(plan.batch, dtype=torch.int64)
        dist.recv(a, i)
        dist.recv(y, i)
        a.requires_grad_(True)
        (F.cross_entropy(fc(a), y, reduction="sum") / plan.global_batch).backward()
        dist.send(a.grad, i)


def _allreduce_side(conv, plan):
    for p in conv.parameters():
        dist.all_reduce(p.grad, group=plan.conv_group)


# The reference side of each exercise; the copy of this module that runs a student's exercise
# (jailed, tutorials.rank_grading) lacks that exercise's own side.
SIDES = {"conv_worker": "_conv_side", "fc_worker": "_fc_side", "allreduce_conv_grads": "_allreduce_side"}
OWN = {part: globals()[name] for part, name in SIDES.items() if name in globals()}


def program(rank: int, world_size: int, case: dict, student: gradekit.StudentCode) -> dict:
    """One rank of the step (runs in a rank's process)."""
    own = OWN
    fns = {**own, **{name: fn for name, fn in student.load().items() if name in case["mine"] or name not in own}}
    conv, fc = build(case["seed"])
    k = case.get("fc_workers", 1)
    nc, g = world_size - k, case["global_batch"]
    b = g // nc
    conv_group = dist.new_group(list(range(nc)))  # every rank creates every group
    fc_group = dist.new_group(list(range(nc, world_size))) if k > 1 else None
    plan = types.SimpleNamespace(rank=rank, world_size=world_size, conv_ranks=list(range(nc)),
                                 fc_rank=nc + rank % k if rank < nc else nc, batch=b, boundary=(32,), global_batch=g,
                                 conv_group=conv_group, fc_ranks=list(range(nc, world_size)), fc_group=fc_group,
                                 served=list(range(rank - nc, nc, k)) if rank >= nc else [])
    if rank < nc:
        x, y = batch(case["seed"], g)
        if k > 1:
            time.sleep(ARRIVAL_S * (nc - 1 - rank))
        fns["conv_worker"](conv, x[rank * b:(rank + 1) * b], y[rank * b:(rank + 1) * b], plan)
        fns["allreduce_conv_grads"](conv, plan)
        return sgd(conv)
    fns["fc_worker_k" if k > 1 else "fc_worker"](fc, plan)
    return sgd(fc)


def reference(case: dict) -> tuple[dict, dict]:
    """One SGD step on the whole global batch in this process: the CONV and FC parameters after it."""
    conv, fc = build(case["seed"])
    x, y = batch(case["seed"], case["global_batch"])
    F.cross_entropy(fc(conv(x)), y).backward()
    return sgd(conv), sgd(fc)


def expected(case: dict) -> list[dict]:
    from stanza_core.perf import expected_bytes
    from stanza_core.variant import Variant
    conv, fc = build(case["seed"])
    counts = {"conv_params": sum(p.numel() for p in conv.parameters()),
              "fc_params": sum(p.numel() for p in fc.parameters()), "boundary_values": 32}
    return expected_bytes(counts, Variant("stanza", fc_workers=case.get("fc_workers", 1)), case["world_size"],
                          global_batch=case["global_batch"])


def _params_check(results, case) -> str:
    want_conv, want_fc = reference(case)
    nc = case["world_size"] - case.get("fc_workers", 1)
    for r in range(case["world_size"]):
        role, want = ("CONV worker", want_conv) if r < nc else ("FC worker", want_fc)
        off = gradekit.params_off(results[r].value, want, TOL)
        if off:
            return f"rank {r} ({role}): after the step {off}, against one SGD step on the whole global batch"
    return "ok"


def _bytes_check(results, case) -> str:
    for r, row in zip(results, expected(case)):
        role = row["role"].replace("_", " ").replace("conv", "CONV").replace("fc", "FC")
        got = {"sent point to point": r.bytes("send", "isend"), "received point to point": r.bytes("recv", "irecv"),
               "moved in allreduces (ring share)": round(r.ring_bytes())}
        ring = ("conv_grads", "fc_grads")
        want = {"sent point to point": sum(v for c, v in row["sent"].items() if c not in ring),
                "received point to point": sum(v for c, v in row["recv"].items() if c not in ring),
                "moved in allreduces (ring share)": sum(row["sent"].get(c, 0) for c in ring)}
        for what in got:
            if got[what] != want[what]:
                return f"rank {r.rank} ({role}) {what} {got[what]} bytes, expected {want[what]}"
        other = [c["op"] for c in r.calls if c["op"] not in ("send", "isend", "recv", "irecv", "all_reduce")]
        if other:
            return f"rank {r.rank} ({role}) called {other[0]}: one step needs only sends, receives and allreduces"
    return "ok"


def _judge(check: str, results, case) -> str:
    return _bytes_check(results, case) if check.endswith("bytes") else _params_check(results, case)


def grade(student: gradekit.StudentCode, part: str) -> dict[str, str]:
    """{check: "ok" or why not} for one exercise (PARTS), in the grading process."""
    return gradekit.run_checks(program, CASES, PARTS[part], student, _judge)
