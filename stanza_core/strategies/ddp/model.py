"""`ddp`: every rank trains the whole model; the gradient, in buckets of at most `cap` bytes in
reverse parameter order, is ring-allreduced among N as soon as the backward has produced each
bucket. Bytes: 2(N-1)/N x 4P each way per rank, plus the batch-norm statistics."""
from __future__ import annotations

from ...anatomy import DTYPE_BYTES
from ...perf.blocks import backward_units, bucketed_backward, clean, report, ring_share
from ...variant import Variant


def rank_rows(case, ranks) -> list[dict]:
    c = case.counts
    g = ring_share(DTYPE_BYTES * c.params, case.nodes)
    bn = case.bn_share(c.bn_conv_channels + c.bn_fc_channels)
    return [{"rank": r, "role": "worker", "sent": clean({"grads": g, "bn_stats": bn}),
             "recv": clean({"grads": g, "bn_stats": bn})} for r in ranks]


def summary(case) -> dict[str, int]:
    c, N = case.counts, case.nodes
    g = report(ring_share(DTYPE_BYTES * c.params, N)) + report(case.bn_share(c.bn_conv_channels + c.bn_fc_channels))
    return {"bytes_per_step": N * g, "max_node_sent": g, "max_node_recv": g}


def step_time(case):
    profile, dev, cluster, b = case.profile, case.dev, case.cluster, case.b
    N, L = cluster.nodes, cluster.latency_s
    fwd = dev.step_overhead_s + dev.time_s("conv", "fwd", b) + dev.time_s("fc", "fwd", b)
    # The engine passes bucket_cap_mb explicitly, so DDP's first bucket has the same cap (torch
    # only shrinks it to 1 MiB when the argument is left at None).
    bwd, comm_end, busy, nb = bucketed_backward(backward_units(profile, dev, ("conv", "fc"), b), cluster, N,
                                                case.cap, close_at_cap=True)
    update = profile.params * dev.update_s_per_param
    total = fwd + max(bwd, comm_end) + update
    terms = {"grads_allreduce_s": busy, "latency_s": nb * 2 * (N - 1) * L,
             "allreduce_buckets": nb, "update_s": update}
    return total, fwd + bwd + update, terms


def overlap(case) -> str:
    return "bucketed gradient allreduce overlaps the backward pass"


def candidates(space) -> list:
    return [space.predict(space.profile, space.cluster, Variant("ddp"), **space.batch, with_ranks=False)]
