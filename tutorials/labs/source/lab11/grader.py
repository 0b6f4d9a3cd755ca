"""Lab 11's grader: exchanges that deadlock with blocking send/recv, run on gloo ranks with a
time budget (tutorials.gradekit): the fixed code must finish and move the right data.

ring      every rank holds x_r and calls the student's `ring_shift(x, rank, world_size)`, which
          must return x_{r-1} (the left neighbour's tensor, cyclically).
all       every rank holds one chunk for every rank; the student's `exchange_all(chunks, rank,
          world_size)` returns, at index p, the chunk rank p holds for it (its own at its rank).
pipeline  rank 0 holds M micro-batches; the student's `run_pipeline(rank, world_size,
          micro_batches, work)` passes each through stages 1..N-1 (stage s computes work(h, s))
          and back to rank 0, which returns the M outputs in order.
gpipe     a real pipeline: an MLP cut into S = N stages, rank s holds stage s; the student's
          `gpipe_step(stage, rank, world_size, plan)` runs the forward and the backward of M
          micro-batches (GPipe: every forward, then every backward) and leaves the gradient of the
          mean loss over the global batch in the stage's `.grad`; this program takes STEPS SGD
          steps. Each stage's forward and backward of one micro-batch take STAGE_S seconds (a
          sleep inside the stage, logged by this program on the rank's timeline).
ps        a sharded parameter server, colocated: parameter j of the MLP lives on rank j mod N. The
          student's `attach_sharded_ps(model, lr)` registers hooks once and returns `finish`; each
          step every rank pushes each gradient to its owner from inside the backward (isend), the
          owner averages and updates, and every rank pulls the updated parameters. Checks: the
          parameters after STEPS steps equal one process; the bytes pushed and pulled point to
          point; in every step a push started before the backward ended (the counters' log).

Checks, in the grading process: the run finishes within its budget; the values equal what this
module computes from the same inputs (exactly: small integers in fp32); every rank sent and
received exactly the bytes the exchange needs, point to point; and, for the pipeline, rank 0 put
its second micro-batch on the wire before its first output had come back (the pipeline holds
more than one micro-batch at a time). For gpipe: the parameters after STEPS steps equal the same
steps of the whole model on the whole global batches in one process (within TOL); every stage
ran M forwards and M backwards per step; the bytes sent and received point to point are the
activations and their gradients, once each; the bubble fraction, measured from the ranks'
timelines, is GPipe's (S-1)/(M+S-1): exactly for the schedule the timelines show, replayed with
unit stage times, and nearer it than to one micro-batch at a time's 1 - 1/S for the clocks' own.
"""
from __future__ import annotations

from fractions import Fraction
import time
import types

import torch
import torch.nn.functional as F
from torch import nn

from tutorials import gradekit

NUMEL = 6
CASES = {  # a correct exchange takes milliseconds: the budget is for a loaded laptop
    "try_ring": dict(exercise="ring", world_size=2, seed=0, budget_s=5.0),
    "try_all": dict(exercise="all", world_size=3, seed=0, budget_s=5.0),
    "try_pipeline": dict(exercise="pipeline", world_size=2, micro_batches=3, seed=0, budget_s=5.0),
    "ring2": dict(exercise="ring", world_size=2, seed=41, budget_s=5.0),
    "ring3": dict(exercise="ring", world_size=3, seed=42, budget_s=5.0),
    "ring4": dict(exercise="ring", world_size=4, seed=43, budget_s=5.0),
    "all2": dict(exercise="all", world_size=2, seed=44, budget_s=5.0),
    "all4": dict(exercise="all", world_size=4, seed=45, budget_s=5.0),
    "pipe2": dict(exercise="pipeline", world_size=2, micro_batches=4, seed=46, budget_s=5.0),
    "pipe3": dict(exercise="pipeline", world_size=3, micro_batches=5, seed=47, budget_s=5.0),
    "pipe4": dict(exercise="pipeline", world_size=4, micro_batches=6, seed=48, budget_s=5.0),
    # gpipe: S = world_size stages, M micro-batches of `micro_batch` samples, STEPS steps
    "try_gpipe": dict(exercise="gpipe", world_size=2, micro_batches=3, micro_batch=2, seed=0, budget_s=20.0),
    "gpipe2": dict(exercise="gpipe", world_size=2, micro_batches=4, micro_batch=3, seed=49, budget_s=20.0),
    "gpipe3": dict(exercise="gpipe", world_size=3, micro_batches=4, micro_batch=2, seed=50, budget_s=20.0),
    # ps: the MLP's parameters sharded over the ranks (parameter j on rank j mod N), STEPS steps
    "try_ps": dict(exercise="ps", world_size=2, global_batch=4, seed=0, budget_s=20.0),
    "ps2": dict(exercise="ps", world_size=2, global_batch=6, seed=51, budget_s=20.0),
    "ps3": dict(exercise="ps", world_size=3, global_batch=6, seed=52, budget_s=20.0),
}
PARTS = {
    "ring_shift": {"2 ranks": "ring2", "3 ranks": "ring3", "4 ranks": "ring4"},
    "exchange_all": {"2 ranks": "all2", "4 ranks": "all4"},
    "run_pipeline": {"2 ranks x 4 micro-batches": "pipe2", "3 ranks x 5 micro-batches": "pipe3",
                     "4 ranks x 6 micro-batches": "pipe4", "4 ranks: micro-batches in flight": "pipe4"},
    "gpipe_step": {"2 stages x 4 micro-batches: equal to one process": "gpipe2",
                   "3 stages x 4 micro-batches: equal to one process": "gpipe3",
                   "3 stages x 4 micro-batches: bytes": "gpipe3", "3 stages x 4 micro-batches: bubble": "gpipe3"},
    "attach_sharded_ps": {"2 ranks: equal to one process": "ps2", "3 ranks: equal to one process": "ps3",
                          "3 ranks: bytes": "ps3", "3 ranks: push overlapped with the backward": "ps3"},
}
CHECKS = [c for part in PARTS.values() for c in part]
TIME_LIMIT_S = 240
LR = 0.1
STEPS = 3  # gpipe: SGD steps per case
TOL = 1e-6  # fp32: micro-batches sum the loss in another order (measured: below 1e-7)
STAGE_S = 0.02  # gpipe: one stage's forward (and backward) of one micro-batch, slept on the rank
# The bubble is judged twice. Replayed: the schedule the stages' timelines show, every forward and
# backward one unit, must have GPipe's (S-1)/(M+S-1) exactly (1F1B has it too). Measured: 1 - busy /
# (S x span) from the timelines' clocks, mean of the steps after the first (the first also opens
# gloo's connections: measured 0.83 against 0.37 after), must lie nearer (S-1)/(M+S-1) (1/3 for
# S = 3, M = 4) than one micro-batch at a time's 1 - 1/S (2/3): each hop adds ~1 ms to a 20 ms stage
# on an idle machine (measured 0.376, 0.368), more on a loaded one (0.415, 0.420 with 30 ms stages).
WIDTH, IN, OUT = 16, 12, 10


def tensor_of(seed: int, rank: int, m: int = 0) -> torch.Tensor:
    """Rank `rank`'s tensor (micro-batch m): small integers, exact in fp32."""
    return torch.arange(NUMEL, dtype=torch.float32) + 100 * rank + 10 * m + seed


def work(h: torch.Tensor, stage: int) -> torch.Tensor:
    """What pipeline stage `stage` computes on a micro-batch (the exercise's `work`)."""
    return h * 2 + stage


def build(seed: int, stages: int) -> list[nn.Module]:
    """The MLP cut into `stages` stages (the same on every rank for one seed)."""
    torch.manual_seed(seed)
    parts = [nn.Sequential(nn.Linear(IN if s == 0 else WIDTH, WIDTH), nn.Tanh()) for s in range(stages)]
    parts[-1].append(nn.Linear(WIDTH, OUT))
    return parts


def gpipe_batch(seed: int, g: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed + 1000)
    return torch.randn(g, IN, generator=gen), torch.randint(0, OUT, (g,), generator=gen)


class _Busy(torch.autograd.Function):
    """Identity at a stage's output: its backward sleeps STAGE_S and logs ["B", micro-batch, t0, t1]."""

    @staticmethod
    def forward(ctx, out, log, m):
        ctx.log, ctx.m = log, m
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        t0 = time.perf_counter()
        time.sleep(STAGE_S)
        ctx.log.append(["B", ctx.m, t0, time.perf_counter()])
        return grad, None, None


class Stage(nn.Module):
    """A rank's stage as the student gets it: its k-th forward of a step is micro-batch k (they
    arrive in order); it sleeps STAGE_S and logs ["F", micro-batch, t0, t1]."""

    def __init__(self, body: nn.Module, log: list):
        super().__init__()
        self.body, self.log, self.count = body, log, 0

    def forward(self, h):
        t0, m = time.perf_counter(), self.count
        self.count += 1
        time.sleep(STAGE_S)
        out = _Busy.apply(self.body(h), self.log, m)
        self.log.append(["F", m, t0, time.perf_counter()])
        return out


def _gpipe(rank: int, world_size: int, case: dict, fn) -> dict:
    m, mb, seed = case["micro_batches"], case["micro_batch"], case["seed"]
    log: list = []
    stage = Stage(build(seed, world_size)[rank], log)
    marks = []
    for step in range(STEPS):
        x, y = gpipe_batch(seed + step, m * mb)
        plan = types.SimpleNamespace(
            micro_batches=m, micro_batch=mb, global_batch=m * mb,
            in_shape=(IN if rank == 0 else WIDTH,), out_shape=(OUT if rank == world_size - 1 else WIDTH,),
            inputs=list(x.split(mb)) if rank == 0 else None,
            targets=list(y.split(mb)) if rank == world_size - 1 else None)
        for p in stage.parameters():
            p.grad = None
        stage.count = 0
        fn(stage, rank, world_size, plan)
        with torch.no_grad():
            for p in stage.parameters():
                if p.grad is not None:
                    p -= LR * p.grad
        marks.append(len(log))
    return {"params": {n: p.detach().clone() for n, p in stage.body.named_parameters()}, "timeline": log,
            "marks": marks}


def _ps(rank: int, world_size: int, case: dict, fn) -> dict:
    model = nn.Sequential(*build(case["seed"], 2))
    b, backward = case["global_batch"] // world_size, []
    finish = fn(model, LR)  # once: the hooks serve every step
    for step in range(STEPS):
        x, y = gpipe_batch(case["seed"] + step, case["global_batch"])
        for p in model.parameters():
            p.grad = None
        loss = F.cross_entropy(model(x[rank * b:(rank + 1) * b]), y[rank * b:(rank + 1) * b])
        t0 = time.perf_counter()
        loss.backward()
        backward.append([t0, time.perf_counter()])
        finish()
    return {"params": {n: p.detach().clone() for n, p in model.named_parameters()}, "backward": backward}


def program(rank: int, world_size: int, case: dict, student: gradekit.StudentCode):
    """One rank (runs in a rank's process)."""
    fns = student.load()
    if case["exercise"] == "ps":
        return _ps(rank, world_size, case, fns["attach_sharded_ps"])
    if case["exercise"] == "gpipe":
        return _gpipe(rank, world_size, case, fns["gpipe_step"])
    if case["exercise"] == "ring":
        return fns["ring_shift"](tensor_of(case["seed"], rank), rank, world_size)
    if case["exercise"] == "all":
        return fns["exchange_all"]([tensor_of(case["seed"], rank, p) for p in range(world_size)], rank, world_size)
    m = case["micro_batches"]
    mbs = [tensor_of(case["seed"], 0, i) if rank == 0 else torch.zeros(NUMEL) for i in range(m)]
    return fns["run_pipeline"](rank, world_size, mbs, work)


def _traffic(results, sent: list[int], recv: list[int]) -> str:
    for r in results:
        other = [c["op"] for c in r.calls if c["op"] not in ("send", "isend", "recv", "irecv")]
        if other:
            return f"rank {r.rank} called {other[0]}: this exchange needs point-to-point operations only"
        got = (r.bytes("send", "isend"), r.bytes("recv", "irecv"))
        if got != (sent[r.rank], recv[r.rank]):
            return (f"rank {r.rank} sent {got[0]} and received {got[1]} bytes; the exchange needs "
                    f"{sent[r.rank]} and {recv[r.rank]}")
    return "ok"


def _ring(results, case) -> str:
    n, seed = case["world_size"], case["seed"]
    for r in results:
        want = tensor_of(seed, (r.rank - 1) % n)
        if not isinstance(r.value, torch.Tensor) or r.value.shape != want.shape or not torch.equal(r.value, want):
            return f"rank {r.rank} returned {r.value!r:.80}, expected rank {(r.rank - 1) % n}'s tensor {want.tolist()}"
    nbytes = NUMEL * 4
    return _traffic(results, [nbytes] * n, [nbytes] * n)


def _all(results, case) -> str:
    n, seed = case["world_size"], case["seed"]
    for r in results:
        got = r.value
        if not isinstance(got, (list, tuple)) or len(got) != n:
            return f"rank {r.rank} returned {got!r:.80}, expected a list of {n} tensors"
        for p, g in enumerate(got):
            want = tensor_of(seed, p, r.rank)
            if not isinstance(g, torch.Tensor) or g.shape != want.shape or not torch.equal(g, want):
                return f"rank {r.rank}'s entry {p} is {g!r:.80}, expected rank {p}'s chunk for it, {want.tolist()}"
    nbytes = (n - 1) * NUMEL * 4
    return _traffic(results, [nbytes] * n, [nbytes] * n)


def _pipeline(results, case) -> str:
    n, m, seed = case["world_size"], case["micro_batches"], case["seed"]
    want = []
    for i in range(m):
        h = tensor_of(seed, 0, i)
        for s in range(1, n):
            h = work(h, s)
        want.append(h)
    got = results[0].value
    if not isinstance(got, (list, tuple)) or len(got) != m:
        return f"rank 0 returned {got!r:.80}, expected a list of the {m} outputs"
    for i, (g, w) in enumerate(zip(got, want)):
        if not isinstance(g, torch.Tensor) or g.shape != w.shape or not torch.equal(g, w):
            return f"rank 0's output {i} is {g!r:.80}, expected {w.tolist()}"
    nbytes = m * NUMEL * 4
    return _traffic(results, [nbytes] * n, [nbytes] * n)


def _in_flight(results, case) -> str:
    calls = results[0].calls
    sends = [c for c in calls if c["op"] in ("send", "isend")]
    recvs = [c for c in calls if c["op"] in ("recv", "irecv")]
    if len(sends) < 2 or not recvs:
        return f"rank 0 made {len(sends)} sends and {len(recvs)} receives; it has {case['micro_batches']} micro-batches"
    first_back = recvs[0]["t1"] if recvs[0]["op"] == "recv" else recvs[0].get("t_wait") or float("inf")
    if sends[1]["t0"] < first_back:
        return "ok"
    return ("rank 0 sent its second micro-batch only after its first output had come back: one micro-batch at a "
            "time is not a pipeline")


def reference(case: dict) -> list[dict]:
    """Each stage's parameters (ps: the model's, in a list of one) after STEPS SGD steps of the whole
    model on the whole global batches."""
    stages = build(case["seed"], 2 if case["exercise"] == "ps" else case["world_size"])
    model = nn.Sequential(*stages)
    for step in range(STEPS):
        g = case["global_batch"] if case["exercise"] == "ps" else case["micro_batches"] * case["micro_batch"]
        x, y = gpipe_batch(case["seed"] + step, g)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= LR * p.grad
    if case["exercise"] == "ps":
        return [{n: p.detach().clone() for n, p in model.named_parameters()}]
    return [{n: p.detach().clone() for n, p in s.named_parameters()} for s in stages]


def _ps_equal(results, case) -> str:
    want = reference(case)[0]
    for r in results:
        off = gradekit.params_off(r.value["params"], want, TOL)
        if off:
            return (f"rank {r.rank}: after {STEPS} steps {off}, against the same steps on the whole global batch in "
                    "one process")
    return "ok"


def _ps_bytes(results, case) -> str:
    n = case["world_size"]
    sizes = [p.numel() * p.element_size() for p in nn.Sequential(*build(case["seed"], 2)).parameters()]
    owned = [sum(b for j, b in enumerate(sizes) if j % n == r) for r in range(n)]
    per_rank = [STEPS * (sum(sizes) - owned[r] + (n - 1) * owned[r]) for r in range(n)]  # push + pull, both ways
    return _traffic(results, per_rank, per_rank)


def _ps_overlap(results, case) -> str:
    for r in results:
        for step, (t0, t1) in enumerate(r.value["backward"]):
            if not any(c["op"] == "isend" and t0 <= c["t0"] < t1 for c in r.calls):
                return (f"rank {r.rank}, step {step}: no gradient was pushed (isend) before the backward ended: "
                        "the push does not overlap the backward")
    return "ok"


def _gpipe_equal(results, case) -> str:
    want = reference(case)
    for r in results:
        off = gradekit.params_off(r.value["params"], want[r.rank], TOL)
        if off:
            return (f"stage {r.rank}: after {STEPS} steps {off}, against the same steps of the whole model on the "
                    "whole global batch in one process")
    return "ok"


def _gpipe_bytes(results, case) -> str:
    n, per = case["world_size"], case["micro_batches"] * case["micro_batch"] * 4
    forward = [per * WIDTH if s < n - 1 else 0 for s in range(n)]  # stage s sends its activations on
    backward = [per * (IN if s == 0 else WIDTH) if s > 0 else 0 for s in range(n)]  # and their gradients back
    sent = [forward[s] + backward[s] for s in range(n)]
    recv = [(forward[s - 1] if s > 0 else 0) + (backward[s + 1] if s < n - 1 else 0) for s in range(n)]
    return _traffic(results, [STEPS * b for b in sent], [STEPS * b for b in recv])


def step_windows(results) -> list[list[list]]:
    """Per step, every rank's busy intervals [kind, t0, t1] (the stages' own log)."""
    out = []
    for step in range(STEPS):
        out.append([[e for e in r.value["timeline"][([0] + r.value["marks"])[step]:r.value["marks"][step]]]
                    for r in results])
    return out


def bubble(windows: list[list]) -> float:
    """1 - (busy time over the ranks) / (ranks x the step's span): the step's measured bubble fraction."""
    spans = [e for rank in windows for e in rank]
    span = max(e[3] for e in spans) - min(e[2] for e in spans)
    return 1 - sum(e[3] - e[2] for e in spans) / (len(windows) * span)


def replayed_bubble(windows: list[list]) -> Fraction | str:
    """The bubble fraction of the schedule the ranks ran: each stage's forwards and backwards in the
    order its timeline shows, every one taking one unit, a forward of micro-batch m waiting for the
    previous stage's, a backward for the next stage's (exact; a string if the order cannot be run)."""
    n = len(windows)
    order = [[(e[0], e[1]) for e in sorted(events, key=lambda e: e[2])] for events in windows]
    where = {(s, kind, m): i for s, events in enumerate(order) for i, (kind, m) in enumerate(events)}
    done: dict = {}
    for _ in range(sum(len(o) for o in order) + 1):  # relax until every event has its finish time
        for s, events in enumerate(order):
            for i, (kind, m) in enumerate(events):
                if (s, i) in done:
                    continue
                dep = (s - 1, "F", m) if kind == "F" and s > 0 else (s + 1, "B", m) if kind == "B" and s < n - 1 else None
                if dep is not None and dep not in where:
                    return f"stage {s}'s {'forward' if kind == 'F' else 'backward'} of micro-batch {m} has no partner on stage {dep[0]}"
                before = [done.get((s, i - 1))] if i else [0]
                if dep is not None:
                    before.append(done.get((dep[0], where[dep])))
                if None not in before:
                    done[(s, i)] = max(before) + 1
    if len(done) < sum(len(o) for o in order):
        return "the stages' orders wait on each other in a cycle"
    busy = sum(len(o) for o in order)
    return 1 - Fraction(busy, n * max(done.values()))


def _gpipe_bubble(results, case) -> str:
    s, m = case["world_size"], case["micro_batches"]
    want, sequential = Fraction(s - 1, m + s - 1), 1 - Fraction(1, s)
    measured = []
    for step, windows in enumerate(step_windows(results)):
        for rank, events in enumerate(windows):
            kinds = sorted((e[0], e[1]) for e in events)
            if kinds != [("B", i) for i in range(m)] + [("F", i) for i in range(m)]:
                return (f"stage {rank}, step {step}: forwards of micro-batches {[i for k, i in kinds if k == 'F']} and "
                        f"backwards of {[i for k, i in kinds if k == 'B']}; each of the {m} needs one of each")
        replayed = replayed_bubble(windows)
        if isinstance(replayed, str) or replayed != want:
            return (f"step {step}: the stages' order of forwards and backwards has a bubble fraction of {replayed} "
                    f"(in units of one stage's work); GPipe's (S-1)/(M+S-1) is {want}")
        measured.append(bubble(windows))
    mean = sum(measured[1:]) / len(measured[1:])  # the first step also opens gloo's connections
    if not abs(mean - want) < abs(mean - sequential):
        return (f"measured bubble fraction {mean:.3f} (mean of steps 1-{STEPS - 1}), nearer one micro-batch at a "
                f"time's 1 - 1/S = {float(sequential):.3f} than GPipe's {float(want):.3f}")
    return "ok"


def _judge(check: str, results, case) -> str:
    if case["exercise"] == "ps":
        if check.endswith("backward"):
            return _ps_overlap(results, case)
        return _ps_bytes(results, case) if check.endswith("bytes") else _ps_equal(results, case)
    if case["exercise"] == "gpipe":
        if check.endswith("bubble"):
            return _gpipe_bubble(results, case)
        return _gpipe_bytes(results, case) if check.endswith("bytes") else _gpipe_equal(results, case)
    if case["exercise"] == "ring":
        return _ring(results, case)
    if case["exercise"] == "all":
        return _all(results, case)
    return _in_flight(results, case) if check.endswith("in flight") else _pipeline(results, case)


def grade(student: gradekit.StudentCode, part: str) -> dict[str, str]:
    """{check: "ok" or why not} for one exercise (PARTS), in the grading process."""
    return gradekit.run_checks(program, CASES, PARTS[part], student, _judge)
