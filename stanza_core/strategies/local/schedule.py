"""`local`'s program: one rank, the whole model on the global batch, then its update."""
from __future__ import annotations

from ...sim.build import Ops, emit


def rank_step(ctx, rank: int) -> Ops:
    ops = Ops()
    ops.compute("step", "overhead", ctx.work.step_overhead_s)
    fwd, bwd = ctx.trace("model", ctx.cfg.global_batch)
    emit(ops, fwd)
    emit(ops, bwd)
    ops.compute("optimizer", "update", ctx.work.update_seconds(sum(p.numel() for p in ctx.work.params("model"))))
    return ops
