"""`Comm`, one rank's process-group handle: life cycle, P2P, allreduce, waits with our timeout,
byte counting (accounting.py) and the timeline. Strategies call only this class.

Payload scaling (`payload_scale` F > 1, replayed compute only: `--payload-scale`): every message
carries the first ceil(n / F) of its n elements (a view, no copy; integer tensors, the labels,
whole), while the counters keep the
logical bytes (what an unscaled run moves) and `wire_bytes` the bytes that really crossed. The
run plan shapes every link to 1/F of its rate as well, so each transfer takes the emulated time
it would unscaled; the number of messages and their order do not change. Replayed values mean
nothing, so which elements travel does not matter.

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
from fractions import Fraction
from typing import Iterable, Iterator

import torch
import torch.distributed as dist

from . import hooks
from .accounting import ByteCounter, nbytes
from .failures import HOST_RANKS_ENV, PeerError, first_line, join_timeout_s, nccl_watchdog_timeout_s
from .record import Recorder
from .staged import STAGED_P2P_ENV, staged


def _cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _set_timeout(timeout: datetime.timedelta) -> None:
    """The default group's timeout for the operations that follow (torch >= 2.9:
    dist.set_timeout; before: the private _set_pg_timeout, torch >= 2.3)."""
    setter = getattr(dist, "set_timeout", None) or getattr(dist.distributed_c10d, "_set_pg_timeout")
    setter(timeout)


class Comm:
    """Process-group handle of one rank; `None` groups and world size 1 make every call local."""

    def __init__(self, rank: int = 0, world_size: int = 1, timeout_s: float = 120.0, backend: str | None = None):
        self.rank, self.world_size, self.backend = rank, world_size, backend
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.step_bytes = ByteCounter()  # traffic of training steps (logical bytes: as an unscaled run)
        self.other_bytes = ByteCounter()  # warm-up, gathers: not a step's
        self.wire_bytes = ByteCounter()  # a step's bytes that crossed the wire (step_bytes / F)
        self.payload_scale = 1  # F: a message carries 1/F of its elements (replayed compute only)
        self.messages: list[int] = []  # logical bytes of each message this rank posted in steps
        self._counting = False
        self.groups: dict[str, object] = {}
        self.checkpoint_pg = None  # gloo group for checkpoint collectives under NCCL (checkpoint_io.py)
        self.group_ranks: dict[str, list[int]] = {}
        self.staged_p2p = False  # gloo + CUDA tensors: P2P goes through host copies
        self.ddp_works: list = []  # works of the DDP comm hook in this backward (host-side waits)
        self.powersgd = hooks.PowerSGDStates()  # per group: error feedback, warm start
        self.timeline: list[dict] | None = None  # a list once enable_timeline() is called
        self.step_starts: list[float] = []  # perf_counter() at each counting() entry (timeline on)
        self._pending: dict[int, tuple] = {}  # id(work) -> (event, category, peer, bytes)
        self.recorder: Recorder | None = None  # the rank's program, once record() is called (record.py)

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
        # joining waits for the slowest rank's start-up: longer on a machine with more ranks than
        # cores (failures.join_timeout_s); the steps' waits keep timeout_s
        local = int(os.environ.get(HOST_RANKS_ENV) or os.environ.get("LOCAL_WORLD_SIZE") or world)
        join_s = max(join_timeout_s(timeout_s, local, _cores()), pg_timeout)
        try:
            dist.init_process_group(backend, rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=join_s), **kwargs)
        except RuntimeError as e:  # DistStoreError, DistNetworkError: a rank missing or unreachable
            raise PeerError(f"rank {rank}: the process group of {world} ranks did not form within {join_s:.0f} s "
                            f"({first_line(e)}): a rank died or is still starting (on a crowded machine, "
                            f"raise --timeout-s)") from None
        if join_s > pg_timeout:
            _set_timeout(datetime.timedelta(seconds=pg_timeout))
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
        they are aborted instead. A failed gloo group is left as it is: the rank then leaves at
        once (exit_policy.exit_now, which does so only while the group is up), since destroying
        it here sent the rank through the interpreter's teardown, where DDP's reducer and gloo's
        threads on the dead peer aborted the process now and then (exit -6 after its error line)."""
        if self.world_size <= 1 or not dist.is_initialized():
            return
        if failed:
            if self.backend == "nccl":
                try:
                    from torch.distributed.distributed_c10d import _abort_process_group  # private torch API: where it is missing, the except below takes it
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

    def count(self, category: str, sent, recv, wire_sent=None, wire_recv=None):
        """Count a transfer's logical bytes (and, inside a step, its wire bytes: the same unless
        payloads are scaled) under `category`."""
        if not self._counting:
            self.other_bytes.add(category, sent, recv)
            return
        self.step_bytes.add(category, sent, recv)
        self.wire_bytes.add(category, sent if wire_sent is None else wire_sent, recv if wire_recv is None else wire_recv)

    def set_payload_scale(self, scale: int):
        """F (module docstring): 1, or an integer > 1 for replayed compute (the engine checks it)."""
        if not isinstance(scale, int) or isinstance(scale, bool) or scale < 1:
            raise ValueError(f"payload scale must be an integer >= 1, got {scale!r}")
        self.payload_scale = scale

    def on_wire(self, tensor: torch.Tensor) -> torch.Tensor:
        """What of `tensor` crosses the wire: all of it, or (F > 1) its first ceil(n / F) elements,
        a view of a contiguous tensor (a non-contiguous one: new storage of that size, untouched).
        Integer tensors (labels: b values the FC worker's loss indexes with) always travel whole."""
        f = self.payload_scale
        if f == 1 or not tensor.is_floating_point():  # integers (labels) index the loss: they travel whole
            return tensor
        m = -(-tensor.numel() // f)
        flat = tensor.view(-1) if tensor.is_contiguous() else tensor.new_empty(m)
        return flat[:m]

    # -- timeline -------------------------------------------------------------------------------
    def enable_timeline(self):
        self.timeline = []

    # -- the rank's program (record.py) ---------------------------------------------------------
    def record(self) -> Recorder:
        """Record this rank's program from now on (inside steps: record.Recorder.begin_step)."""
        self.recorder = Recorder(self.rank)
        return self.recorder

    def _record_collective(self, handle, group: str | None, nbytes: int, category: str):
        """A collective launched now (its work or future `handle`), in the recorded program."""
        if self.recorder is not None and self._counting:
            self.recorder.bind(handle, self.recorder.collective("allreduce", group, nbytes, category))

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
        p2p_ops, recorded = [], []
        rec = self.recorder if self.recorder is not None and self._counting else None
        for kind, tensor, peer, category, *tag in ops:
            if peer == self.rank:
                raise ValueError(f"rank {self.rank} cannot {kind} to itself")
            if kind not in ("send", "recv"):
                raise ValueError(f"unknown P2P op {kind!r}")
            n, wire = nbytes(tensor), self.on_wire(tensor)
            w = nbytes(wire)
            send = kind == "send"
            self.count(category, n if send else 0, 0 if send else n, w if send else 0, 0 if send else w)
            if send and self._counting:
                self.messages.append(n)
            p2p_ops.append(dist.P2POp(dist.isend if send else dist.irecv, wire, peer, group=pg,
                                      tag=tag[0] if tag else 0))
            if rec is not None:
                recorded.append(rec.p2p(kind, peer, n, category, tag[0] if tag else 0, group))
            self.mark(kind, category, peer, n)
        if not p2p_ops:
            return []
        if self.backend == "nccl":  # one NCCL group call: sends and recvs to a peer cannot deadlock
            works = dist.batch_isend_irecv(p2p_ops)
        elif self.staged_p2p:
            works = [staged(op) for op in p2p_ops]
        else:
            works = [op.op(op.tensor, op.peer, group=pg, tag=op.tag) for op in p2p_ops]
        if rec is not None:
            for w, op_id in zip(works, recorded):
                rec.bind(w, op_id)
        if self.timeline is not None and self._counting and len(works) == len(ops):
            for w, (kind, tensor, peer, category, *_) in zip(works, ops):
                self._pending[id(w)] = (kind + "_done", category, peer, nbytes(tensor))
        return works

    def wait(self, works: Iterable, what: str = "point-to-point transfer"):
        works = list(works)
        if self.recorder is not None and self._counting:
            self.recorder.wait(works)
        for w in works:
            self._wait_one(w, what)

    def _wait_one(self, work, what: str):
        try:
            work.wait(self.timeout)
        except RuntimeError as e:
            raise PeerError(f"rank {self.rank}: {what} failed: {first_line(e)}") from None
        self._done(work)

    def as_completed(self, groups: list[list], what: str = "receive") -> Iterator[int]:
        """Indices of `groups` (lists of works) in the order their works all complete.

        Gloo's Work.is_completed() does not progress a pending receive, so each group is
        waited on by a helper thread (wait() releases the GIL) and the first to finish is
        handed back first. Errors and timeouts surface as PeerError."""
        rec = self.recorder if self.recorder is not None and self._counting else None
        if rec is not None:
            rec.begin_any(groups)
        try:
            yield from self._as_completed(groups, what, rec)
        finally:
            if rec is not None:
                rec.end_any()

    def _as_completed(self, groups: list[list], what: str, rec: Recorder | None) -> Iterator[int]:
        if len(groups) <= 1:
            for i, works in enumerate(groups):
                for w in works:
                    self._wait_one(w, what)
                if rec is not None:
                    rec.body(i)
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
                raise PeerError(f"rank {self.rank}: {what} failed: {first_line(err)}")
            if rec is not None:
                rec.body(i)
            yield i

    # -- collectives ----------------------------------------------------------------------------
    def allreduce(self, tensor: torch.Tensor, group: str | None, category: str, async_op: bool = False):
        """Sum `tensor` in place over `group` (None: WORLD); count the ring's bytes."""
        ranks = self.group_ranks[group] if group else list(range(self.world_size))
        n = len(ranks)
        if n == 1:
            return None
        wire = self.on_wire(tensor)
        ring, wire_ring = (Fraction(2 * (n - 1) * nbytes(t), n) for t in (tensor, wire))
        self.count(category, ring, ring, wire_ring, wire_ring)
        if self._counting:
            self.messages.append(nbytes(tensor))
        work = dist.all_reduce(wire, group=self.groups.get(group) if group else None, async_op=True)
        self.mark_allreduce(work, category, nbytes(tensor))
        self._record_collective(work, group, nbytes(tensor), category)
        if async_op:
            return work
        if self.recorder is not None and self._counting:
            self.recorder.wait([work])
        self._wait_one(work, f"allreduce of {category}")
        return None

    def mark_allreduce(self, work, category: str, nbytes: int):
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
            return PeerError(f"rank {self.rank}: communication failed: {first_line(e)}")
        return e

    def wait_future(self, fut, what: str):
        if self.recorder is not None and self._counting:
            self.recorder.wait([fut])
        try:
            return fut.wait()
        except RuntimeError as e:
            raise PeerError(f"rank {self.rank}: {what} failed: {first_line(e)}") from None

    def wait_ddp(self):
        """Host-side wait, with the timeout, on the gradient allreduces of the last backward."""
        works, self.ddp_works = self.ddp_works, []
        self.wait(works, "allreduce of grads")

    # -- gradient hooks (hooks.py) ----------------------------------------------------------------
    def hook_allreduce(self, bucket: "hooks.FlatBucket", group: str, category: str, compression: str):
        """`bucket` summed over `group` through a DDP compression hook (hooks.compressed_allreduce)."""
        fut, logical = hooks.compressed_allreduce(self, bucket, group, category, compression)
        if fut is not None:
            self._record_collective(fut, group, logical, category)
        return fut

    def powersgd_states(self) -> dict[str, dict]:
        """PowerSGD hook state per group (iteration, error feedback, warm-start P and Q), to checkpoint."""
        return self.powersgd.to_checkpoint()

    def load_powersgd_states(self, states: dict[str, dict]):
        self.powersgd.load(states, self.groups)

    def wrap_ddp(self, model: torch.nn.Module, device: torch.device, bucket_mb: float, replayed: bool = False):
        """torch's DDP over `model`, its buckets counted and waited on by this handle (hooks.wrap_ddp)."""
        return hooks.wrap_ddp(self, model, device, bucket_mb, replayed)

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


def group_is_up() -> bool:
    """Whether this process has a default process group (exit_policy leaves at once then)."""
    return dist.is_available() and dist.is_initialized()


def backend_name() -> str:
    """The default process group's backend, "none" without one (the metrics' config records it)."""
    return dist.get_backend() if group_is_up() else "none"
