"""Byte accounting of every transfer (docs/architecture.md is the contract the performance model
also follows):

  * a point-to-point send/recv counts the tensor's payload bytes on sender and receiver;
  * an allreduce of S bytes among n ranks counts 2(n-1)S/n sent and received per member, the
    bandwidth-optimal ring (reduce-scatter + all-gather) that gloo and NCCL run. Kept as exact
    fractions and rounded only when reported, so bucketing does not change the figure.

Only traffic inside `Comm.counting()` is a step's; warm-up and the final gather are counted apart.
"""
from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

import torch

CATEGORIES = ("activations", "labels", "activation_grads", "conv_grads", "fc_grads", "grads", "params", "bn_stats")


class ByteCounter:
    def __init__(self):
        self.sent: dict[str, Fraction] = defaultdict(Fraction)
        self.recv: dict[str, Fraction] = defaultdict(Fraction)

    def add(self, category: str, sent: Fraction | int, recv: Fraction | int):
        if sent:
            self.sent[category] += sent
        if recv:
            self.recv[category] += recv

    def snapshot(self) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
        return dict(self.sent), dict(self.recv)


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def report(counter_value: dict[str, Fraction], steps: int) -> dict[str, int]:
    """Per-step whole bytes by category from a counter accumulated over `steps` steps."""
    return {k: round(v / steps) for k, v in sorted(counter_value.items()) if v}
