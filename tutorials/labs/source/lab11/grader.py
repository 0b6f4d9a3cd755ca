"""Lab 11's grader: exchanges that deadlock with blocking send/recv, run on gloo ranks with a
time budget (tutorials.gradekit): the fixed code must finish and move the right data.

ring      every rank holds x_r and calls the student's `ring_shift(x, rank, world_size)`, which
          must return x_{r-1} (the left neighbour's tensor, cyclically).
all       every rank holds one chunk for every rank; the student's `exchange_all(chunks, rank,
          world_size)` returns, at index p, the chunk rank p holds for it (its own at its rank).
pipeline  rank 0 holds M micro-batches; the student's `run_pipeline(rank, world_size,
          micro_batches, work)` passes each through stages 1..N-1 (stage s computes work(h, s))
          and back to rank 0, which returns the M outputs in order.

Checks, in the grading process: the run finishes within its budget; the values equal what this
module computes from the same inputs (exactly: small integers in fp32); every rank sent and
received exactly the bytes the exchange needs, point to point; and, for the pipeline, rank 0 put
its second micro-batch on the wire before its first output had come back (the pipeline holds
more than one micro-batch at a time).
"""
from __future__ import annotations

import torch

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
}
PARTS = {
    "ring_shift": {"2 ranks": "ring2", "3 ranks": "ring3", "4 ranks": "ring4"},
    "exchange_all": {"2 ranks": "all2", "4 ranks": "all4"},
    "run_pipeline": {"2 ranks x 4 micro-batches": "pipe2", "3 ranks x 5 micro-batches": "pipe3",
                     "4 ranks x 6 micro-batches": "pipe4", "4 ranks: micro-batches in flight": "pipe4"},
}
CHECKS = [c for part in PARTS.values() for c in part]
TIME_LIMIT_S = 240


def tensor_of(seed: int, rank: int, m: int = 0) -> torch.Tensor:
    """Rank `rank`'s tensor (micro-batch m): small integers, exact in fp32."""
    return torch.arange(NUMEL, dtype=torch.float32) + 100 * rank + 10 * m + seed


def work(h: torch.Tensor, stage: int) -> torch.Tensor:
    """What pipeline stage `stage` computes on a micro-batch (the exercise's `work`)."""
    return h * 2 + stage


def program(rank: int, world_size: int, case: dict, student: gradekit.StudentCode):
    """One rank (runs in a rank's process)."""
    fns = student.load()
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


def _judge(check: str, results, case) -> str:
    if case["exercise"] == "ring":
        return _ring(results, case)
    if case["exercise"] == "all":
        return _all(results, case)
    return _in_flight(results, case) if check.endswith("in flight") else _pipeline(results, case)


def grade(student: gradekit.StudentCode, part: str) -> dict[str, str]:
    """{check: "ok" or why not} for one exercise (PARTS), in the grading process."""
    return gradekit.run_checks(program, CASES, PARTS[part], student, _judge)
