"""Stanza beyond the paper: hybrid FC workers, pipelined micro-batches, compressed traffic.

  hybrid FC worker   an FC worker also runs the CONV body on its own slice of the global batch
                     (layout.hybrid_batches); its activations reach its FC head without the
                     network and its CONV gradients join the CONV allreduce, so no node idles.
  micro-batches M    a CONV worker cuts its batch into M chunks (topology.chunk_slices): chunk
                     j's activations are on the wire while chunk j+1 is computed, and each
                     chunk's backward runs as its activation gradient returns; the FC worker
                     takes chunks as they arrive. Dropout masks are keyed by global position.
  boundary dtype     activations and activation gradients cross the boundary as fp32/bf16/fp16;
                     a hybrid FC worker rounds its own activations the same way, so every sample
                     sees the same arithmetic wherever it is computed.
  grad compression   the CONV allreduce runs DDP's own comm hooks (fp16 / bf16 / PowerSGD) on
                     each bucket, through comm.FlatBucket (the GradBucket interface).

With M = 1, share 0, fp32 and no compression this is the paper's step (stanza.py runs it).
BSP-exact: same gradients as `local` up to summation order (fp32 wire, no compression).
"""
from __future__ import annotations

import torch

from ...comm import FlatBucket
from ...topology import chunk_slices
from ..base import positions_of

WIRE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def uses_pipeline(cfg) -> bool:
    """Whether a config needs this module's step (anything beyond the paper's Stanza: an option
    other than k away from its default)."""
    return any(name != "fc_workers" for name in cfg.variant.options.given())


def hooked_buckets(cls):
    """A GradBuckets subclass whose allreduce goes through a DDP comm hook (`compression`)."""

    class HookedGradBuckets(cls):
        def __init__(self, params, comm, group, category, bucket_mb, device, compression):
            super().__init__(params, comm, group, category, bucket_mb, device)
            self.alone = False  # a compression hook changes the values even on one rank: keep it
            self.compression = compression
            self.size = len(comm.group_ranks[group])

        def _launch(self, i):
            bucket = FlatBucket(i, len(self.buckets), self.flat[i], self.buckets[i])
            return self.comm.hook_allreduce(bucket, self.group, self.category, self.compression)

        def _wait(self, i):
            out = self.comm.wait_future(self.works[i], f"allreduce of {self.category}")
            out = out[0] if isinstance(out, (list, tuple)) else out
            if out is not self.flat[i]:
                self.flat[i].copy_(out)
            self.flat[i].mul_(self.size)  # the hooks average; the step needs the sum

    return HookedGradBuckets


class Pipeline:
    """The step of one stanza rank with the options above (built by Stanza when they are set)."""

    def __init__(self, st):
        self.st, self.cfg, self.topo, self.comm = st, st.cfg, st.topo, st.comm
        self.wire = WIRE_DTYPES[st.options.boundary_dtype]
        self.M = st.options.micro_batches

    def _to_wire(self, t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(self.wire).contiguous()

    # -- CONV worker -----------------------------------------------------------------------
    def conv_step(self, t, batch):
        st, comm = self.st, self.comm
        fc, sends, backs = st.fc_rank, [], []
        for c in batch.chunks(self.M):  # chunk j+1 is computed while chunk j is on the wire
            comm.mark("forward_start", "compute")
            with st.dropout_keys(t, c.positions):
                a = st.split.conv(c.x)  # (bj, *A)
            comm.mark("forward_end", "compute")
            sends += comm.p2p([("send", self._to_wire(a), fc, "activations"), ("send", c.y.contiguous(), fc, "labels")])
            grad = torch.empty(a.shape, dtype=self.wire, device=a.device)
            backs.append((a, grad, comm.p2p([("recv", grad, fc, "activation_grads")])))
        for a, grad, work in backs:  # chunks return in order: backward each as it comes
            comm.wait(work, f"activation gradients from FC worker {fc}")
            comm.mark("backward_start", "compute")
            a.backward(grad.to(a.dtype))  # CONV buckets launch their allreduce after the last chunk
            comm.mark("backward_end", "compute")
        comm.wait(sends, "send of activations")
        return None

    # -- FC worker -------------------------------------------------------------------------
    def fc_step(self, t, batch):
        st, comm, G = self.st, self.comm, self.cfg.global_batch
        shape, device = st.boundary_shape, st.device
        # Post every receive first: chunk j of CONV worker i, activations + labels.
        chunks = {src: chunk_slices(self.topo.batch_slice(src, G), self.M) for src in st.served}
        keys, works, bufs = [], [], {}
        for src in st.served:
            for j, c in enumerate(chunks[src]):
                n = c.stop - c.start
                a = torch.empty((n, *shape), dtype=self.wire, device=device)
                y = torch.empty(n, dtype=torch.int64, device=device)
                works.append(comm.p2p([("recv", a, src, "activations"), ("recv", y, src, "labels")]))
                keys.append((src, j))
                bufs[src, j] = (a, y)
        share = torch.zeros((), device=device)
        own = []
        if self.topo.fc_batch:  # hybrid: this node's own CONV forward, then its FC work at once
            for c in batch.chunks(self.M):
                with st.dropout_keys(t, c.positions):
                    a = st.split.conv(c.x)
                a_in = a.detach().to(self.wire).to(a.dtype).requires_grad_(True)
                share += self._fc_chunk(t, a_in, c.y, c.positions)
                own.append((a, a_in.grad.to(self.wire).to(a.dtype)))
        # Remote chunks as they arrive; a CONV worker's chunks are handled in order (their
        # gradients go back over one ordered channel).
        arrived = {src: [False] * len(chunks[src]) for src in st.served}
        nxt = dict.fromkeys(st.served, 0)
        sends = []
        for i in comm.as_completed(works, "receive of activations"):
            src, j = keys[i]
            arrived[src][j] = True
            while nxt[src] < len(chunks[src]) and arrived[src][nxt[src]]:
                jj = nxt[src]
                a_wire, y = bufs[src, jj]
                a_in = a_wire.to(torch.float32).requires_grad_(True)
                share += self._fc_chunk(t, a_in, y, positions_of(chunks[src][jj]))
                sends += comm.p2p([("send", self._to_wire(a_in.grad), src, "activation_grads")])
                nxt[src] += 1
        for a, grad in own:  # own CONV backward last: the CONV workers' gradients went out first
            a.backward(grad)
        comm.wait(sends, "send of activation gradients")
        return share

    def _fc_chunk(self, t, a_in, y, positions):
        """FC forward + backward of one chunk at these global positions; its share of the loss."""
        self.comm.mark("forward_start", "compute")
        loss = self.st.forward_loss(self.st.split.fc, a_in, y, t, positions)
        self.st.backward(loss)  # FC grads accumulate over every chunk
        self.comm.mark("backward_end", "compute")
        return loss.detach()
