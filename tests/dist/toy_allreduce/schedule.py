"""`allreduce_after`'s program: the forward and the whole backward, then the flat gradient
allreduced over WORLD in `flat_chunks` pieces one after another (each waited for before the
next: Comm.allreduce without async_op), then the update."""
from __future__ import annotations

import torch

from stanza_core.sim.build import Ops, emit


def rank_step(ctx, rank: int) -> Ops:
    ops = Ops()
    ops.compute("step", "overhead", ctx.work.step_overhead_s)
    fwd, bwd = ctx.trace("model", ctx.b)
    emit(ops, fwd)
    emit(ops, bwd)
    params = [p for p in ctx.work.params("model") if p.requires_grad]
    total = sum(p.numel() for p in params)
    for chunk in torch.tensor_split(torch.empty(total, device="meta"), ctx.options.flat_chunks):
        ops.wait([ops.collective(None, chunk.numel() * 4, "grads")])
    ops.compute("optimizer", "update", ctx.work.update_seconds(sum(p.numel() for p in ctx.work.params("model"))))
    return ops
