"""`stanza`'s program (engine.py, the paper's step): a CONV worker's forward, its activations and
labels sent to its FC worker and the activation gradients received back, its backward with the
CONV gradient buckets allreduced among the CONV workers as each completes; an FC worker's receive
from every CONV worker it serves, then, as each arrives, the FC head's forward and backward and
the activation gradients sent straight back, the FC gradient buckets allreduced among the k FC
workers once the last backward has closed them. Pipelined micro-batches, hybrid FC workers and
compressed traffic (pipeline.py) are not generated yet: refused in one line."""
from __future__ import annotations

import math

from ...sim.build import GradBucketRule, Ops, emit
from ...sim.generate import NoSchedule
from ...topology import CONV_WORKER
from .pipeline import uses_pipeline

ACT_BYTES = 4  # fp32 boundary
LABEL_BYTES = 8  # int64 labels


def rank_step(ctx, rank: int) -> Ops:
    if uses_pipeline(ctx.cfg):
        given = ", ".join(k for k in ctx.options.given() if k != "fc_workers")
        raise NoSchedule(f"stanza's program is generated for the paper's step (fc_workers only); {given} "
                         "(pipeline.py) is not generated yet")
    ops = Ops()
    ops.compute("step", "overhead", ctx.work.step_overhead_s)
    if ctx.topo.role(rank) == CONV_WORKER:
        _conv(ctx, rank, ops)
    else:
        _fc(ctx, rank, ops)
    return ops


def _sizes(ctx) -> tuple[int, int]:
    b = ctx.b
    return b * math.prod(ctx.work.boundary_shape) * ACT_BYTES, b * LABEL_BYTES


def _conv(ctx, rank: int, ops: Ops):
    topo, b = ctx.topo, ctx.b
    fc, pair = topo.fc_worker_of(rank), topo.pair_group(rank)
    act, labels = _sizes(ctx)
    fwd, bwd = ctx.trace("conv", b)
    emit(ops, fwd)
    sent = ops.p2p([("send", fc, act, "activations"), ("send", fc, labels, "labels")], pair)
    back = ops.p2p([("recv", fc, act, "activation_grads")], pair)
    ops.wait(back)
    params = ctx.work.params("conv")
    rule = GradBucketRule([p.numel() for p in params], ctx.cap_bytes, alone=len(ctx.groups["conv"]) == 1)
    rule.start(1)
    works = {}

    def ready(k):
        i = rule.ready(k)
        if i is not None:
            works[i] = ops.collective("conv", rule.nbytes[i], "conv_grads")

    emit(ops, bwd, ready)
    ops.wait(sent)
    for i in sorted(works):  # GradBuckets.finish: bucket by bucket
        ops.wait([works[i]])
    ops.compute("optimizer", "update", ctx.work.update_seconds(sum(p.numel() for p in params)))


def _fc(ctx, rank: int, ops: Ops):
    topo, b = ctx.topo, ctx.b
    served = topo.served_by(rank)
    act, labels = _sizes(ctx)
    recvs = [ops.p2p([("recv", src, act, "activations"), ("recv", src, labels, "labels")], topo.pair_group(src))
             for src in served]
    fwd, bwd = ctx.trace("fc", b)
    params = ctx.work.params("fc")
    rule = GradBucketRule([p.numel() for p in params], ctx.cap_bytes, alone=len(ctx.groups["fc"]) == 1)
    rule.start(len(served))
    node = ops.as_completed(recvs)
    sends, works = [], {}
    for j, src in enumerate(served):  # the bodies in group order; the collectives go to the last one
        body = node.body(j)
        last = j == len(served) - 1

        def ready(k, body=body, last=last):
            if not last:
                return
            i = rule.ready(k)
            if i is not None:
                works[i] = node.last(len(body.ops), "fc", rule.nbytes[i], "fc_grads")

        if last:
            rule.start(1)
        emit(body, fwd)
        emit(body, bwd, ready)
        sends += body.p2p([("send", src, act, "activation_grads")], topo.pair_group(src))
    ops.wait(sends)
    for i in sorted(works):
        ops.wait([works[i]])
    ops.compute("optimizer", "update", ctx.work.update_seconds(sum(p.numel() for p in params)))
