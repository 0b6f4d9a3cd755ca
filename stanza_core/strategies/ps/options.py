"""`ps`'s options as labels and keys name them (labels.py)."""
from __future__ import annotations


def label_parts(ps_servers: int = 0, ps_overlap: bool = False, **_) -> list[tuple[str, str]]:
    """S = dedicated parameter-server nodes (0: shards colocated with the workers), overlap = each
    gradient bucket pushed as the backward produces it."""
    out = []
    if ps_servers:
        out.append(("S", str(ps_servers)))
    if ps_overlap:
        out.append(("overlap", ""))
    return out
