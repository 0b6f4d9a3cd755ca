"""T5 solutions: the performance model by hand."""
from __future__ import annotations

from stanza_core import perf


def allreduce_seconds(nbytes: float, n: int, gbps: float, latency_s: float) -> float:
    """Exercise 1: ring allreduce = reduce-scatter + all-gather, 2 (n - 1) steps of S / n each."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (n - 1) / n * nbytes / (gbps * 1e9 / 8) + 2 * (n - 1) * latency_s


def best_stanza_k(profile, cluster: perf.Cluster, batch_per_worker: int = 32) -> int:
    """Exercise 2: the k of the fastest Stanza configuration (ties: the smaller k)."""
    best = None
    for k in range(1, cluster.nodes // 2 + 1):
        p = perf.predict(profile, cluster, "stanza", k, batch_per_worker=batch_per_worker, with_ranks=False)
        if best is None or p.throughput > best.throughput * (1 + 1e-12):
            best = p
    return best.fc_workers


def ps_over_stanza_limit(P: int, Pc: int) -> float:
    """Exercise 3: per step ps moves 2 (N - 1) 4P; Stanza about 2 (Nc - 1) 4Pc + activations (Nc = N - k),
    For large N the allreduce term dominates: the ratio tends to P / Pc."""
    return P / Pc
