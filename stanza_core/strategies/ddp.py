"""`ddp`: torch's own DistributedDataParallel, as users run it (bucketed ring allreduce of the
whole model's gradients, overlapped with backward). A comm hook counts each bucket's bytes and
performs the same averaging allreduce as DDP's default."""
from __future__ import annotations

from .base import Strategy, make_sgd


class DDP(Strategy):
    name = "ddp"

    def __init__(self, *args):
        super().__init__(*args)
        self.ddp = self.comm.wrap_ddp(self.model, self.device, self.cfg.bucket_mb)
        self.optimizer = make_sgd(self.model.parameters(), self.cfg)
        self.n = self.topo.world_size

    def step(self, t, batch):
        self.optimizer.zero_grad(set_to_none=True)
        share = self.forward_loss(self.ddp, batch.x, batch.y, t, batch.positions)
        # DDP averages gradients over the N ranks; N * (sum/G) = the local mean, so the
        # averaged gradient is the gradient of the global mean loss.
        (share * self.n).backward()
        self.comm.wait_ddp()  # host-side wait with the timeout: a dead peer fails here, in one line
        self.optimizer.step()
        return share.detach()
