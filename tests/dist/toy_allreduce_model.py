"""The performance model of the plug-in strategy `allreduce_after` (toy_allreduce.py): the
backward runs to its end, then the whole gradient is ring-allreduced in one message."""
from __future__ import annotations

from stanza_core.anatomy import DTYPE_BYTES
from stanza_core.perf.model import predict
from stanza_core.perf.traffic import clean, report, ring_share


def rank_rows(case, ranks) -> list[dict]:
    g = ring_share(DTYPE_BYTES * case.counts.params, case.nodes)
    return [{"rank": r, "role": "worker", "sent": clean({"grads": g}), "recv": clean({"grads": g})} for r in ranks]


def summary(case) -> dict[str, int]:
    g = report(ring_share(DTYPE_BYTES * case.counts.params, case.nodes))
    return {"bytes_per_step": case.nodes * g, "max_node_sent": g, "max_node_recv": g}


def step_time(case):
    dev, b, cluster, P = case.dev, case.b, case.cluster, case.profile.params
    compute = dev.step_overhead_s + sum(dev.time_s(part, phase, b) for part in ("conv", "fc")
                                        for phase in ("fwd", "bwd"))
    allreduce = cluster.ring_allreduce_s(DTYPE_BYTES * P, cluster.nodes)
    update = P * dev.update_s_per_param
    return compute + allreduce + update, compute + update, {"grads_allreduce_s": allreduce, "update_s": update}


def overlap(case) -> str:
    return "none: the gradient is allreduced after the backward"


def candidates(space) -> list:
    return [predict(space.profile, space.cluster, "allreduce_after", **space.batch, with_ranks=False)]
