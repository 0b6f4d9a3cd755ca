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

ddp    the student's class `DDP(model, bucket_cap_bytes, timeline)` with `finish()`: every rank
       builds the model with an unused parameter from its own seed (seed + 7919 rank), so DDP
       must broadcast rank 0's parameters first; DDP_STEPS steps. Checks: parameters equal the
       one-process steps from rank 0's initial model; each rank broadcast the model's bytes
       once, before its first allreduce; the buckets (unused parameter included) and the overlap
       as above, in every step.
zero1  the student's `zero1_step(model, state, lr, momentum)` after each backward: SGD with
       momentum, its momentum sharded over the ranks (ZeRO stage 1); DDP_STEPS steps. Checks:
       parameters equal torch.optim.SGD(momentum=MOMENTUM) in one process on the whole batches;
       the collectives each rank ran, as the counters logged them, are ZeRO's: every step a
       reduce-scatter that leaves the rank its shard of the gradients and an all-gather of the
       whole flattened parameters, nothing else that moves bytes (a full allreduce fails); every
       tensor the rank keeps alive between steps beside the parameters and their gradients (in
       `state`, anywhere in the model's modules, hooks and parameters' attributes, in the
       student's function's globals, closure, defaults and attributes; each storage counted once,
       whole) holds at most its share of the momentum (the model's numel / N, plus one element
       per parameter of rounding), every step.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from tutorials import gradekit

LR = 0.1
STEPS = 3  # every case trains this many steps: hooks attached once must serve every step
DDP_STEPS = 5  # the DDP class and ZeRO-1
MOMENTUM = 0.9
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
    "try_ddp": dict(exercise="ddp", world_size=2, global_batch=4, seed=3, cap=8192, steps=DDP_STEPS, budget_s=20.0),
    "ddp2": dict(exercise="ddp", world_size=2, global_batch=6, seed=35, cap=20000, steps=DDP_STEPS, budget_s=20.0),
    "ddp3": dict(exercise="ddp", world_size=3, global_batch=6, seed=36, cap=2000, steps=DDP_STEPS, budget_s=20.0),
    "try_zero1": dict(exercise="zero1", world_size=2, global_batch=4, seed=4, cap=1, steps=DDP_STEPS, budget_s=20.0),
    "zero2": dict(exercise="zero1", world_size=2, global_batch=6, seed=37, cap=1, steps=DDP_STEPS, budget_s=20.0),
    "zero3": dict(exercise="zero1", world_size=3, global_batch=9, seed=38, cap=1, steps=DDP_STEPS, budget_s=20.0),
}
FUNCTION = {"plain": "allreduce_gradients", "overlap": "attach_overlapped_allreduce", "buckets": "attach_bucketed_allreduce",
            "ddp": "DDP", "zero1": "zero1_step"}
PARTS = {
    "allreduce_gradients": {"3 ranks: equal to one process": "plain3", "3 ranks: one allreduce per gradient": "plain3"},
    "attach_overlapped_allreduce": {"3 ranks: equal to one process": "overlap3",
                                    "3 ranks: one allreduce per gradient": "overlap3", "3 ranks: overlap": "overlap3"},
    "attach_bucketed_allreduce": {"2 ranks: equal to one process": "buckets2", "3 ranks: equal to one process": "buckets3",
                                  "3 ranks: bucket sizes": "buckets3", "3 ranks: overlap": "buckets3"},
    "DDP": {"2 ranks: equal to one process": "ddp2", "3 ranks: equal to one process": "ddp3",
            "3 ranks: broadcast": "ddp3", "3 ranks: bucket sizes": "ddp3", "3 ranks: overlap": "ddp3"},
    "zero1_step": {"2 ranks: equal to one process": "zero2", "3 ranks: equal to one process": "zero3",
                   "3 ranks: reduce-scatter and all-gather": "zero3", "3 ranks: optimizer state sharded": "zero3"},
}
CHECKS = [c for part in PARTS.values() for c in part]
TIME_LIMIT_S = 240


def build(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 48), nn.Tanh(),
                         nn.Linear(48, 10))


class WithUnused(nn.Module):
    """The DDP exercise's model: `unused` takes part in no forward (its gradient stays None)."""

    def __init__(self):
        super().__init__()
        self.l1, self.unused, self.l2, self.l3 = nn.Linear(32, 64), nn.Linear(64, 64), nn.Linear(64, 48), nn.Linear(48, 10)

    def forward(self, x):
        return self.l3(torch.tanh(self.l2(torch.tanh(self.l1(x)))))


def build_case(case: dict, rank: int = 0) -> nn.Module:
    if case["exercise"] != "ddp":
        return build(case["seed"])
    torch.manual_seed(case["seed"] + 7919 * rank)  # every rank its own initial parameters
    return WithUnused()


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
    model, timeline, marks, backward, state, held = build_case(case, rank), [], [], [], {}, []
    b = case["global_batch"] // world_size
    finish = (fn(model, case["cap"], timeline) if ex == "buckets" else fn(model, timeline) if ex == "overlap"
              else fn(model, case["cap"], timeline).finish if ex == "ddp" else None)
    for step in range(case["steps"]):
        x, y = batch(case["seed"] + step, case["global_batch"])
        for p in model.parameters():
            p.grad = None
        loss = F.cross_entropy(model(x[rank * b:(rank + 1) * b]), y[rank * b:(rank + 1) * b])
        t0 = time.perf_counter()
        loss.backward()
        t1 = time.perf_counter()
        if ex == "zero1":
            fn(model, state, LR, MOMENTUM)  # the student's optimizer step
            params = {n: p.detach().clone() for n, p in model.named_parameters()}
            held.append(kept_elements(model, state, fn))
        else:
            fn(model) if ex == "plain" else finish()
            params = sgd(model)
        marks.append(len(timeline))
        backward.append([t0, t1])
    return {"params": params, "timeline": [list(e) if isinstance(e, (tuple, list)) else e for e in timeline],
            "marks": marks, "backward": backward, "held": held}


def kept_elements(model: nn.Module, state, fn) -> int:
    """Elements of every tensor storage the rank keeps alive between steps beside the parameters
    and their gradients, wherever the student's code can keep one: `state`, the model (every
    module's attributes and hooks, every parameter's own attributes) and the student's function
    (its globals, closure, defaults and attributes). A view counts its whole storage, once."""
    import types
    own = {t.untyped_storage().data_ptr() for p in model.parameters() for t in (p, p.grad) if t is not None}
    seen, storages, total = set(), set(), 0
    todo = [state, model, fn]
    while todo:
        v = todo.pop()
        if id(v) in seen or isinstance(v, (types.ModuleType, type, str, bytes, int, float, bool, type(None))):
            continue
        seen.add(id(v))
        if isinstance(v, torch.Tensor):
            ptr = v.untyped_storage().data_ptr()
            if ptr not in own and ptr not in storages:
                storages.add(ptr)
                total += v.untyped_storage().nbytes() // max(v.element_size(), 1)
            todo += list(vars(v).values()) if hasattr(v, "__dict__") else []
        elif isinstance(v, dict):
            todo += list(v.keys()) + list(v.values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            todo += list(v)
        elif isinstance(v, types.FunctionType):
            todo += [v.__globals__, v.__defaults__ or (), v.__kwdefaults__ or {}, vars(v)]
            todo += [c.cell_contents for c in v.__closure__ or () if _filled(c)]
        elif isinstance(v, types.MethodType):
            todo += [v.__func__, v.__self__]
        elif hasattr(v, "__dict__"):
            todo.append(vars(v))
    return total


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


REDUCE_SCATTER = ("reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single")
ALL_GATHER = ("all_gather", "all_gather_into_tensor", "all_gather_single")


def reference(case: dict) -> dict:
    model = build_case(case)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM) if case["exercise"] == "zero1" else None
    for step in range(case["steps"]):
        x, y = batch(case["seed"] + step, case["global_batch"])
        for p in model.parameters():
            p.grad = None
        F.cross_entropy(model(x), y).backward()
        if opt:
            opt.step()
            params = {n: p.detach().clone() for n, p in model.named_parameters()}
        else:
            params = sgd(model)
    return params


def bucket_bytes(case: dict) -> list[int]:
    """The rule's bucket sizes in bytes, in the order they fill."""
    sizes, current = [], 0
    for p in reversed(list(build_case(case).parameters())):
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
        other = [c["op"] for c in r.calls if c["op"] != "all_reduce" and not (c["op"] == "broadcast" and case["exercise"] == "ddp")]
        if other:
            return f"rank {r.rank} called {other[0]}: the gradients need only allreduces"
        got = [c["bytes"] for c in r.calls if c["op"] == "all_reduce"]
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


def _broadcast(results, case) -> str:
    """Rank 0's parameters, broadcast once, before any allreduce."""
    want = sum(p.numel() * p.element_size() for p in build_case(case).parameters())
    for r in results:
        sent = [c for c in r.calls if c["op"] == "broadcast"]
        if sum(c["bytes"] for c in sent) != want:
            return f"rank {r.rank} broadcast {sum(c['bytes'] for c in sent)} bytes; the model's parameters hold {want}"
        first = next((c["t0"] for c in r.calls if c["op"] == "all_reduce"), float("inf"))
        if max(c["t0"] for c in sent) > first:
            return f"rank {r.rank} broadcast parameters after its first allreduce: the first step ran on unequal models"
    return "ok"


def _sharded(results, case) -> str:
    n = sum(p.numel() for p in build_case(case).parameters())
    share = -(-n // case["world_size"]) + len(list(build_case(case).parameters()))
    for r in results:
        held = r.value["held"]
        if not held or max(held) > share or min(held) == 0:
            return (f"rank {r.rank} kept {held} elements alive between steps beside the parameters and their "
                    f"gradients (state, model, its own namespace); its share of the momentum of {n} "
                    f"parameters over {case['world_size']} ranks is at most {share}")
    return "ok"


def _zero_collectives(results, case) -> str:
    """Every step: reduce-scatters that leave the rank at least its shard of the gradients (at
    most one element per parameter of padding more), all-gathers of the whole flattened
    parameters (as much padding), and no other call that moves bytes."""
    params = list(build_case(case).parameters())
    n, world, steps = sum(p.numel() for p in params), case["world_size"], case["steps"]
    share, pad = -(-n // world), len(params)
    for r in results:
        other = [c for c in r.calls if c["op"] not in REDUCE_SCATTER + ALL_GATHER and c["bytes"] > 0]
        if other:
            return (f"rank {r.rank} called {other[0]['op']} on {other[0]['bytes']} bytes: ZeRO-1 moves the gradients "
                    "by reduce-scatter and the parameters by all-gather only")
        got = {what: sum(c["bytes"] for c in r.calls if c["op"] in ops) // 4
               for what, ops in (("reduce-scatter", REDUCE_SCATTER), ("all-gather", ALL_GATHER))}
        want = {"reduce-scatter": (n / world, share + pad), "all-gather": (n, world * (share + pad))}
        for what, (lo, hi) in want.items():
            if not lo * steps <= got[what] <= hi * steps:
                return (f"rank {r.rank}'s {what}s received {got[what]} elements in {steps} steps; ZeRO-1 needs "
                        f"{'its shard' if what == 'reduce-scatter' else 'all'} of the {n} gradients' elements "
                        f"({lo:g} to {hi:g}) every step")
    return "ok"


def _judge(check: str, results, case) -> str:
    if check.endswith("reduce-scatter and all-gather"):
        return _zero_collectives(results, case)
    if check.endswith("broadcast"):
        return _broadcast(results, case)
    if check.endswith("sharded"):
        return _sharded(results, case)
    if check.endswith("overlap"):
        return _overlap(results, case)
    return _equal(results, case) if check.endswith("equal to one process") else _buckets(results, case)


def grade(student: gradekit.StudentCode, part: str) -> dict[str, str]:
    """{check: "ok" or why not} for one exercise (PARTS), in the grading process."""
    return gradekit.run_checks(program, CASES, PARTS[part], student, _judge)
