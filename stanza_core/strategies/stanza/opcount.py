"""`stanza`'s model pieces run bare, for the engine's operator-call budget (stanza_core/opcount.py)."""
from __future__ import annotations

import copy

import torch

from ...topology import CONV_WORKER, FC_WORKER


def bare_pieces(engine, batch) -> list:
    """What this rank computes, with no communication, no buckets and no bookkeeping:
      CONV worker   zero_grad, conv forward, conv backward from the boundary gradient, SGD
      FC worker     zero_grad, per served CONV worker: FC forward, loss, backward; SGD"""
    part = copy.deepcopy(engine.part).train()
    opt = torch.optim.SGD(part.parameters(), lr=engine.cfg.lr, momentum=engine.cfg.momentum)
    if engine.role == CONV_WORKER:
        g = torch.ones((len(batch), *engine.boundary_shape))

        def conv():
            opt.zero_grad(set_to_none=True)
            part(batch.x).backward(g)
            opt.step()
        return [conv]
    assert engine.role == FC_WORKER
    b = engine.b
    acts = [torch.randn((b, *engine.boundary_shape)) for _ in engine.served]
    ys = torch.zeros(b, dtype=torch.int64)

    def fc():
        opt.zero_grad(set_to_none=True)
        for a in acts:
            a = a.detach().requires_grad_(True)
            torch.nn.functional.cross_entropy(part(a), ys).backward()
        opt.step()
    return [fc]
