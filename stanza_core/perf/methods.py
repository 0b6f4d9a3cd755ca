"""The methods set beside layer separation (lecture 5), in the same units as the rest of perf:
bytes per rank and step, bytes of memory per rank, and step time in units of a stage's forward.
All modelled, from the same formulas the papers state; nothing here is measured.

  zero_memory_bytes   parameters + gradients + optimizer state one rank holds: DDP (stage 0) and
                      ZeRO stages 1-3 (Rajbhandari et al. 2020; stage 3 is PyTorch FSDP's full shard)
  zero_sent_bytes     what one rank sends per step under each stage (each receives as much)
  tensor_parallel_sent  a Megatron column-then-row pair of linear layers split over k ranks
  pipeline_schedule   the op timeline of GPipe or 1F1B with S stages and M micro-batches,
                      dependencies honoured; bubble_fraction and peak_in_flight read it
  stanza_over_ddp     the best Stanza k's throughput over DDP's (perf.predict)
  crossover_gbps      the link speed above which no Stanza k beats DDP (perf.predict), or None

    >>> zero_memory_bytes(100, 0, 4), zero_memory_bytes(100, 3, 4)   # fp32 SGD with momentum
    (Fraction(1200, 1), Fraction(300, 1))
    >>> float(bubble_fraction(pipeline_schedule(4, 8, "1f1b")))       # (S - 1) / (M + S - 1)
    0.2727272727272727
"""
from __future__ import annotations

import math
from fractions import Fraction

from .. import checks
from ..topology import fc_worker_choices
from .cluster import Cluster
from .model import predict
from .traffic import ring_share
from ..variant import Variant

# Bytes per parameter of (parameters, gradients, optimizer state). "sgd": the workbench's fp32 SGD
# with momentum (one fp32 buffer); "adam_mixed": the ZeRO paper's case, fp16 parameters and
# gradients with fp32 master parameters, momentum and variance (K = 12).
OPTIMIZERS = {"sgd": (4, 4, 4), "adam_mixed": (2, 2, 12)}
ZERO_STAGES = (0, 1, 2, 3)  # 0: DDP (everything replicated); 1: optimizer state; 2: + gradients; 3: + parameters
SCHEDULES = ("gpipe", "1f1b")


def zero_memory_bytes(params: int, stage: int, n: int, optimizer: str = "sgd") -> Fraction:
    """Bytes of parameters, gradients and optimizer state on one of n data-parallel ranks."""
    checks.positive_int("params", params)
    checks.positive_int("n", n)
    checks.one_of("stage", stage, ZERO_STAGES)
    p, g, o = OPTIMIZERS[checks.one_of("optimizer", optimizer, OPTIMIZERS)]
    per = [Fraction(x, n) if sharded else Fraction(x) for x, sharded in ((p, stage >= 3), (g, stage >= 2), (o, stage >= 1))]
    return params * sum(per)


def zero_sent_bytes(params: int, stage: int, n: int, value_bytes: int = 4) -> Fraction:
    """Bytes one rank sends per step. Stages 0-2: one allreduce's worth, 2 (n - 1) / n of the
    gradient (DDP's ring; ZeRO-1/2 split it into a reduce-scatter of the gradients and an all-gather
    of the updated parameters). Stage 3 all-gathers the parameters before the forward and again
    before the backward, then reduce-scatters the gradients: 3 (n - 1) / n, 1.5x DDP."""
    checks.one_of("stage", stage, ZERO_STAGES)
    once = ring_share(value_bytes * checks.positive_int("params", params), checks.positive_int("n", n))
    return once * Fraction(3, 2) if stage == 3 else once


def tensor_parallel_sent(in_features: int, out_features: int, samples: int, k: int, value_bytes: int = 4) -> Fraction:
    """Bytes one of k ranks sends per step for a Megatron pair (a column-parallel layer in ->
    hidden, then a row-parallel layer hidden -> out): one allreduce of the samples' outputs in the
    forward, one of their input gradients in the backward. Activations move, parameters do not."""
    for name, v in (("in_features", in_features), ("out_features", out_features), ("samples", samples), ("k", k)):
        checks.positive_int(name, v)
    return ring_share(value_bytes * samples * out_features, k) + ring_share(value_bytes * samples * in_features, k)


def _stage_ops(schedule: str, s: int, stages: int, micro: int) -> list[tuple[str, int]]:
    if schedule == "gpipe":  # every forward, then every backward
        return [("F", i) for i in range(micro)] + [("B", i) for i in range(micro)]
    warm = min(stages - s - 1, micro)  # 1F1B (PipeDream-Flush): warm up, one forward one backward, drain
    ops = [("F", i) for i in range(warm)]
    for i in range(micro - warm):
        ops += [("F", warm + i), ("B", i)]
    return ops + [("B", i) for i in range(micro - warm, micro)]


def pipeline_schedule(stages: int, micro: int, schedule: str, fwd: float = 1.0, bwd: float = 2.0) -> list[tuple]:
    """(stage, "F"/"B", micro-batch, start, end) of every op: each stage runs its ops in the
    schedule's order, an op starting once its stage is free and its input exists (F on the stage
    before, B on the stage after; the last stage's B after its own F). Transfers take no time."""
    checks.positive_int("stages", stages)
    checks.positive_int("micro", micro)
    checks.one_of("schedule", schedule, SCHEDULES)
    checks.number("fwd", fwd, above=0)
    checks.number("bwd", bwd, above=0)
    todo = [_stage_ops(schedule, s, stages, micro) for s in range(stages)]
    done: dict[tuple[str, int, int], float] = {}
    free, events = [0.0] * stages, []
    while any(todo):
        moved = False
        for s in range(stages):
            while todo[s]:
                kind, i = todo[s][0]
                need = (("F", s - 1, i) if s > 0 else None) if kind == "F" else \
                    (("B", s + 1, i) if s < stages - 1 else ("F", s, i))
                if need is not None and need not in done:
                    break
                start = max(free[s], done.get(need, 0.0))
                free[s] = done[(kind, s, i)] = start + (fwd if kind == "F" else bwd)
                events.append((s, kind, i, start, free[s]))
                todo[s].pop(0)
                moved = True
        if not moved:  # cannot happen for the two schedules; guards a wrong op order
            raise RuntimeError(f"{schedule}: no stage can run its next op")
    return events


def bubble_fraction(events: list[tuple]) -> Fraction:
    """Idle share of stage time: 1 - busy / (stages x makespan)."""
    stages = 1 + max(e[0] for e in events)
    span = max(e[4] for e in events)
    busy = sum(e[4] - e[3] for e in events)
    return 1 - Fraction(busy).limit_denominator(10**9) / Fraction(stages * span).limit_denominator(10**9)


def peak_in_flight(events: list[tuple], stage: int = 0) -> int:
    """Most micro-batches whose activations `stage` holds at once (forward done, backward not)."""
    held, peak = 0, 0
    for _, kind, _, _, _ in sorted((e for e in events if e[0] == stage), key=lambda e: e[3]):
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    return peak


def stanza_over_ddp(profile, nodes: int, gbps: float, batch_per_worker: int = 32, device: str = "v100") -> float:
    """The best Stanza k's throughput (k = 1..N//2) over DDP's, modelled (perf.predict)."""
    checks.positive_int("nodes", nodes, 2, what="a CONV and an FC worker")
    cluster = Cluster(nodes, gbps, device=device)
    ddp = predict(profile, cluster, Variant("ddp"), batch_per_worker=batch_per_worker).throughput
    return max(predict(profile, cluster, Variant("stanza", fc_workers=k), batch_per_worker=batch_per_worker).throughput
               for k in fc_worker_choices(nodes)) / ddp


def crossover_gbps(profile, nodes: int, batch_per_worker: int = 32, device: str = "v100",
                   lo: float = 0.1, hi: float = 1000.0, rel: float = 0.01) -> float | None:
    """The link speed (Gb/s, within `rel`) where the best Stanza k stops beating DDP, found by
    bisection on a log scale; None if no k beats DDP even at `lo`; `hi` if one still does there."""
    if stanza_over_ddp(profile, nodes, lo, batch_per_worker, device) <= 1:
        return None
    if stanza_over_ddp(profile, nodes, hi, batch_per_worker, device) > 1:
        return hi
    while hi / lo > 1 + rel:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if stanza_over_ddp(profile, nodes, mid, batch_per_worker, device) > 1 else (lo, mid)
    return math.sqrt(lo * hi)
