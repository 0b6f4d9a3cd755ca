"""`ps`: the paper's baseline, a sharded parameter server with true push/pull P2P traffic.

The flat parameter vector (P values, `model.parameters()` order) is cut into S contiguous,
near-equal shards; shard s is served by rank s (servers colocated with workers). Each step:
  push  every worker sends its gradient slice of each shard to the shard's server;
  apply the server adds the N gradient slices (in rank order) and steps SGD on its shard;
  pull  every worker receives each updated shard from its server.
A worker's own shard never crosses the network. With loss = sum / G on every worker, the sum
the server forms is the gradient of the global mean loss.
"""
from __future__ import annotations

import torch

from .base import Strategy, make_sgd


def shard_sizes(total: int, shards: int) -> list[int]:
    return [total // shards + (1 if s < total % shards else 0) for s in range(shards)]


class ParameterServer(Strategy):
    name = "ps"

    def __init__(self, *args):
        super().__init__(*args)
        self.params = list(self.model.parameters())
        total = sum(p.numel() for p in self.params)
        sizes = shard_sizes(total, self.topo.ps_shards)
        starts = [sum(sizes[:s]) for s in range(len(sizes))]
        self.ranges = [slice(a, a + n) for a, n in zip(starts, sizes)]
        # Parameters and gradients live as views of two flat buffers: a pull writes straight
        # into the model and a push sends slices of the gradients, with no copies of the model.
        self.flat = torch.cat([p.detach().reshape(-1) for p in self.params]).to(self.device)
        self.flat_grad = torch.zeros_like(self.flat)
        offset = 0
        for p in self.params:
            p.data = self.flat[offset:offset + p.numel()].view_as(p)
            p.grad = self.flat_grad[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        self.owned = self.rank if self.rank < self.topo.ps_shards else None
        if self.owned is not None:  # the server's copy of its shard, with its own optimizer state
            self.shard = torch.nn.Parameter(self.flat[self.ranges[self.owned]].clone())
            self.optimizer = make_sgd([self.shard], self.cfg)
        else:
            self.optimizer = make_sgd([torch.nn.Parameter(torch.zeros(1))], self.cfg)  # no state to keep

    def step(self, t, batch):
        self.flat_grad.zero_()
        share = self.forward_loss(self.model, batch.x, batch.y, t, batch.positions)
        share.backward()  # accumulates in place into the views of flat_grad
        grad = self.flat_grad
        n, me = self.topo.world_size, self.rank
        ops, inbox = [], {}
        for s, r in enumerate(self.ranges):
            owner = self.topo.shard_owner(s)
            if owner != me:
                ops.append(("send", grad[r].contiguous(), owner, "grads"))
        if self.owned is not None:
            size = self.ranges[self.owned].stop - self.ranges[self.owned].start
            for w in range(n):
                if w != me:
                    inbox[w] = torch.empty(size, device=self.device)
                    ops.append(("recv", inbox[w], w, "grads"))
        self.comm.wait(self.comm.p2p(ops), "parameter-server push")
        if self.owned is not None:
            own = grad[self.ranges[self.owned]]
            total = own.clone() if me == 0 else inbox[0].clone()
            for w in range(1, n):  # rank order, whoever holds the slice
                total += own if w == me else inbox[w]
            self.shard.grad = total
            self.optimizer.step()
            self.flat[self.ranges[self.owned]] = self.shard.detach()
        ops = []
        for s, r in enumerate(self.ranges):
            owner = self.topo.shard_owner(s)
            if owner == me:
                ops += [("send", self.shard.detach(), w, "params") for w in range(n) if w != me]
            else:
                ops.append(("recv", self.flat[r], owner, "params"))
        self.comm.wait(self.comm.p2p(ops), "parameter-server pull")  # lands in the model's parameters
        return float(share.detach())

    def checkpoint_state(self):
        state = {"model": self.model.state_dict()}  # parameters are views of self.flat
        if self.owned is not None:
            state["shard"], state["optimizer"] = self.shard.detach(), self.optimizer.state_dict()
        return state

    def load_checkpoint_state(self, state):
        self.model.load_state_dict(state["model"])  # copies in place, into self.flat
        if self.owned is not None:
            with torch.no_grad():
                self.shard.copy_(state["shard"])
            self.optimizer.load_state_dict(state["optimizer"])
