"""Gradient allreduce through DDP's comm hooks: torch's DDP with our counting hook, the engine's
own buckets through DDP's compression hooks (fp16 / bf16 / PowerSGD rank 1), and PowerSGD's
state per process group (error feedback, warm-start P and Q), which a checkpoint carries.

`Comm` (process_group.py) is the handle strategies call; these functions do the work for it.
"""
from __future__ import annotations

import warnings
from fractions import Fraction

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import numpy as np
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook as psgd

from .accounting import nbytes

POWERSGD_START = 2  # PowerSGD runs vanilla allreduce for its first 2 steps (the minimum torch allows
# with error feedback); the performance model's steady state starts at step 2


class FlatBucket:
    """The part of torch's GradBucket interface that DDP's comm hooks call (buffer, index,
    is_last, gradients, parameters), over one flat gradient buffer of the engine's own buckets:
    torch's GradBucket has no Python constructor, and the hooks only duck-type it."""

    def __init__(self, index: int, count: int, buffer: torch.Tensor, params: list):
        self._index, self._count, self._buffer, self._params = index, count, buffer, params

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def index(self) -> int:
        return self._index

    def is_last(self) -> bool:
        return self._index == self._count - 1

    def parameters(self) -> list:
        return self._params

    def gradients(self) -> list[torch.Tensor]:
        """Views of the buffer shaped like the parameters (hooks write results through them)."""
        out, offset = [], 0
        for p in self._params:
            out.append(self._buffer[offset:offset + p.numel()].view(p.shape))
            offset += p.numel()
        return out


class PowerSGDStates:
    """PowerSGD hook state per process group name, made at a group's first compressed bucket."""

    def __init__(self):
        self._states: dict[str, object] = {}

    def of(self, group: str, pg):
        state = self._states.get(group)
        if state is None:
            state = self._states[group] = psgd.PowerSGDState(
                process_group=pg, matrix_approximation_rank=1, start_powerSGD_iter=POWERSGD_START)
        return state

    def to_checkpoint(self) -> dict[str, dict]:
        """Per group: iteration, error feedback, warm-start P and Q, as plain values to checkpoint."""
        out = {}
        for g, s in self._states.items():
            d = {slot: getattr(s, slot) for slot in type(s).__slots__ if slot != "process_group"}
            name, keys, pos, has_gauss, gauss = d.pop("rng").get_state()  # numpy: kept as plain values
            d["rng"] = [name, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(gauss)]
            out[g] = d
        return out

    def load(self, states: dict[str, dict], groups: dict[str, object]):
        """Restore `to_checkpoint()`'s states onto this run's process groups (`groups` by name)."""
        for group, slots in states.items():
            state = psgd.PowerSGDState.__new__(psgd.PowerSGDState)
            for slot, value in slots.items():
                if slot == "rng":
                    rng = np.random.RandomState()
                    rng.set_state((value[0], value[1].numpy().astype("uint32"), *value[2:]))
                    value = rng
                setattr(state, slot, value)
            state.process_group = groups[group]
            self._states[group] = state


def compressed_allreduce(comm, bucket: FlatBucket, group: str, category: str, compression: str):
    """Sum `bucket`'s buffer in place over `group` through one of DDP's own comm hooks
    (fp16 / bf16 compression, or PowerSGD rank 1); returns a future (None for a group of one) and
    the logical bytes the bucket's allreduce carries per rank (what an unscaled run allreduces).

    The hooks average; the caller multiplies by the group size. Counted bytes follow what the
    hook really allreduces: 2-byte values for fp16/bf16; for PowerSGD the vanilla buffer in
    its first `POWERSGD_START` steps, then its uncompressed tensors plus P and Q, as the
    hook's own tally (`total_numel_after_compression`) records them."""
    n = len(comm.group_ranks[group])
    if n == 1:
        return None, 0
    pg = comm.groups[group]
    full = bucket.buffer()
    if comm.payload_scale > 1:  # replayed: the hook compresses 1/F of the bucket; its caller gets the whole back
        if compression == "powersgd":
            raise ValueError("payload scaling does not apply to PowerSGD (its factors' sizes do not scale with "
                             "the bucket): run it with payload scale 1")
        bucket = FlatBucket(bucket.index(), bucket.index() + 1, comm.on_wire(full), [])  # fp16/bf16 read the buffer only
    buf = bucket.buffer()
    if compression in ("fp16", "bf16"):
        hook = default_hooks.fp16_compress_hook if compression == "fp16" else default_hooks.bf16_compress_hook
        fut = hook(pg, bucket)
        n_bytes = buf.numel() * 2
    elif compression == "powersgd":
        state = comm.powersgd.of(group, pg)
        vanilla, before = state.iter < state.start_powerSGD_iter, state.total_numel_after_compression
        fut = psgd.powerSGD_hook(state, bucket)
        numel = buf.numel() if vanilla else state.total_numel_after_compression - before
        n_bytes = numel * buf.element_size()
    else:
        raise ValueError(f"unknown gradient compression {compression!r}")
    logical = n_bytes if buf is full else full.numel() * 2  # F > 1 (fp16/bf16): what an unscaled bucket sends
    ring, wire_ring = Fraction(2 * (n - 1) * logical, n), Fraction(2 * (n - 1) * n_bytes, n)
    comm.count(category, ring, ring, wire_ring, wire_ring)
    if comm._counting:
        comm.messages.append(logical)
    if buf is not full:
        fut = fut.then(lambda _f: full)
    return fut, logical


def ddp_hook(comm, average: bool = True):
    """A DistributedDataParallel comm hook: counts each bucket as `grads`, then performs
    the same averaging allreduce as DDP's default hook (average=False: the allreduce alone,
    for replayed compute, whose gradient values mean nothing). Its works are kept so that
    `Comm.wait_ddp()` can wait on them on the host with our timeout (on NCCL, DDP itself only
    makes the compute stream wait: a dead peer would hang the next synchronisation)."""
    def hook(_state, bucket):
        buf = bucket.buffer()
        wire = comm.on_wire(buf)  # all of it, or 1/F of it (payload scaling, replayed compute)
        ring, wire_ring = (Fraction(2 * (comm.world_size - 1) * nbytes(t), comm.world_size) for t in (buf, wire))
        comm.count("grads", ring, ring, wire_ring, wire_ring)
        if comm._counting:
            comm.messages.append(nbytes(buf))
        work = dist.all_reduce(wire, async_op=True)
        comm.mark_allreduce(work, "grads", nbytes(buf))  # DDP's buckets on the timeline too
        comm._record_collective(work, None, nbytes(buf), "grads")  # and in the recorded program
        comm.ddp_works.append(work)
        if not average:  # replayed: DDP gets its whole bucket back (values mean nothing)
            return work.get_future().then(lambda _f: buf)
        return work.get_future().then(lambda f: f.value()[0].div_(comm.world_size))
    return hook


def wrap_ddp(comm, model: torch.nn.Module, device: torch.device, bucket_mb: float, replayed: bool = False):
    """torch's DDP over `model`. `replayed` (replayed compute, whose values mean nothing): no
    initial broadcast of the parameters (uncounted setup traffic that would write every
    parameter on every rank) and no averaging of the allreduced buckets (host arithmetic)."""
    # broadcast_buffers=False: per-forward buffer broadcasts would be uncounted traffic. Newer
    # torch deprecates it for forward_sync_buffers, which still syncs buffers at construction
    # (uncounted traffic in a replayed run, whose init_sync is off); its own warning says to keep
    # broadcast_buffers=False until that can be turned off, so the warning is silenced here only.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*broadcast_buffers.* is deprecated", category=FutureWarning)
        ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                  bucket_cap_mb=bucket_mb, broadcast_buffers=False, gradient_as_bucket_view=True,
                  init_sync=not replayed)
    ddp.register_comm_hook(None, ddp_hook(comm, average=not replayed))
    return ddp
