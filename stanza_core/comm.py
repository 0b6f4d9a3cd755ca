"""The only module that calls torch.distributed: process groups, P2P, allreduce, byte counters.

Byte accounting (docs/architecture.md is the contract the performance model also follows):
  * a point-to-point send/recv counts the tensor's payload bytes on sender and receiver;
  * an allreduce of S bytes among n ranks counts 2(n-1)S/n sent and received per member, the
    bandwidth-optimal ring (reduce-scatter + all-gather) that gloo and NCCL run. Kept as exact
    fractions and rounded only when reported, so bucketing does not change the figure.
Only traffic inside `counting()` is a step's; warm-up and the final gather are counted apart.

Timeline (off by default; `--timeline`): inside `counting()` every post of a send/recv, every
allreduce launch and completion, and the strategy's compute marks are recorded as
{step, t, event, category, peer, bytes} with t = time.perf_counter() (CLOCK_MONOTONIC: one clock
for every process on a machine). Allreduce completion comes from the work's future (gloo and
NCCL run the callback when it finishes); a P2P completion is the moment a wait returned.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import queue
import threading
import time
from collections import defaultdict
from fractions import Fraction
from typing import Iterable, Iterator

import torch
import torch.distributed as dist

STAGED_P2P_ENV = "STANZA_STAGED_P2P"
CATEGORIES = ("activations", "labels", "activation_grads", "conv_grads", "fc_grads", "grads", "params", "bn_stats")


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


class PeerError(RuntimeError):
    """A peer died or did not answer within the timeout."""


class ByteCounter:
    def __init__(self):
        self.sent: dict[str, Fraction] = defaultdict(Fraction)
        self.recv: dict[str, Fraction] = defaultdict(Fraction)

    def add(self, category: str, sent: Fraction | int, recv: Fraction | int):
        if sent:
            self.sent[category] += sent
        if recv:
            self.recv[category] += recv

    def snapshot(self) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
        return dict(self.sent), dict(self.recv)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Comm:
    """Process-group handle of one rank; `None` groups and world size 1 make every call local."""

    def __init__(self, rank: int = 0, world_size: int = 1, timeout_s: float = 120.0, backend: str | None = None):
        self.rank, self.world_size, self.backend = rank, world_size, backend
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.step_bytes = ByteCounter()  # traffic of training steps
        self.other_bytes = ByteCounter()  # warm-up, gathers: not a step's
        self._counting = False
        self.groups: dict[str, object] = {}
        self.group_ranks: dict[str, list[int]] = {}
        self.staged_p2p = False  # gloo + CUDA tensors: P2P goes through host copies
        self._ddp_works: list = []  # works of the DDP comm hook in this backward (host-side waits)
        self._powersgd: dict[str, object] = {}  # PowerSGD hook state per group (error feedback, warm start)
        self.timeline: list[dict] | None = None  # a list once enable_timeline() is called
        self.step_starts: list[float] = []  # perf_counter() at each counting() entry (timeline on)
        self._pending: dict[int, tuple] = {}  # id(work) -> (event, category, peer, bytes)

    # -- life cycle ---------------------------------------------------------------------------
    @classmethod
    def from_env(cls, timeout_s: float, device: torch.device, backend: str | None = None) -> "Comm":
        """Join the process group torchrun describes in RANK / WORLD_SIZE / MASTER_ADDR.

        backend None: NCCL on CUDA, gloo on CPU. gloo with CUDA tensors (several ranks sharing
        one GPU, which NCCL refuses) stages point-to-point tensors through host memory; its
        collectives take CUDA tensors directly. On NCCL the watchdog's timeout is set strictly
        larger than the timeout of our own waits, so a dead peer surfaces as our one-line
        PeerError (a host-side wait timing out), never as the watchdog's SIGABRT first."""
        rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        if world == 1 and "MASTER_ADDR" not in os.environ:
            return cls(0, 1, timeout_s)
        backend = backend or ("nccl" if device.type == "cuda" else "gloo")
        pg_timeout = nccl_watchdog_timeout_s(timeout_s) if backend == "nccl" else timeout_s
        kwargs = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=pg_timeout), **kwargs)
        comm = cls(dist.get_rank(), dist.get_world_size(), timeout_s, backend)
        # STAGED_P2P_ENV=1 stages CPU tensors too: the tests run this GPU path's logic on CPU.
        comm.staged_p2p = backend == "gloo" and (device.type == "cuda" or os.environ.get(STAGED_P2P_ENV) == "1")
        return comm

    def new_groups(self, groups: dict[str, list[int]], device: torch.device):
        """Create every group in the same order on every rank, then warm each up (uncounted)."""
        timeout = self.timeout
        if self.backend == "nccl":  # the watchdog of every group outlives our own waits
            timeout = datetime.timedelta(seconds=nccl_watchdog_timeout_s(self.timeout.total_seconds()))
        for name, ranks in groups.items():
            self.groups[name] = dist.new_group(ranks, timeout=timeout) if self.world_size > 1 else None
            self.group_ranks[name] = list(ranks)
        for name, ranks in groups.items():
            if self.rank in ranks and len(ranks) > 1:
                self.allreduce(torch.zeros(1, device=device), name, "warmup")
        self.barrier()

    def barrier(self):
        if self.world_size > 1:
            dist.barrier()

    def close(self, failed: bool = False):
        """Leave the process group. After a failure (a dead peer, a timeout) NCCL's communicators
        may be stuck in a collective that will never finish, and destroying them would block:
        they are aborted instead (gloo's destroy is local and never blocks)."""
        if self.world_size <= 1 or not dist.is_initialized():
            return
        if failed and self.backend == "nccl":
            try:
                from torch.distributed.distributed_c10d import _abort_process_group
                _abort_process_group()
            except Exception:  # best effort: the process is exiting with the error anyway
                pass
            return
        dist.destroy_process_group()

    # -- counting -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def counting(self):
        """Traffic inside this block is a training step's."""
        self._counting = True
        if self.timeline is not None:
            self.step_starts.append(time.perf_counter())
        try:
            yield
        finally:
            self._counting = False

    def _count(self, category: str, sent, recv):
        (self.step_bytes if self._counting else self.other_bytes).add(category, sent, recv)

    # -- timeline -------------------------------------------------------------------------------
    def enable_timeline(self):
        self.timeline = []

    def mark(self, event: str, category: str | None = None, peer: int | None = None, nbytes: int = 0):
        """Record one timeline event now (a no-op unless the timeline is on, inside a step)."""
        if self.timeline is not None and self._counting:
            self.timeline.append({"step": len(self.step_starts) - 1, "t": time.perf_counter(), "event": event,
                                  "category": category, "peer": peer, "bytes": int(nbytes)})

    def _done(self, work):
        if self.timeline is not None and (info := self._pending.pop(id(work), None)):
            self.mark(*info)

    # -- point to point -----------------------------------------------------------------------
    def p2p(self, ops: Iterable[tuple], group: str | None = None) -> list:
        """Post ("send"|"recv", tensor, peer, category[, tag]) ops, sorted by peer; return their works.

        Sorting by peer gives every pair of ranks the same order of posting, which keeps
        NCCL's batched P2P deadlock-free; an empty list posts nothing. A tag (default 0) keeps
        messages apart that one pair has in flight at once (a send matches the receive of
        the same tag, in posting order). `group` names a process group made by new_groups
        (peers are still global ranks): NCCL runs each communicator on its own stream, so
        transfers on different groups do not queue behind each other."""
        ops = sorted(ops, key=lambda o: (o[2], o[0]))
        pg = self.groups.get(group) if group else None
        p2p_ops = []
        for kind, tensor, peer, category, *tag in ops:
            if peer == self.rank:
                raise ValueError(f"rank {self.rank} cannot {kind} to itself")
            if kind not in ("send", "recv"):
                raise ValueError(f"unknown P2P op {kind!r}")
            n = _nbytes(tensor)
            self._count(category, n if kind == "send" else 0, n if kind == "recv" else 0)
            p2p_ops.append(dist.P2POp(dist.isend if kind == "send" else dist.irecv, tensor, peer, group=pg,
                                      tag=tag[0] if tag else 0))
            self.mark(kind, category, peer, n)
        if not p2p_ops:
            return []
        if self.backend == "nccl":  # one NCCL group call: sends and recvs to a peer cannot deadlock
            works = dist.batch_isend_irecv(p2p_ops)
        elif self.staged_p2p:
            works = [_staged(op) for op in p2p_ops]
        else:
            works = [op.op(op.tensor, op.peer, group=pg, tag=op.tag) for op in p2p_ops]
        if self.timeline is not None and self._counting and len(works) == len(ops):
            for w, (kind, tensor, peer, category, *_) in zip(works, ops):
                self._pending[id(w)] = (kind + "_done", category, peer, _nbytes(tensor))
        return works

    def wait(self, works: Iterable, what: str = "point-to-point transfer"):
        for w in works:
            self._wait_one(w, what)

    def _wait_one(self, work, what: str):
        try:
            work.wait(self.timeout)
        except RuntimeError as e:
            raise PeerError(f"rank {self.rank}: {what} failed: {_first_line(e)}") from None
        self._done(work)

    def as_completed(self, groups: list[list], what: str = "receive") -> Iterator[int]:
        """Indices of `groups` (lists of works) in the order their works all complete.

        Gloo's Work.is_completed() does not progress a pending receive, so each group is
        waited on by a helper thread (wait() releases the GIL) and the first to finish is
        handed back first. Errors and timeouts surface as PeerError."""
        if len(groups) <= 1:
            for i, works in enumerate(groups):
                self.wait(works, what)
                yield i
            return
        done: queue.Queue = queue.Queue()

        def waiter(i, works):
            try:
                for w in works:
                    w.wait(self.timeout)
                    self._done(w)
                done.put((i, None))
            except Exception as e:  # handed to the main thread
                done.put((i, e))

        for i, works in enumerate(groups):
            threading.Thread(target=waiter, args=(i, works), daemon=True).start()
        for _ in groups:
            try:
                i, err = done.get(timeout=self.timeout.total_seconds() + 5)
            except queue.Empty:
                raise PeerError(f"rank {self.rank}: {what} timed out after {self.timeout.total_seconds():.0f} s") from None
            if err is not None:
                raise PeerError(f"rank {self.rank}: {what} failed: {_first_line(err)}")
            yield i

    # -- collectives ----------------------------------------------------------------------------
    def allreduce(self, tensor: torch.Tensor, group: str | None, category: str, async_op: bool = False):
        """Sum `tensor` in place over `group` (None: WORLD); count the ring's bytes."""
        ranks = self.group_ranks[group] if group else list(range(self.world_size))
        n = len(ranks)
        if n == 1:
            return None
        ring = Fraction(2 * (n - 1) * _nbytes(tensor), n)
        self._count(category, ring, ring)
        work = dist.all_reduce(tensor, group=self.groups.get(group) if group else None, async_op=True)
        self._mark_allreduce(work, category, _nbytes(tensor))
        if async_op:
            return work
        self._wait_one(work, f"allreduce of {category}")
        return None

    def _mark_allreduce(self, work, category: str, nbytes: int):
        """Timeline: an allreduce launched now, and its completion from the work's future."""
        if self.timeline is not None and self._counting:
            self.mark("allreduce", category, None, nbytes)
            done = dict(self.timeline[-1], event="allreduce_done")
            work.get_future().then(lambda _f: self.timeline.append(dict(done, t=time.perf_counter())))

    def sum_scalar(self, value) -> float:
        """Sum of one number over every rank (None counts 0), uncounted: the step's global loss,
        which every rank checks for NaN/inf (a float or a 0-d tensor)."""
        v = 0.0 if value is None else value
        if self.world_size == 1:
            return float(v)
        t = (v.detach().reshape(1).float() if isinstance(v, torch.Tensor) else torch.tensor([float(v)]))
        if self.backend == "nccl":
            t = t.cuda()
        work = dist.all_reduce(t, async_op=True)
        self._wait_one(work, "allreduce of the loss")
        return float(t)

    def peer_error(self, e: BaseException) -> BaseException:
        """A failure of a distributed run as a one-line PeerError when it is a communication
        failure (a peer died, a connection closed, a timeout); anything else unchanged."""
        if isinstance(e, PeerError):
            return e
        comm_failure = isinstance(e, getattr(dist, "DistError", ())) or any(
            s in str(e) for s in ("gloo", "Gloo", "NCCL", "Connection", "connection", "Timed out", "timed out",
                                  "Socket", "Broken pipe", "peer"))
        if self.world_size > 1 and comm_failure:
            return PeerError(f"rank {self.rank}: communication failed: {_first_line(e)}")
        return e

    def hook_allreduce(self, bucket: "FlatBucket", group: str, category: str, compression: str):
        """Sum `bucket`'s buffer in place over `group` through one of DDP's own comm hooks
        (fp16 / bf16 compression, or PowerSGD rank 1); returns a future (None for a group of one).

        The hooks average; the caller multiplies by the group size. Counted bytes follow what the
        hook really allreduces: 2-byte values for fp16/bf16; for PowerSGD the vanilla buffer in
        its first `POWERSGD_START` steps, then its uncompressed tensors plus P and Q, as the
        hook's own tally (`total_numel_after_compression`) records them."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook as psgd

        n = len(self.group_ranks[group])
        if n == 1:
            return None
        pg = self.groups[group]
        buf = bucket.buffer()
        if compression in ("fp16", "bf16"):
            hook = default_hooks.fp16_compress_hook if compression == "fp16" else default_hooks.bf16_compress_hook
            fut = hook(pg, bucket)
            nbytes = buf.numel() * 2
        elif compression == "powersgd":
            state = self._powersgd.get(group)
            if state is None:
                state = self._powersgd[group] = psgd.PowerSGDState(
                    process_group=pg, matrix_approximation_rank=1, start_powerSGD_iter=POWERSGD_START)
            vanilla, before = state.iter < state.start_powerSGD_iter, state.total_numel_after_compression
            fut = psgd.powerSGD_hook(state, bucket)
            numel = buf.numel() if vanilla else state.total_numel_after_compression - before
            nbytes = numel * buf.element_size()
        else:
            raise ValueError(f"unknown gradient compression {compression!r}")
        ring = Fraction(2 * (n - 1) * nbytes, n)
        self._count(category, ring, ring)
        return fut

    def powersgd_states(self) -> dict[str, dict]:
        """PowerSGD hook state per group (iteration, error feedback, warm-start P and Q), to checkpoint."""
        out = {}
        for g, s in self._powersgd.items():
            d = {slot: getattr(s, slot) for slot in type(s).__slots__ if slot != "process_group"}
            name, keys, pos, has_gauss, gauss = d.pop("rng").get_state()  # numpy: kept as plain values
            d["rng"] = [name, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(gauss)]
            out[g] = d
        return out

    def load_powersgd_states(self, states: dict[str, dict]):
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

        for group, slots in states.items():
            state = psgd.PowerSGDState.__new__(psgd.PowerSGDState)
            import numpy as np

            for slot, value in slots.items():
                if slot == "rng":
                    rng = np.random.RandomState()
                    rng.set_state((value[0], value[1].numpy().astype("uint32"), *value[2:]))
                    value = rng
                setattr(state, slot, value)
            state.process_group = self.groups[group]
            self._powersgd[group] = state

    def wait_future(self, fut, what: str):
        try:
            return fut.wait()
        except RuntimeError as e:
            raise PeerError(f"rank {self.rank}: {what} failed: {_first_line(e)}") from None

    def ddp_hook(self, average: bool = True):
        """A DistributedDataParallel comm hook: counts each bucket as `grads`, then performs
        the same averaging allreduce as DDP's default hook (average=False: the allreduce alone,
        for replayed compute, whose gradient values mean nothing). Its works are kept so that
        `wait_ddp()` can wait on them on the host with our timeout (on NCCL, DDP itself only
        makes the compute stream wait: a dead peer would hang the next synchronisation)."""
        def hook(_state, bucket):
            buf = bucket.buffer()
            ring = Fraction(2 * (self.world_size - 1) * _nbytes(buf), self.world_size)
            self._count("grads", ring, ring)
            work = dist.all_reduce(buf, async_op=True)
            self._mark_allreduce(work, "grads", _nbytes(buf))  # DDP's buckets on the timeline too
            self._ddp_works.append(work)
            if not average:
                return work.get_future().then(lambda f: f.value()[0])
            return work.get_future().then(lambda f: f.value()[0].div_(self.world_size))
        return hook

    def wait_ddp(self):
        """Host-side wait, with the timeout, on the gradient allreduces of the last backward."""
        works, self._ddp_works = self._ddp_works, []
        self.wait(works, "allreduce of grads")

    def wrap_ddp(self, model: torch.nn.Module, device: torch.device, bucket_mb: float, replayed: bool = False):
        """torch's DDP over `model`. `replayed` (replayed compute, whose values mean nothing): no
        initial broadcast of the parameters (uncounted setup traffic that would write every
        parameter on every rank) and no averaging of the allreduced buckets (host arithmetic)."""
        from torch.nn.parallel import DistributedDataParallel as DDP
        # broadcast_buffers=False: per-forward buffer broadcasts would be uncounted traffic.
        ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                  bucket_cap_mb=bucket_mb, broadcast_buffers=False, gradient_as_bucket_view=True,
                  init_sync=not replayed)
        ddp.register_comm_hook(None, self.ddp_hook(average=not replayed))
        return ddp

    def all_gather_object(self, obj) -> list:
        """Every rank's `obj` (pickled over the world; used once at the end, uncounted)."""
        if self.world_size == 1:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def send_tensors(self, tensors: list[torch.Tensor], dst: int):
        self.wait(self.p2p([("send", t.contiguous(), dst, "gather") for t in tensors]), "gather")

    def recv_tensors(self, tensors: list[torch.Tensor], src: int):
        self.wait(self.p2p([("recv", t, src, "gather") for t in tensors]), "gather")


def nccl_watchdog_timeout_s(wait_timeout_s: float) -> float:
    """NCCL watchdog timeout for a given wait timeout: strictly larger (by half, at least 30 s),
    so our own host-side wait always fails first, with its one-line message."""
    return wait_timeout_s + max(30.0, 0.5 * wait_timeout_s)


class _StagedWork:
    """A gloo P2P transfer of a CUDA tensor through a host copy (gloo's send/recv read and
    write host memory only). A receive copies into the CUDA tensor once it has completed."""

    def __init__(self, work, host: torch.Tensor, target: torch.Tensor | None):
        self.work, self.host, self.target = work, host, target

    def wait(self, timeout=None):
        ok = self.work.wait() if timeout is None else self.work.wait(timeout)
        if self.target is not None:
            self.target.copy_(self.host)
            self.target = None
        return ok

    def is_completed(self) -> bool:
        return self.work.is_completed()


def _staged(op) -> _StagedWork:
    if op.op is dist.irecv:  # a receive lands in host memory first
        host = torch.empty(op.tensor.shape, dtype=op.tensor.dtype)
    else:  # a send's payload, copied out (synchronously) before gloo reads it
        host = op.tensor.detach().to("cpu", copy=True)
    work = op.op(host, op.peer, group=op.group, tag=op.tag)
    return _StagedWork(work, host, op.tensor if op.op is dist.irecv else None)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    # gloo prefixes its source location: keep the message a user can act on
    return line.split("] ", 1)[-1] if line.startswith("[") else line


def report(counter_value: dict[str, Fraction], steps: int) -> dict[str, int]:
    """Per-step whole bytes by category from a counter accumulated over `steps` steps."""
    return {k: round(v / steps) for k, v in sorted(counter_value.items()) if v}
