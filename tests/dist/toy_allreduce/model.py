"""The performance model of the plug-in strategy `allreduce_after`: the backward runs to its end,
then the whole gradient is ring-allreduced in `flat_chunks` messages one after another (the same
bytes; each piece pays the ring's latency)."""
from __future__ import annotations

from stanza_core.anatomy import DTYPE_BYTES
from stanza_core.perf.blocks import clean, ps_shard_sizes, report, ring_share
from stanza_core.variant import Variant

CANDIDATE_CHUNKS = (1, 4)  # what the optimiser ranks


def _chunks(case) -> int:
    return case.variant.options.flat_chunks if case.variant is not None else 1


def _grads(case):
    return sum(ring_share(DTYPE_BYTES * p, case.nodes) for p in ps_shard_sizes(case.counts.params, _chunks(case)))


def rank_rows(case, ranks) -> list[dict]:
    g = _grads(case)
    return [{"rank": r, "role": "worker", "sent": clean({"grads": g}), "recv": clean({"grads": g})} for r in ranks]


def summary(case) -> dict[str, int]:
    g = report(_grads(case))
    return {"bytes_per_step": case.nodes * g, "max_node_sent": g, "max_node_recv": g}


def step_time(case):
    dev, b, cluster, P = case.dev, case.b, case.cluster, case.profile.params
    compute = dev.step_overhead_s + sum(dev.time_s(part, phase, b) for part in ("conv", "fc")
                                        for phase in ("fwd", "bwd"))
    allreduce = sum(cluster.ring_allreduce_s(DTYPE_BYTES * p, cluster.nodes)
                    for p in ps_shard_sizes(P, _chunks(case)))
    update = P * dev.update_s_per_param
    return compute + allreduce + update, compute + update, {"grads_allreduce_s": allreduce, "update_s": update}


def overlap(case) -> str:
    return f"none: the gradient is allreduced after the backward, in {_chunks(case)} piece(s)"


def candidates(space) -> list:
    return [space.predict(space.profile, space.cluster, Variant("allreduce_after", flat_chunks=c), **space.batch,
                          with_ranks=False) for c in CANDIDATE_CHUNKS]
