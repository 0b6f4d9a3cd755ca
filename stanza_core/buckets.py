"""The gradient-bucket rule, in one place: the engine's buckets (strategies.stanza.engine.GradBuckets,
the parameter server's push buckets) and the performance model's (perf.model.bucketed_backward,
strategies.ps.model) all split by it. Imports nothing of the workbench, so anything may import it.

Two rules, both over tensors (or layers) in the order the backward produces their gradients:
  engine (default)   a new bucket starts before one would exceed the cap (the engine's own
                     rule: no bucket is over the cap unless one tensor alone is)
  close_at_cap       a bucket closes once it holds at least the cap (torch DDP's)
"""
from __future__ import annotations

from collections.abc import Sequence

DEFAULT_BUCKET_MB = 25.0  # gradient bucket cap, MiB: the engine's --bucket-mb default (torch DDP's too)


def bucket_groups(nbytes: Sequence[int], cap_bytes: int, *, close_at_cap: bool = False) -> list[range]:
    """Consecutive groups of `nbytes`' items, in the order given, one per bucket.

    >>> [list(g) for g in bucket_groups([4, 4, 4, 8], 8)]
    [[0, 1], [2], [3]]
    >>> [list(g) for g in bucket_groups([4, 4, 4, 8], 8, close_at_cap=True)]
    [[0, 1], [2, 3]]
    """
    groups, start, size = [], 0, 0
    for i, nb in enumerate(nbytes):
        if not close_at_cap and i > start and size + nb > cap_bytes:
            groups.append(range(start, i))
            start, size = i, 0
        size += nb
        if close_at_cap and size >= cap_bytes:
            groups.append(range(start, i + 1))
            start, size = i + 1, 0
    if start < len(nbytes):
        groups.append(range(start, len(nbytes)))
    return groups
