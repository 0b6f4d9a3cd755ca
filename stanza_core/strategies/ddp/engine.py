"""`ddp`: torch's own DistributedDataParallel, as users run it (bucketed ring allreduce of the
whole model's gradients, overlapped with backward). A comm hook counts each bucket's bytes and
performs the same averaging allreduce as DDP's default."""
from __future__ import annotations

from ..base import Strategy, make_sgd
from ...engine.replay import replayer_of


class DDP(Strategy):
    name = "ddp"

    def __init__(self, *args):
        super().__init__(*args)
        self.replayed = replayer_of(self.model) is not None
        self.ddp = self.comm.wrap_ddp(self.model, self.device, self.cfg.bucket_mb, replayed=self.replayed)
        self.optimizer = make_sgd(self.model.parameters(), self.cfg)
        self.n = self.topo.world_size

    def step(self, t, batch):
        self.optimizer.zero_grad(set_to_none=True)  # replayed: a no-op (gradients stay in their buckets)
        if self.replayed and not getattr(self.ddp, "_has_rebuilt_buckets", False):
            # DDP rebuilds its buckets in the forward after its first backward: gradients still
            # bound to the old buckets would keep them alive beside the new ones (2 x P floats)
            self.model.zero_grad(set_to_none=True)
        self.comm.mark("forward_start", "compute")
        share = self.forward_loss(self.ddp, batch.x, batch.y, t, batch.positions)
        self.comm.mark("forward_end", "compute")
        # DDP averages gradients over the N ranks; N * (sum/G) = the local mean, so the
        # averaged gradient is the gradient of the global mean loss.
        self.comm.mark("backward_start", "compute")
        self.backward(share, self.n)  # the buckets' allreduces launch from inside this call
        self.comm.mark("backward_end", "compute")
        self.comm.wait_ddp()  # host-side wait with the timeout: a dead peer fails here, in one line
        self.comm.mark("optimizer_start", "compute")
        self.optimizer.step()
        self.comm.mark("optimizer_end", "compute")
        return share
