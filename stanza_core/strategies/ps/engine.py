"""`ps`: the paper's baseline, a sharded parameter server with true push/pull P2P traffic.

The flat parameter vector (P values, `model.parameters()` order) is cut into S contiguous,
near-equal shards. Two deployments (topology.py):
  colocated  shard s is served by rank s, which is also a data worker (ps_servers = 0);
  dedicated  shard s is served by rank N + s, a server that computes nothing (ps_servers = S).
Each step, for every data worker w and shard s:
  push  w sends its gradient slice of shard s to the shard's server;
  apply the server adds the N workers' slices (in worker rank order) and steps SGD on them;
  pull  w receives the updated slice back into its model (posted with the push: see _push).
A worker's own shard never crosses the network. With loss = sum / G on every worker, the sum
the server forms is the gradient of the global mean loss.

Granularity: the gradient is cut into buckets (contiguous ranges of the flat vector, in
backward order: the last layers first) and a bucket's intersection with a shard is a
*piece*, the unit of push, update and pull. Without overlap there is one bucket (the whole
vector, pushed once the backward is done), so the pieces are the shards. With `ps_overlap`
(wait-free backprop, as Poseidon and BytePS) the buckets are ~bucket_mb each and a bucket is
pushed from a post-accumulate-grad hook as soon as the backward has produced all of its
gradients; a server updates a piece as soon as every worker's push of it has arrived and sends
it straight back. SGD is elementwise, so updating piece by piece equals updating the shard.
Message tags are piece indices, so the many messages a pair has in flight never mix.
"""
from __future__ import annotations

import torch

from ...buckets import bucket_groups
from ...topology import WORKER
from .. import state
from ..base import Strategy, make_sgd
from ...engine.replay import replayer_of


def shard_sizes(total: int, shards: int) -> list[int]:
    return [total // shards + (1 if s < total % shards else 0) for s in range(shards)]


def bucket_ranges(numels: list[int], cap_bytes: int, elem_bytes: int = 4) -> list[slice]:
    """Flat ranges of gradient buckets in backward order (reverse parameter order), split by the
    engine's bucket rule (buckets.bucket_groups)."""
    offsets = [sum(numels[:i]) for i in range(len(numels))]
    order = list(reversed(range(len(numels))))
    out = []
    for g in bucket_groups([numels[i] * elem_bytes for i in order], cap_bytes):
        first, last = order[g[-1]], order[g[0]]  # lowest and highest parameter index of the bucket
        out.append(slice(offsets[first], offsets[last] + numels[last]))
    return [r for r in out if r.stop > r.start]


def pieces_of(buckets: list[slice], shards: list[slice]) -> list[tuple[int, int, slice]]:
    """(bucket j, shard s, flat range) for every non-empty intersection, bucket by bucket."""
    out = []
    for j, b in enumerate(buckets):
        for s, r in enumerate(shards):
            lo, hi = max(b.start, r.start), min(b.stop, r.stop)
            if lo < hi:
                out.append((j, s, slice(lo, hi)))
    return out


class ParameterServer(Strategy):
    name = "ps"

    def __init__(self, *args):
        super().__init__(*args)
        topo = self.topo
        self.params = list(self.model.parameters())
        numels = [p.numel() for p in self.params]
        total = sum(numels)
        sizes = shard_sizes(total, topo.ps_shards)
        starts = [sum(sizes[:s]) for s in range(len(sizes))]
        self.ranges = [slice(a, a + n) for a, n in zip(starts, sizes)]
        replayer = replayer_of(self.model)
        # Replayed compute (values mean nothing): the flat buffers are new, uninitialised storage
        # that only what crosses the network writes (pulls into `flat`, pushes read `flat_grad`);
        # no gradient is zeroed or summed and a server's slots are views of `flat` (see _serve).
        self.lean = replayer is not None
        # Parameters and gradients live as views of two flat buffers: a pull writes straight
        # into the model and a push sends slices of the gradients, with no copies of the model.
        if self.lean:
            self.flat = torch.empty(total, device=self.device)
        else:
            self.flat = torch.cat([p.detach().reshape(-1) for p in self.params]).to(self.device)
        self.is_worker = self.role == WORKER
        self.flat_grad = (torch.empty_like if self.lean else torch.zeros_like)(self.flat) if self.is_worker else None
        offset, self.grad_views = 0, []
        for p in self.params:
            p.data = self.flat[offset:offset + p.numel()].view_as(p)
            if self.is_worker:
                self.grad_views.append(self.flat_grad[offset:offset + p.numel()].view_as(p))
                if self.lean:  # replayed: the backward hands each gradient over in place, here
                    p.grad = self.grad_views[-1]
            offset += p.numel()
        if self.options.ps_overlap:
            self.buckets = bucket_ranges(numels, int(self.cfg.bucket_mb * 2**20), self.flat.element_size())
        else:
            self.buckets = [slice(0, total)]
        self.pieces = pieces_of(self.buckets, self.ranges)
        # Views made once, so a step slices nothing: each piece of the parameters and gradients,
        # and (real compute) each bucket's parameters, whose gradients one call copies into
        # flat_grad when the bucket is pushed (autograd leaves fresh gradients, as in a plain step).
        self.param_piece = [self.flat[r] for _, _, r in self.pieces]
        self.grad_piece = [self.flat_grad[r] for _, _, r in self.pieces] if self.is_worker else None
        starts = [sum(numels[:k]) for k in range(len(numels))]
        self.bucket_members = [[k for k in range(len(self.params)) if b.start <= starts[k] < b.stop]
                               for b in self.buckets]
        self.workers = topo.conv_ranks
        self.owner = [topo.shard_owner(s) for s in range(topo.ps_shards)]
        self.owned = topo.shard_of(self.rank)
        self.mine = [i for i, (_, s, _) in enumerate(self.pieces) if s == self.owned]
        # The server's copy of each piece of its shard, each with its own optimizer state.
        # (replayed, or a dedicated server, whose `flat` is only its copy of the shard: views of
        # `flat`, updated in place; a colocated server's slots are its own, copied into its model
        # after each update, as a pull would)
        alias = self.lean or not self.is_worker
        self.slots = {i: torch.nn.Parameter(self.flat[self.pieces[i][2]] if alias else
                                            self.flat[self.pieces[i][2]].clone()) for i in self.mine}
        self.optimizers = {i: make_sgd([p], self.cfg) for i, p in self.slots.items()}
        self.slot_data = {i: p.detach() for i, p in self.slots.items()}  # what is sent: the updated values
        # Receive buffers of the pushes, made once (a step has used them before the next posts):
        # replayed, every worker's push of piece i lands in one buffer (values mean nothing; the
        # bytes still cross the network), not N - 1 of them.
        self.inbox = {}
        for i in self.mine:
            size = self.pieces[i][2].stop - self.pieces[i][2].start
            shared = torch.empty(size, device=self.device) if self.lean else None
            for w in topo.conv_ranks:
                if w != self.rank:
                    self.inbox[i, w] = shared if self.lean else torch.empty(size, device=self.device)
        self.sum_buf = {i: torch.empty_like(self.slot_data[i]) for i in self.mine} if not self.lean else {}
        # What the training loop sees as this rank's optimizer: it steps nothing (the pieces'
        # optimizers above do the work), so replayed compute waits nothing for it and instead
        # replays each piece's step where it happens.
        self.optimizer = make_sgd([torch.nn.Parameter(torch.zeros(0, device=self.device))], self.cfg)
        if replayer is not None:
            for opt in self.optimizers.values():
                replayer.replay_optimizer(opt)
        self.pending: list[int] | None = None
        self.push_works: list = []
        self.pull_works: list = []
        self.pulls_after_pushes = self.comm.backend == "nccl"  # see _push
        if self.is_worker and self.options.ps_overlap:
            bucket_of = {}
            for j, b in enumerate(self.buckets):
                offset = 0
                for k, p in enumerate(self.params):
                    if b.start <= offset < b.stop:
                        bucket_of[k] = j
                    offset += p.numel()
            self.bucket_params = [sum(1 for k in bucket_of if bucket_of[k] == j) for j in range(len(self.buckets))]
            for k, p in enumerate(self.params):
                p.register_post_accumulate_grad_hook(lambda _p, j=bucket_of[k]: self._ready(j))

    # -- worker side ------------------------------------------------------------------------
    def _ready(self, j: int):
        if self.pending is None:
            return
        self.pending[j] -= 1
        if self.pending[j] == 0:  # every gradient of bucket j is final: push its pieces now
            self._push(j)

    def _push(self, j: int):
        """Push bucket j's pieces and, on gloo, post their pulls. Every gradient of the bucket is
        final, so the backward has run every node that reads its parameters: the updated values
        may land in the model from now on, and the servers' answers for early buckets flow while
        later buckets are still being computed and pushed. Posting them here matters with gloo:
        a receive's ready-notice goes to the peer behind the bytes already queued to it, so
        pulls posted after the last push would hold back every answer until all pushes had
        left. NCCL runs a rank's point-to-point ops in posting order on one stream, so there a
        pull posted before a later push would wait for a server whose answer waits for that
        push: NCCL posts the pulls once every push is out (pulls_after_pushes)."""
        self.pending[j] = -1  # pushed
        if not self.lean:  # the bucket's gradients into flat_grad, in one call
            members = self.bucket_members[j]
            grads = [self.params[k].grad for k in members]
            if any(g is None for g in grads):  # parameters the loss does not reach: zero gradients
                for k, g in zip(members, grads):
                    if g is None:
                        self.params[k].grad = torch.zeros_like(self.params[k])
                grads = [self.params[k].grad for k in members]
            torch._foreach_copy_([self.grad_views[k] for k in members], grads)
        mine = [(i, s, r) for i, (b, s, r) in enumerate(self.pieces) if b == j and self.owner[s] != self.rank]
        self.push_works += self.comm.p2p([("send", self.grad_piece[i], self.owner[s], "grads", i) for i, s, r in mine])
        if not self.pulls_after_pushes:
            self.pull_works += self.comm.p2p(self._pulls(mine))

    def _pulls(self, pieces) -> list[tuple]:
        return [("recv", self.param_piece[i], self.owner[s], "params", i) for i, s, r in pieces]

    def _compute(self, t, batch):
        if not self.lean:  # fresh gradients (no operator call), copied to flat_grad bucket by bucket
            for p in self.params:
                p.grad = None
        self.push_works, self.pull_works = [], []
        self.pending = list(self.bucket_params) if self.options.ps_overlap else [0]
        try:
            self.comm.mark("forward_start", "compute")
            share = self.forward_loss(self.model, batch.x, batch.y, t, batch.positions)
            self.comm.mark("forward_end", "compute")
            self.comm.mark("backward_start", "compute")
            self.backward(share)  # with overlap, hooks copy and push bucket by bucket as gradients are final
            self.comm.mark("backward_end", "compute")
            for j, left in enumerate(self.pending):
                if left >= 0:  # not pushed yet: the whole vector (no overlap) or unused parameters
                    self._push(j)
            if self.pulls_after_pushes:
                self.pull_works = self.comm.p2p(self._pulls([(i, s, r) for i, (_, s, r) in enumerate(self.pieces)
                                                             if self.owner[s] != self.rank]))
        finally:
            self.pending = None
        return share

    # -- server side ------------------------------------------------------------------------
    def _serve(self, inbox, recv_works) -> list:
        """Update each piece of this rank's shard as soon as every worker's push has arrived,
        and send it back to every worker at once."""
        sends = []
        for n in self.comm.as_completed([recv_works[i] for i in self.mine], "parameter-server push"):
            i = self.mine[n]
            r = self.pieces[i][2]
            slot = self.slots[i]
            if self.lean:  # replayed: the update is the optimizer's wait; slot is a view of flat
                self.comm.mark("optimizer_start", "compute")
                self.optimizers[i].step()
                self.comm.mark("optimizer_end", "compute")
                sends += self.comm.p2p([("send", self.slot_data[i], w, "params", i) for w in self.workers
                                        if w != self.rank])
                continue
            self.comm.mark("optimizer_start", "compute")  # the server's sum of the pushes and its update
            parts = [self.grad_piece[i] if w == self.rank else inbox[i, w] for w in self.workers]
            total = parts[0] if len(parts) == 1 else torch.add(parts[0], parts[1], out=self.sum_buf[i])
            for g in parts[2:]:  # worker rank order, whoever holds the slice
                total += g
            slot.grad = total
            self.optimizers[i].step()
            slot.grad = None
            if self.is_worker:  # the colocated server's own model: its own pull
                with torch.no_grad():
                    self.param_piece[i].copy_(self.slot_data[i])
            self.comm.mark("optimizer_end", "compute")
            sends += self.comm.p2p([("send", self.slot_data[i], w, "params", i) for w in self.workers
                                    if w != self.rank])
        return sends

    def step(self, t, batch):
        inbox, recv_works = self.inbox, {}
        for i in self.mine:  # posted first, so pushes land while this rank still computes
            recv_works[i] = self.comm.p2p([("recv", inbox[i, w], w, "grads", i) for w in self.workers if w != self.rank])
        share = None
        if self.is_worker:  # pushes and pulls are posted bucket by bucket (_push)
            share = self._compute(t, batch)
        sends = self._serve(inbox, recv_works) if self.owned is not None else []
        self.comm.wait(self.push_works, "parameter-server push")
        self.comm.wait(self.pull_works, "parameter-server pull")
        self.comm.wait(sends, "parameter-server pull")
        self.push_works, self.pull_works = [], []
        return share

    def checkpoint_state(self):
        """Workers: the model (parameters are views of self.flat), under the model's names, the same
        on every worker. Servers: the momentum of each piece they own, keyed by its flat range
        (`momentum_flat.<start>-<stop>`), so another shard layout can read it back (SGD is
        elementwise). A dedicated server's model is stale outside its shard: it writes none."""
        out = state.module_state([self.model], self.state_names(), self.optimizer, self.rank, self.bn_local) \
            if self.is_worker else {}
        for i in self.mine:
            buf = self.optimizers[i].state.get(self.slots[i], {}).get("momentum_buffer")
            if buf is not None:
                r = self.pieces[i][2]
                out[state.flat_momentum_key(r)] = buf
        return out

    def load_checkpoint_state(self, reader):
        """The model on every rank (a dedicated server: its parameters, whose flat buffer holds its
        shard), then each owned piece's momentum cut from the stored ranges that cover it."""
        targets = state.module_targets([self.model], self.state_names(), self.rank, self.bn_local,
                                       params_only=not self.is_worker)
        ranges = {i: self.pieces[i][2] for i in self.mine}
        pieces, covers = state.flat_momentum_targets(reader.keys, ranges, self.flat.dtype)
        targets.update(pieces)
        with torch.no_grad():
            reader.load(targets)
            for i, r in ranges.items():
                if self.slots[i].data_ptr() != self.flat[r].data_ptr():  # a colocated server's own copy
                    self.slots[i].copy_(self.flat[r])
                if covers[i]:
                    self.optimizers[i].state[self.slots[i]]["momentum_buffer"] = state.cut(r, covers[i], pieces, self.slot_data[i])
