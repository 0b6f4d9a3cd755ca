"""Lab 10's grader: a bucketed gradient allreduce overlapped with the backward (tutorials.gradekit).

Every rank builds the same MLP from the case's seed and runs data parallel: rank r gets samples
r*b..(r+1)*b-1 of the global batch (b = G / N), mean cross-entropy over them. Before the forward
this program calls the student's `attach_overlapped_allreduce(model, timeline)` or
`attach_bucketed_allreduce(model, bucket_cap_bytes, timeline)`, which register their hooks and
return `finish`; then forward, backward (timed here), finish() (or the student's
`allreduce_gradients(model)`), one SGD step (lr LR) with whatever is in `.grad`; it returns the
parameters, the student's timeline and the backward's start and end (time.perf_counter, the
clock the timeline uses).

Every case trains STEPS steps with the hooks attached once (so `finish` must leave them ready
for the next step). Checks, in the grading process: parameters equal the same SGD steps of the
same model on the whole global batches in one process; the allreduces each rank made have exactly the bucket sizes of the
rule (parameters in reverse order, a bucket closes once it holds at least the cap); at least one
bucket's allreduce started before the backward ended, by the student's timeline and by the
counters' own log of the calls.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from tutorials import gradekit

LR = 0.1
STEPS = 3  # every case trains this many steps: hooks attached once must serve every step
TOL = 1e-6  # fp32: ranks and bucket boundaries change the order of the sums (measured: up to 1.5e-8)
# exercise: plain (allreduce_gradients after the backward), overlap (one allreduce per gradient,
# launched from hooks), buckets (attach_bucketed_allreduce). cap: the bucket cap in bytes (1: every
# gradient a bucket of its own, which is what plain and overlap must do).
CASES = {
    "try_plain": dict(exercise="plain", world_size=2, global_batch=4, seed=0, cap=1, steps=STEPS, budget_s=20.0),
    "try_overlap": dict(exercise="overlap", world_size=2, global_batch=4, seed=1, cap=1, steps=STEPS, budget_s=20.0),
    "try_buckets": dict(exercise="buckets", world_size=2, global_batch=4, seed=2, cap=8192, steps=STEPS, budget_s=20.0),
    "plain3": dict(exercise="plain", world_size=3, global_batch=6, seed=31, cap=1, steps=STEPS, budget_s=20.0),
    "overlap3": dict(exercise="overlap", world_size=3, global_batch=9, seed=32, cap=1, steps=STEPS, budget_s=20.0),
    "buckets2": dict(exercise="buckets", world_size=2, global_batch=8, seed=33, cap=20000, steps=STEPS, budget_s=20.0),
    "buckets3": dict(exercise="buckets", world_size=3, global_batch=6, seed=34, cap=2000, steps=STEPS, budget_s=20.0),
}
FUNCTION = {"plain": "allreduce_gradients", "overlap": "attach_overlapped_allreduce", "buckets": "attach_bucketed_allreduce"}
PARTS = {
    "allreduce_gradients": {"3 ranks: equal to one process": "plain3", "3 ranks: one allreduce per gradient": "plain3"},
    "attach_overlapped_allreduce": {"3 ranks: equal to one process": "overlap3",
                                    "3 ranks: one allreduce per gradient": "overlap3", "3 ranks: overlap": "overlap3"},
    "attach_bucketed_allreduce": {"2 ranks: equal to one process": "buckets2", "3 ranks: equal to one process": "buckets3",
                                  "3 ranks: bucket sizes": "buckets3", "3 ranks: overlap": "buckets3"},
}
CHECKS = [c for part in PARTS.values() for c in part]
TIME_LIMIT_S = 240


def build(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 48), nn.Tanh(),
                         nn.Linear(48, 10))


def batch(seed: int, g: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed + 1000)
    return torch.randn(g, 32, generator=gen), torch.randint(0, 10, (g,), generator=gen)


def sgd(model: nn.Module) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= LR * p.grad
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def program(rank: int, world_size: int, case: dict, student: gradekit.StudentCode) -> dict:
    """One data-parallel rank's training (runs in a rank's process): attach once, then `steps`
    steps on the global batches of seeds seed, seed + 1, ... (gradients set to None before each,
    as zero_grad does)."""
    ex = case["exercise"]
    fn = student.load()[FUNCTION[ex]]
    model, timeline, marks, backward = build(case["seed"]), [], [], []
    b = case["global_batch"] // world_size
    finish = fn(model, case["cap"], timeline) if ex == "buckets" else fn(model, timeline) if ex == "overlap" else None
    for step in range(case["steps"]):
        x, y = batch(case["seed"] + step, case["global_batch"])
        for p in model.parameters():
            p.grad = None
        loss = F.cross_entropy(model(x[rank * b:(rank + 1) * b]), y[rank * b:(rank + 1) * b])
        t0 = time.perf_counter()
        loss.backward()
        t1 = time.perf_counter()
        if ex == "plain":
            fn(model)
        else:
            finish()
        params = sgd(model)
        marks.append(len(timeline))
        backward.append([t0, t1])
    return {"params": params, "timeline": [list(e) if isinstance(e, (tuple, list)) else e for e in timeline],
            "marks": marks, "backward": backward}


def reference(case: dict) -> dict:
    model = build(case["seed"])
    for step in range(case["steps"]):
        x, y = batch(case["seed"] + step, case["global_batch"])
        for p in model.parameters():
            p.grad = None
        F.cross_entropy(model(x), y).backward()
        params = sgd(model)
    return params


def bucket_bytes(case: dict) -> list[int]:
    """The rule's bucket sizes in bytes, in the order they fill."""
    sizes, current = [], 0
    for p in reversed(list(build(case["seed"]).parameters())):
        current += p.numel() * p.element_size()
        if current >= case["cap"]:
            sizes.append(current)
            current = 0
    return sizes + ([current] if current else [])


def _equal(results, case) -> str:
    want = reference(case)
    for r in results:
        off = gradekit.params_off(r.value["params"], want, TOL)
        if off:
            return (f"rank {r.rank}: after {case['steps']} steps {off}, against the same steps on the whole global "
                    "batch in one process")
    return "ok"


def _buckets(results, case) -> str:
    want = bucket_bytes(case) * case["steps"]
    for r in results:
        other = [c["op"] for c in r.calls if c["op"] != "all_reduce"]
        if other:
            return f"rank {r.rank} called {other[0]}: the gradients need only allreduces"
        got = [c["bytes"] for c in r.calls]
        if sorted(got) != sorted(want):
            what = f"the buckets of {case['cap']} bytes hold" if case["cap"] > 1 else "the gradients hold"
            return (f"rank {r.rank} allreduced {len(got)} tensors of {sorted(got)} bytes in {case['steps']} steps; "
                    f"{what} {sorted(want)}")
    return "ok"


def _overlap(results, case) -> str:
    """In every step: each bucket started and ended once, one started inside that step's backward
    by the student's timeline and by the counters' own log."""
    n = len(bucket_bytes(case))
    for r in results:
        timeline, marks = r.value["timeline"], r.value["marks"]
        events = [e for e in timeline if isinstance(e, list) and len(e) == 3]
        if len(events) != len(timeline):
            return f"rank {r.rank}: timeline entries must be (event, bucket, time), got {timeline[:2]}"
        for step, ((t0, t1), lo, hi) in enumerate(zip(r.value["backward"], [0] + marks[:-1], marks)):
            mine = events[lo:hi]
            starts = sorted(e[1] for e in mine if e[0] == "start")
            ends = sorted(e[1] for e in mine if e[0] == "end")
            if starts != list(range(n)) or ends != list(range(n)):
                return (f"rank {r.rank}, step {step}: the timeline should start and end each of the {n} buckets "
                        f"once; it has starts {starts} and ends {ends}")
            early = [e for e in mine if e[0] == "start" and t0 <= e[2] < t1]
            logged = [c for c in r.calls if c["op"] == "all_reduce" and t0 <= c["t0"] < t1]
            if not early or not logged:
                first = min((e[2] for e in mine if e[0] == "start"), default=float("nan"))
                return (f"rank {r.rank}, step {step}: no bucket's allreduce started before the backward ended "
                        f"(the first started {(first - t1) * 1e3:.1f} ms after it)")
    return "ok"


def _judge(check: str, results, case) -> str:
    if check.endswith("overlap"):
        return _overlap(results, case)
    return _equal(results, case) if check.endswith("equal to one process") else _buckets(results, case)


def grade(student: gradekit.StudentCode, part: str) -> dict[str, str]:
    """{check: "ok" or why not} for one exercise (PARTS), in the grading process."""
    return gradekit.run_checks(program, CASES, PARTS[part], student, _judge)
