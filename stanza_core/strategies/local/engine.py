"""`local`: one process steps on the whole global batch. The oracle every strategy must equal."""
from __future__ import annotations

from ..base import Strategy, make_sgd


class Local(Strategy):
    name = "local"

    def __init__(self, *args):
        super().__init__(*args)
        self.optimizer = make_sgd(self.model.parameters(), self.cfg)

    def step(self, t, batch):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward_loss(self.model, batch.x, batch.y, t, batch.positions)
        self.backward(loss)
        self.optimizer.step()
        return loss  # read by the training loop when it reads the step (steplog.py)
