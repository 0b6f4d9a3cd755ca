"""`local`: one process, no communication. Its step time is ddp's with nothing to allreduce."""
from __future__ import annotations

from ..ddp.model import step_time  # noqa: F401 (one rank: the bucketed backward has no allreduce)


def rank_rows(case, ranks) -> list[dict]:
    return [{"rank": r, "role": "local", "sent": {}, "recv": {}} for r in ranks]


def summary(case) -> dict[str, int]:
    return {"bytes_per_step": 0, "max_node_sent": 0, "max_node_recv": 0}


def overlap(case) -> str:
    return "no communication"


def candidates(space) -> list:
    return []  # the oracle is compared with, never a deployment the optimiser picks
