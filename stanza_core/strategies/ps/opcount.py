"""`ps`'s model pieces run bare, for the engine's operator-call budget (stanza_core/opcount.py)."""
from __future__ import annotations

import copy

import torch

from ...topology import PS_SERVER, WORKER


def bare_pieces(engine, batch) -> list:
    """What this rank computes, with no communication, no buckets and no bookkeeping:
      worker     zero_grad, forward, loss, backward of the whole model
      server     per piece of its shard (a colocated worker's too): the sum of the W workers'
                 pushes, SGD (momentum)"""
    out = []
    if engine.role == WORKER:
        model = copy.deepcopy(engine.model).train()
        for p in model.parameters():
            p.grad = None

        def worker():
            model.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(batch.x), batch.y).backward()
        out.append(worker)
    if engine.owned is not None or engine.role == PS_SERVER:
        cfg = engine.cfg
        slots = [torch.nn.Parameter(s.detach().clone()) for s in engine.slots.values()]
        opts = [torch.optim.SGD([p], lr=cfg.lr, momentum=cfg.momentum) for p in slots]
        pushes = [[torch.ones_like(p) for _ in engine.workers] for p in slots]

        def server():
            for p, opt, parts in zip(slots, opts, pushes):
                total = parts[0]
                for g in parts[1:]:
                    total = total + g
                p.grad = total
                opt.step()
        out.append(server)
    return out
