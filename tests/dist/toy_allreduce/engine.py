"""`allreduce_after`'s engine: the backward to its end, then the flat gradient allreduced in
`flat_chunks` pieces (its options object, self.options)."""
from __future__ import annotations

import torch

from stanza_core.strategies.base import Strategy, make_sgd


class AllreduceAfter(Strategy):
    name = "allreduce_after"

    def __init__(self, *args):
        super().__init__(*args)
        self.optimizer = make_sgd(self.model.parameters(), self.cfg)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.flat = torch.zeros(sum(p.numel() for p in self.params), device=self.device)
        self.chunks = torch.tensor_split(self.flat, self.options.flat_chunks)

    def step(self, t, batch):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward_loss(self.model, batch.x, batch.y, t, batch.positions)
        self.backward(loss)  # this slice's share of the global mean loss's gradient
        torch.cat([p.grad.reshape(-1) for p in self.params], out=self.flat)
        for chunk in self.chunks:  # views of self.flat: summed over ranks in place, one after another
            self.comm.allreduce(chunk, None, "grads")
        offset = 0
        for p in self.params:
            p.grad.copy_(self.flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        self.optimizer.step()
        return loss
