"""A strategy added from outside the package, as a plug-in: `allreduce_after`, data parallelism
with one allreduce of the whole flat gradient after the backward (no buckets, no overlap).

Its engine is the class below, its performance model toy_allreduce_model.py, and this module
registers both (import it, or name it in STANZA_PLUGINS for a torchrun job). Nothing else in the
workbench names it: tests/dist/test_toy_strategy.py shows the CLI, the config checks, the
performance model, the optimiser and the figures taking it from the registry."""
from __future__ import annotations

import torch

from stanza_core import registry
from stanza_core.strategies.base import Strategy, make_sgd

NAME = "allreduce_after"


class AllreduceAfter(Strategy):
    name = NAME

    def __init__(self, *args):
        super().__init__(*args)
        self.optimizer = make_sgd(self.model.parameters(), self.cfg)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.flat = torch.zeros(sum(p.numel() for p in self.params), device=self.device)

    def step(self, t, batch):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward_loss(self.model, batch.x, batch.y, t, batch.positions)
        self.backward(loss)  # this slice's share of the global mean loss's gradient
        torch.cat([p.grad.reshape(-1) for p in self.params], out=self.flat)
        self.comm.allreduce(self.flat, None, "grads")  # the sum over ranks: the global gradient
        offset = 0
        for p in self.params:
            p.grad.copy_(self.flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        self.optimizer.step()
        return loss


SPEC = registry.StrategySpec(
    name=NAME, summary="every rank trains the whole model; one allreduce of the whole gradient after the backward",
    roles=("worker",), color="#17becf", engine=f"{__name__}:AllreduceAfter", model="toy_allreduce_model",
    simplicity=0)
registry.register(SPEC)
