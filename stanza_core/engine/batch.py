"""The samples a rank trains on in one step (`Batch`: what the run loop hands a strategy's step)
and their positions in the global batch."""
from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class Batch:
    """The samples a rank trains on in one step."""

    x: torch.Tensor  # samples (b, C, H, W), on the rank's device
    y: torch.Tensor  # labels (b,), int64
    positions: range  # where each sample sits in the global batch (a run of positions)

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def chunks(self, n: int) -> list["Batch"]:
        """`n` consecutive, near-equal pieces (the first len % n one sample larger)."""
        sizes = [len(self) // n + (1 if i < len(self) % n else 0) for i in range(n)]
        out, start = [], 0
        for size in sizes:
            sl = slice(start, start + size)
            out.append(Batch(self.x[sl], self.y[sl], self.positions[sl]))
            start += size
        return out


def positions_of(s: slice) -> range:
    """The positions of a slice of the global batch (a range: dropout keys read it on the host,
    with no operator call inside the step)."""
    return range(s.start, s.stop)
