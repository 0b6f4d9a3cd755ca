"""What the links really carried during a run, and how loaded the host was: sampled from the
kernel while the run trains, judged over its timed steps.

A sampler thread of the launcher reads, every ``TICK_S``, each shaping qdisc's counters over
netlink (bytes the shaper let out, and the bytes still queued: the backlog) in every namespace of
the cluster, and the host's /proc/stat and /proc/loadavg, each row stamped with
``time.perf_counter()``: the host's monotonic clock, the one the ranks stamp their steps with.
After the run, ``link_check`` cuts the rows to the timed window (the first timed step's start to
the last step's end, from the metrics) and applies the rule below. Nothing runs inside the ranks.

The rule (``carried rate``): a shaped queue holds its set rate only while it has something to
send, so bytes / wall time says nothing about the shaper (a link that waits for compute is idle,
not slow). A sampling interval counts as *busy* when the queue had a backlog at both its ends:
packets were waiting all along, so the shaper alone decided how many left. The carried rate of a
queue is its bytes over its busy intervals divided by their length (wire bytes: whole Ethernet
frames, the quantity htb paces). A queue with at least ``MIN_BUSY_S`` of busy time is judged; the
run *slipped* when a judged queue carried less than (1 - ``SLIP_TOLERANCE``) x the set rate. A
queue carrying more than its rate is reported, not marked: the token bucket's burst (at most
max(10 frames, 1 ms), cluster.burst_bytes) can only add bytes, and that is not the failure a
loaded host causes (its shaper's timer fires late and the link runs slow). Upload queues under
a netem delay are not judged (their backlog includes packets still in the delay line).
"""
from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
import time

TICK_S = 0.02            # sampling period: 1 ms of burst is at most 5 % of one tick
MIN_BUSY_S = 0.2         # a queue busy for less is not judged (10 ticks)
SLIP_TOLERANCE = 0.05    # carried below 95 % of the set rate: the run slipped

_CLONE_NEWNET = 0x40000000
_RTM_NEWQDISC, _RTM_GETQDISC = 36, 38
_NLMSG_DONE, _NLMSG_ERROR = 3, 2
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_TCA_KIND, _TCA_STATS2 = 1, 7
_TCA_STATS_BASIC, _TCA_STATS_QUEUE = 1, 3
_TC_H_ROOT = 0xFFFFFFFF


def _attrs(buf: bytes, off: int, end: int):
    """(type, payload) of the rtattrs in buf[off:end] (4-byte aligned)."""
    while off + 4 <= end:
        length, kind = struct.unpack_from("HH", buf, off)
        if length < 4:
            return
        yield kind & 0x3FFF, buf[off + 4:off + length]
        off += (length + 3) & ~3


class QdiscReader:
    """Root qdisc counters of one network namespace over one netlink socket (opened inside it)."""

    def __init__(self, netns: str | None):
        self.netns, self._seq = netns, 0
        if netns is None:
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
            self.names = dict(socket.if_nameindex())
            return
        libc = ctypes.CDLL(None, use_errno=True)
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        there = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:   # setns moves only this thread; the socket stays bound to the namespace it was born in
            if libc.setns(there, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {netns} failed")
            try:
                self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
                self.names = dict(socket.if_nameindex())
            finally:
                if libc.setns(home, _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back to the host namespace failed")
        finally:
            os.close(home)
            os.close(there)

    def read(self) -> dict[str, tuple[int, int]]:
        """{interface: (bytes sent by its root qdisc, backlog bytes now)} for every htb root."""
        self._seq += 1
        req = struct.pack("IHHII", 16 + 20, _RTM_GETQDISC, _NLM_F_REQUEST | _NLM_F_DUMP, self._seq, 0)
        self.sock.send(req + struct.pack("BxxxiIII", socket.AF_UNSPEC, 0, 0, 0, 0))
        out = {}
        while True:
            buf = self.sock.recv(1 << 16)
            off = 0
            while off + 16 <= len(buf):
                length, kind, _flags, _seq, _pid = struct.unpack_from("IHHII", buf, off)
                if kind == _NLMSG_DONE:
                    return out
                if kind == _NLMSG_ERROR:
                    raise OSError(f"netlink qdisc dump failed in {self.netns or 'the host'}")
                if kind == _RTM_NEWQDISC:
                    ifindex, _handle, parent = struct.unpack_from("iII", buf, off + 20)
                    row = self._parse(buf, off + 36, off + length)
                    if parent == _TC_H_ROOT and row and row[0] == "htb":
                        out[self.names.get(ifindex, str(ifindex))] = row[1:]
                off += (length + 3) & ~3

    @staticmethod
    def _parse(buf: bytes, off: int, end: int):
        kind, sent, backlog = None, None, None
        for t, val in _attrs(buf, off, end):
            if t == _TCA_KIND:
                kind = val.rstrip(b"\0").decode()
            elif t == _TCA_STATS2:
                for t2, v2 in _attrs(val, 0, len(val)):
                    if t2 == _TCA_STATS_BASIC:
                        sent = struct.unpack_from("Q", v2, 0)[0]
                    elif t2 == _TCA_STATS_QUEUE:
                        backlog = struct.unpack_from("IIIII", v2, 0)[1]   # qlen, backlog, ...
        return (kind, sent, backlog) if sent is not None and backlog is not None else None

    def close(self) -> None:
        self.sock.close()


def host_sample() -> tuple[int, int, float]:
    """(busy jiffies, total jiffies) over all CPUs from /proc/stat, and the 1-minute load average."""
    with open("/proc/stat") as fh:
        cpu = [int(v) for v in fh.readline().split()[1:]]
    idle = cpu[3] + (cpu[4] if len(cpu) > 4 else 0)   # idle + iowait
    total = sum(cpu[:8])                              # guest time is already inside user/nice
    with open("/proc/loadavg") as fh:
        load1 = float(fh.read().split()[0])
    return total - idle, total, load1


class Sampler:
    """``with Sampler({netns: [iface, ...]}) as s:`` samples until the block ends; then
    ``s.rows[iface]`` = [(t, bytes, backlog)], ``s.host`` = [(t, busy, total, load1)]."""

    def __init__(self, queues: dict[str, list[str]], tick_s: float = TICK_S):
        self.queues, self.tick_s = queues, tick_s
        self.rows: dict[str, list[tuple[float, int, int]]] = {q: [] for qs in queues.values() for q in qs}
        self.host: list[tuple[float, int, int, float]] = []
        self.error: str | None = None
        self._last: dict[int, int] = {}   # backlog of each queue's latest sample, kept or not
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="netem-linkstats", daemon=True)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _keep(self, rows: list, row: tuple[float, int, int]) -> None:
        """Append, except a row of an idle queue like the one before it (no backlog then or now,
        nothing sent): long idle spells (replayed compute) then cost one row, and an interval
        across a skipped spell starts without backlog, so it is never taken for busy."""
        if rows and row[2] == 0 and self._last.get(id(rows), 1) == 0 and row[1] == rows[-1][1]:
            self._last[id(rows)] = 0
            return
        self._last[id(rows)] = row[2]
        rows.append(row)

    def _run(self) -> None:
        try:
            readers = [QdiscReader(ns) for ns in self.queues]
        except OSError as e:
            self.error = f"link counters unavailable: {e}"
            self._ready.set()
            return
        self._ready.set()
        try:
            while True:
                for r in readers:
                    t0 = time.perf_counter()
                    got = r.read()
                    t = (t0 + time.perf_counter()) / 2
                    for q in self.queues[r.netns]:
                        if q in got:
                            self._keep(self.rows[q], (t, *got[q]))
                self.host.append((time.perf_counter(), *host_sample()))
                if self._stop.wait(self.tick_s):
                    return
        except OSError as e:
            self.error = f"link counters failed: {e}"
        finally:
            for r in readers:
                r.close()


def _window(rows: list, t0: float, t1: float) -> list:
    return [r for r in rows if t0 <= r[0] <= t1]


def queue_rate(rows: list[tuple[float, int, int]], t0: float, t1: float) -> dict:
    """Busy time, bytes and carried Mbit/s of one queue over [t0, t1] (the rule above)."""
    rows = _window(rows, t0, t1)
    busy_s, busy_bytes, sent = 0.0, 0, 0
    for (ta, ba, qa), (tb, bb, qb) in zip(rows, rows[1:]):
        sent += bb - ba
        if qa > 0 and qb > 0:
            busy_s += tb - ta
            busy_bytes += bb - ba
    return {"busy_s": busy_s, "busy_bytes": busy_bytes, "sent_bytes": sent,
            "carried_mbit": busy_bytes * 8 / busy_s / 1e6 if busy_s > 0 else None}


def host_load(host: list[tuple[float, int, int, float]], t0: float, t1: float) -> dict | None:
    """CPU busy share of the whole host over [t0, t1] and the 1-minute load average at its end."""
    rows = _window(host, t0, t1)
    if len(rows) < 2:
        return None
    (_, b0, n0, _), (_, b1, n1, load1) = rows[0], rows[-1]
    return {"cpu_busy": (b1 - b0) / (n1 - n0) if n1 > n0 else None, "loadavg_1m": load1,
            "cpus": os.cpu_count()}


def link_check(rows: dict[str, list], window: tuple[float, float], set_mbit: float, *,
               judged: set[str] | None = None, roles: dict[str, str] | None = None) -> dict:
    """The run's link check: per queue its busy time and carried rate over ``window``; the pooled
    carried rate of the judged queues; ``slipped`` True / False, or None when no queue was busy
    long enough to judge (``reason`` says so). ``judged``: the queues that may be judged (default
    all); ``roles``: a name per queue for the report (e.g. "node 0 upload")."""
    t0, t1 = window
    queues, slow = [], []
    pool_s, pool_bytes = 0.0, 0
    for q in sorted(rows):
        r = queue_rate(rows[q], t0, t1)
        r["queue"] = (roles or {}).get(q, q)
        r["judged"] = (judged is None or q in judged) and r["busy_s"] >= MIN_BUSY_S
        if r["judged"]:
            pool_s += r["busy_s"]
            pool_bytes += r["busy_bytes"]
            r["error"] = r["carried_mbit"] / set_mbit - 1
            if r["error"] < -SLIP_TOLERANCE:
                slow.append(r["queue"])
        queues.append(r)
    out = {"set_mbit": set_mbit, "carried_mbit": pool_bytes * 8 / pool_s / 1e6 if pool_s else None,
           "window_s": t1 - t0, "tolerance": SLIP_TOLERANCE, "min_busy_s": MIN_BUSY_S,
           "slipped": bool(slow) if pool_s else None, "slow_queues": slow, "queues": queues}
    if out["carried_mbit"] is not None:
        judged_rates = [r["carried_mbit"] for r in queues if r["judged"]]
        out["worst_mbit"] = min(judged_rates)
    else:
        out["reason"] = (f"no link had a backlog for {MIN_BUSY_S:g} s of the timed steps: the links were "
                         "never the bottleneck, so their rate could not be judged")
    return out
