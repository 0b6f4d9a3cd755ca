"""`ddp`'s program (engine.py: torch's DDP with the counting comm hook): the forward, then the
backward with each of DDP's buckets allreduced over WORLD as it completes (buckets rebuilt after
the first step in the order gradients became final, each closed at the cap), a wait for every
bucket, the update."""
from __future__ import annotations

from ...sim.build import DdpBucketRule, Ops, emit, ready_order


def rank_step(ctx, rank: int) -> Ops:
    ops = Ops()
    ops.compute("step", "overhead", ctx.work.step_overhead_s)
    fwd, bwd = ctx.trace("model", ctx.b)
    emit(ops, fwd)
    params = ctx.work.params("model")
    rule = DdpBucketRule([p.numel() for p in params], ready_order(bwd), ctx.cap_bytes)
    works = []

    def ready(k):
        for i in rule.ready(k):
            works.append(ops.collective(None, rule.nbytes[i], "grads"))

    emit(ops, bwd, ready)
    ops.wait(works)
    ops.compute("optimizer", "update", ctx.work.update_seconds(sum(p.numel() for p in params)))
    return ops
