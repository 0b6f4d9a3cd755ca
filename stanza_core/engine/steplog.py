"""Each training step's start, end and loss share, recorded without stopping the host.

A GPU step the host must wait for at its end costs the host's launch latency again at the start
of the next one, which a short step cannot hide. So the training loop records, per step:

  start, end   on CUDA (real compute, no timeline): a pair of CUDA events recorded on the
               device's stream, read later; elsewhere time.perf_counter() after a device sync
               (the CPU, --timeline runs whose compute marks are host times, replayed runs whose
               compute is host sleeps), as before;
  loss share   the 0-d tensor (or a list of them, or a float, or None) the strategy returned,
               left on the device: a sum of per-sample losses, read as `scale` x its sum.

`read()` turns what is pending into numbers with one synchronisation: the loop calls it every
`--log-every` steps and before anything that must know the losses are finite (a checkpoint,
a saved model, the end of the run). Times come back as seconds; spans on the host's
perf_counter() axis, so metrics and timelines put every rank's steps on one axis: CUDA event
times are placed on it from one event recorded at a host-synchronised instant before the first
step (event clocks and the host's monotonic clock agree to parts per million over a run).
"""
from __future__ import annotations

import math
import time

import torch


class StepLog:
    def __init__(self, device: torch.device, every: int, host_clock: bool = False, *, scale: float = 1.0,
                 event_cls=None, sync=None):
        """`scale`: what a read share is multiplied by (the training loop's 1/G: strategies return
        loss sums). `event_cls` and `sync` stand in for torch.cuda.Event and torch.cuda.synchronize
        in tests."""
        self.scale = float(scale)
        cuda = device.type == "cuda"
        self.events = cuda and not host_clock
        self.event_cls = event_cls or (torch.cuda.Event if cuda else None)
        self.sync = sync or (torch.cuda.synchronize if cuda else (lambda: None))
        self.every = max(1, int(every))
        self.losses: list[float | None] = []  # read: this rank's share of each step's loss
        self.times: list[float] = []  # read: seconds of each step
        self.spans: list[tuple[float, float]] = []  # read: (start, end) of each step, perf_counter() axis
        self._pending: list[tuple] = []  # (start, end, share) not read yet
        self._free: list = []  # CUDA events read and ready for reuse (no allocation per step)
        self._origin = None  # (perf_counter(), event) at one synchronised instant (events only)

    def _mark(self):
        if not self.events:
            self.sync()
            return time.perf_counter()
        ev = self._free.pop() if self._free else self.event_cls(enable_timing=True)
        ev.record()
        return ev

    def start(self):
        """The start of a step (call right before it)."""
        if self.events and self._origin is None:
            self.sync()
            self._origin = (time.perf_counter(), self._mark())
        return self._mark()

    def end(self, start, share) -> bool:
        """The end of the step begun at `start`, with this rank's loss share (a 0-d tensor, a float
        or None). True when `--log-every` steps are pending: time to read()."""
        self._pending.append((start, self._mark(), share))
        return len(self._pending) >= self.every

    @property
    def pending(self) -> int:
        return len(self._pending)

    def read(self) -> list[float | None]:
        """Read every pending step (one host synchronisation); their loss shares, in step order."""
        if not self._pending:
            return []
        pending, self._pending = self._pending, []
        shares = [[s] if isinstance(s, torch.Tensor) else s for _, _, s in pending]  # each a list, a float or None
        tensors = [t.detach().reshape(()).double() for s in shares if isinstance(s, list) for t in s]
        values = iter(torch.stack(tensors).tolist() if tensors else [])  # one device-to-host copy
        got = [None if s is None else self.scale * (math.fsum(next(values) for _ in s) if isinstance(s, list)
                                                    else float(s)) for s in shares]
        if self.events:
            pending[-1][1].synchronize()
            host0, ev0 = self._origin
            for a, b, _ in pending:
                self.spans.append((host0 + ev0.elapsed_time(a) / 1e3, host0 + ev0.elapsed_time(b) / 1e3))
                self.times.append(a.elapsed_time(b) / 1e3)
                self._free += (a, b)
        else:
            for a, b, _ in pending:
                self.spans.append((a, b))
                self.times.append(b - a)
        self.losses += got
        return got
