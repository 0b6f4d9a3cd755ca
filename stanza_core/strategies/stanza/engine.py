"""`stanza`: layer separation. N - k CONV workers train the CONV body data-parallel; k FC
workers train the FC head on the boundary activations. FC parameters never cross the network.

One step (b = G / (N - k) samples per CONV worker, A = boundary shape):
  CONV worker i   a_i = conv(x_i)                 (b, *A)
                  send a_i, y_i -> FC worker i % k; receive dL/da_i back
                  a_i.backward(dL/da_i); CONV grads are allreduced among the CONV workers in
                  buckets launched as backward fills them (overlapped); SGD step
  FC worker j     for each served CONV worker, in the order their activations arrive:
                  loss_i = sum CE(fc(a_i), y_i) / G; backward; send dL/da_i at once (pipelined)
                  FC grads (accumulated over its CONV workers) allreduced among the k FC
                  workers; SGD step
The two groups' allreduces run at the same time on disjoint ranks.
"""
from __future__ import annotations

import torch

from ...buckets import bucket_groups
from ...engine.checkpoint import per_rank_key
from ...topology import CONV_WORKER
from .. import state
from ..base import Strategy, make_sgd, positions_of
from .pipeline import Pipeline, hooked_buckets, uses_pipeline
from ...engine.replay import replayer_of


class GradBuckets:
    """Allreduce of a module's gradients in ~bucket_mb buckets, each launched as soon as the
    backward pass has produced all of its gradients (reverse parameter order).

    A bucket's gradients are copied into its flat buffer by one call and back by one call
    (`torch._foreach_copy_` over views of the buffer made once), so a bucket costs the step two
    operator calls beside its allreduce, whatever its parameter count. A group of one rank (one
    FC worker) has nothing to sum: no copies, no allreduce.

    Lean (`bind()`, for replayed compute, whose values mean nothing): each gradient is bound to
    its place in its bucket's flat buffer (replay.py hands a backward's gradient over in place),
    so a bucket launches from its buffer with no copy in and no copy back."""

    def __init__(self, params, comm, group: str, category: str, bucket_mb: float, device):
        self.comm, self.group, self.category, self.lean = comm, group, category, False
        order = list(reversed(list(params)))  # the backward's order
        groups = bucket_groups([p.numel() * p.element_size() for p in order], int(bucket_mb * 2**20))
        self.buckets: list[list[torch.nn.Parameter]] = [[order[i] for i in g] for g in groups] or [[]]
        self.bucket_of = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self.flat = [torch.empty(sum(p.numel() for p in b), device=device) for b in self.buckets]
        self.views = [_views_of(flat, b) for flat, b in zip(self.flat, self.buckets)]  # made once
        self.alone = len(getattr(comm, "group_ranks", {}).get(group, ())) == 1  # nothing to sum with anyone
        self.works, self.pending = [], []
        for p in params:
            p.register_post_accumulate_grad_hook(self._ready)

    def bind(self) -> "GradBuckets":
        """Lean mode (replayed compute): every gradient becomes a view of its bucket's buffer."""
        self.lean = True
        for b, views in zip(self.buckets, self.views):
            for q, v in zip(b, views):
                q.grad = v
        return self

    def start(self, backwards: int = 1):
        """Arm the buckets for a step in which `backwards` backward passes accumulate gradients
        (an FC worker runs one per CONV worker it serves): a bucket launches after the last."""
        self.pending = [len(b) * backwards for b in self.buckets]
        self.works = [None] * len(self.buckets)

    def _ready(self, p):
        i = self.bucket_of[id(p)]
        self.pending[i] -= 1
        if self.pending[i] == 0 and not self.alone:  # every gradient of bucket i is final: launch its allreduce
            if not self.lean:
                torch._foreach_copy_(self.views[i], [q.grad for q in self.buckets[i]])
            self.works[i] = self._launch(i)

    def _launch(self, i):
        return self.comm.allreduce(self.flat[i], self.group, self.category, async_op=True)

    def _wait(self, i):
        self.comm.wait([self.works[i]], f"allreduce of {self.category}")

    def finish(self):
        for i, bucket in enumerate(self.buckets):
            if self.pending[i] != 0:
                raise RuntimeError(f"bucket {i}: {self.pending[i]} gradients never arrived")
            if self.works[i] is not None:
                self._wait(i)
            if self.lean or self.alone:
                continue
            torch._foreach_copy_([q.grad for q in bucket], self.views[i])


def _views_of(flat: torch.Tensor, params) -> list[torch.Tensor]:
    """Views of `flat`, one per parameter in order, each of its parameter's shape."""
    views, offset = [], 0
    for q in params:
        views.append(flat[offset:offset + q.numel()].view_as(q))
        offset += q.numel()
    return views


class Stanza(Strategy):
    name = "stanza"

    def __init__(self, *args):
        super().__init__(*args)
        cfg, topo = self.cfg, self.topo
        self.b = topo.worker_batch(cfg.global_batch)
        if self.split is None:
            raise ValueError("stanza needs the SplitModel built by train.prepare()")
        self.boundary_shape = self.split.boundary_shape  # per sample, probed once in eval mode
        if self.role == CONV_WORKER:
            self.part = self.split.conv
            self.fc_rank = topo.fc_worker_of(self.rank)
            group, category = "conv", "conv_grads"
        else:
            self.part = self.split.fc
            self.served = topo.served_by(self.rank)
            group, category = "fc", "fc_grads"
        params = list(self.part.parameters())
        conv_buckets = hooked_buckets(GradBuckets) if self.options.grad_compression != "none" else GradBuckets
        hook = (self.options.grad_compression,) if self.options.grad_compression != "none" else ()
        self.hybrid_buckets = None  # a hybrid FC worker's CONV gradients (joining the CONV allreduce)
        if self.role != CONV_WORKER and topo.fc_batch:
            conv_params = list(self.split.conv.parameters())
            self.hybrid_buckets = conv_buckets(conv_params, self.comm, "conv", "conv_grads", cfg.bucket_mb,
                                               self.device, *hook)
            params = params + conv_params
        self.optimizer = make_sgd(params, cfg)
        if self.role == CONV_WORKER:
            self.buckets = conv_buckets(list(self.part.parameters()), self.comm, group, category, cfg.bucket_mb,
                                        self.device, *hook)
        else:
            self.buckets = GradBuckets(list(self.part.parameters()), self.comm, group, category, cfg.bucket_mb,
                                       self.device)
        self.pipeline = Pipeline(self) if uses_pipeline(cfg) else None
        self._buffers: dict[tuple, torch.Tensor] = {}
        if replayer_of(self.model) is not None:  # replayed: gradients live in their buckets
            for buckets in (self.buckets, self.hybrid_buckets):
                if buckets is not None:
                    buckets.bind()

    def data_slice(self):
        if self.role != CONV_WORKER and self.topo.fc_batch:  # a hybrid FC worker loads its own slice
            return self.topo.batch_slice(self.rank, self.cfg.global_batch)
        return super().data_slice()

    def step(self, t, batch):
        self.optimizer.zero_grad(set_to_none=True)
        M = self.options.micro_batches
        self.buckets.start(M if self.role == CONV_WORKER else M * (len(self.served) + bool(self.topo.fc_batch)))
        if self.hybrid_buckets is not None:
            self.hybrid_buckets.start(M)
        if self.pipeline is not None:
            run = self.pipeline.conv_step if self.role == CONV_WORKER else self.pipeline.fc_step
            share = run(t, batch)
        else:
            share = self._conv_step(t, batch) if self.role == CONV_WORKER else self._fc_step(t)
        self.buckets.finish()
        if self.hybrid_buckets is not None:
            self.hybrid_buckets.finish()
        self.comm.mark("optimizer_start", "compute")
        self.optimizer.step()
        self.comm.mark("optimizer_end", "compute")
        return share

    def _conv_step(self, t, batch):
        self.comm.mark("forward_start", "compute")
        with self.dropout_keys(t, batch.positions):  # a CONV body may hold dropout too
            a = self.part(batch.x)  # (b, *A)
        self.comm.mark("forward_end", "compute")
        grad = self._buffer("grad", a.shape, a.dtype)  # reused every step: the last one's backward is done
        pair = self.topo.pair_group(self.rank)
        sent = self.comm.p2p([("send", a.detach(), self.fc_rank, "activations"),
                              ("send", batch.y, self.fc_rank, "labels")], pair)
        back = self.comm.p2p([("recv", grad, self.fc_rank, "activation_grads")], pair)
        self.comm.wait(back, f"activation gradients from FC worker {self.fc_rank}")
        self.comm.mark("backward_start", "compute")
        a.backward(grad)  # CONV grad buckets launch their allreduce from inside this call
        self.comm.mark("backward_end", "compute")
        self.comm.wait(sent, "send of activations")
        return None

    def _buffer(self, name, shape, dtype=torch.float32) -> torch.Tensor:
        """A receive buffer made once and reused every step (no operator call in the step): a
        step waits for all its receives and has used them before the next step posts again."""
        key = (name, tuple(shape), dtype)
        if key not in self._buffers:
            self._buffers[key] = torch.empty(shape, dtype=dtype, device=self.device)
        return self._buffers[key]

    def _fc_step(self, t):
        b = self.b
        acts = [self._buffer(("acts", j), (b, *self.boundary_shape)) for j in range(len(self.served))]
        labels = [self._buffer(("labels", j), (b,), torch.int64) for j in range(len(self.served))]
        for a in acts:  # a receive writes in place: not into a leaf that requires grad
            a.requires_grad_(False)
            a.grad = None
        # One receive of activations+labels per CONV worker, posted separately so each can
        # complete on its own and be processed while the others are still on the wire.
        works = [self.comm.p2p([("recv", acts[j], src, "activations"), ("recv", labels[j], src, "labels")],
                               self.topo.pair_group(src))
                 for j, src in enumerate(self.served)]
        # The losses stay on the device until every gradient has been sent: a float() here would
        # make the host wait for the FC backward before posting the send. The training loop adds
        # them up when it reads them (steplog.py).
        shares, sends = [], []
        for j in self.comm.as_completed(works, "receive of activations"):
            src = self.served[j]
            a = acts[j].requires_grad_(True)
            pos = positions_of(self.topo.batch_slice(src, self.cfg.global_batch))  # the samples of CONV worker src
            self.comm.mark("forward_start", "compute", src)
            loss = self.forward_loss(self.part, a, labels[j], t, pos)
            self.backward(loss)  # FC grads accumulate over the served CONV workers
            self.comm.mark("backward_end", "compute", src)
            shares.append(loss)
            sends += self.comm.p2p([("send", a.grad, src, "activation_grads")],
                                   self.topo.pair_group(src))  # at once: pipelined
        self.comm.wait(sends, "send of activation gradients")
        return shares

    def full_state_dict(self):
        """FC worker N-k (the first) sends the FC head's state to rank 0, which holds the CONV body
        only (its FC head was released): rank 0 receives into new tensors of the head's shapes and
        puts them under the unsplit model's names."""
        first_fc = self.topo.fc_ranks[0]
        fc_vars = list(self.split.fc.state_dict(keep_vars=True).values())
        if self.rank == first_fc:
            self.comm.send_tensors([v.detach() for v in fc_vars], 0)
        if self.rank != 0:
            return None
        got = [torch.empty(v.shape, dtype=v.dtype, device=self.device) for v in fc_vars]
        self.comm.recv_tensors(got, first_fc)
        names: dict[int, list[str]] = {}  # the parts share the model's tensors: match by identity
        for k, v in self.model.state_dict(keep_vars=True).items():
            names.setdefault(id(v), []).append(k)
        received = {k: t.cpu() for v, t in zip(fc_vars, got) for k in names[id(v)]}
        return {k: received[k] if k in received else v.detach().cpu().clone()
                for k, v in self.model.state_dict().items()}

    def _state_parts(self) -> list:
        return [self.part] + ([self.split.conv] if self.hybrid_buckets is not None else [])

    def checkpoint_state(self):
        """The part this rank trains (a hybrid FC worker's CONV body too) and its momentum, under
        the unsplit model's names: stored once however many CONV (FC) workers hold it."""
        out = state.module_state(self._state_parts(), self.state_names(), self.optimizer, self.rank, self.bn_local)
        if self.options.grad_compression == "powersgd":  # error feedback and step count survive a resume
            out[self._powersgd_key()] = state.to_bytes(self.comm.powersgd_states())
        return out

    def load_checkpoint_state(self, reader):
        key, extra = self._powersgd_key(), {}
        if key in reader.keys:
            extra[key] = torch.empty(reader.keys[key][0], dtype=torch.uint8)
        loaded = state.load_modules(reader, self._state_parts(), self.state_names(), self.optimizer, self.rank,
                                    self.bn_local, extra)
        if key in loaded:
            self.comm.load_powersgd_states(state.from_bytes(loaded[key]))

    def _powersgd_key(self) -> str:
        return per_rank_key("powersgd", self.rank, "states")
