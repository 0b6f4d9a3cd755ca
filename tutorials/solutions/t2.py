"""T2 solutions: the bytes of one Stanza step, from the formulas."""
from __future__ import annotations

from fractions import Fraction

from stanza_core.topology import make_topology


def _ring(nbytes: int, n: int) -> Fraction:
    """What each member of an n-rank ring allreduce sends: 2 (n - 1) / n of the buffer."""
    return Fraction(2 * (n - 1) * nbytes, n) if n > 1 else Fraction(0)


def stanza_bytes_per_step(Pc: int, Pf: int, A: int, N: int, k: int, G: int) -> int:
    """Exercise 1: bytes sent per step by the whole cluster (fp32 values, int64 labels).

    activations out + their gradients back: 2 * 4 * A * G (every sample crosses twice)
    labels: 8 * G
    CONV allreduce: each of the N - k CONV workers sends 2 (Nc - 1) / Nc * 4 Pc
    FC allreduce: each of the k FC workers sends 2 (k - 1) / k * 4 Pf
    The engine rounds each rank's figure to whole bytes; so does this sum."""
    nc = N - k
    return (2 * 4 * A * G + 8 * G + nc * round(_ring(4 * Pc, nc)) + k * round(_ring(4 * Pf, k)))


def samples_per_fc_worker(N: int, k: int, G: int) -> dict[int, int]:
    """Exercise 2: FC rank -> samples whose activations it receives per step."""
    topo = make_topology("stanza", N, G, k)
    b = G // topo.data_workers
    return {j: b * len(topo.served_by(j)) for j in topo.fc_ranks}


def loss_scale_error(G: int, nc: int) -> float:
    """Exercise 3: summing per-slice *means* (each over b = G / nc samples) instead of per-slice
    sums / G gives nc times the gradient of the global mean loss."""
    b = G // nc
    return (1 / b) / (1 / G)
