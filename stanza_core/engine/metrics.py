"""The metrics JSON of a run and the per-rank record it is built from.

Each rank sends rank 0 one record (`rank_record`): its loss shares, step times and spans, byte
counters, timeline, replay waits and peak resident memory. Rank 0 joins them (`build_metrics`):
a step's loss is the sum of its shares, its time the slowest rank's; bytes are reported per
step by category (comm.report); every rank's step spans and timeline share one time axis.

Peak resident memory (`PeakRss`, Linux): `peak_rss_mib` is the process's peak over the whole
run, setup included; `steps_peak_rss_mib` the peak from the first step's start to the last
step's end, read after resetting the kernel's high-water mark (/proc/self/clear_refs), or None
where that is not possible.

Provenance (`provenance`): the config section names the package version and, in a checkout, the
git commit and whether tracked files were modified.
"""
from __future__ import annotations

import functools
import statistics
import subprocess
from pathlib import Path

import torch

from ..comm import backend_name, report
from ..numerics import numerics_record


class PeakRss:
    """Setup's peak and the steps' own peak, apart: make one just before the first step."""

    def __init__(self):
        self.setup_mib = peak_rss_mib()  # read before the mark is reset for the steps' own peak
        self._reset = reset_peak_rss()
        self.steps_mib: float | None = None

    def steps_done(self):
        """Read the steps' peak: call right after the last step."""
        self.steps_mib = vm_hwm_mib() if self._reset else None

    def record(self) -> dict:
        return {"peak_rss_mib": _max(self.setup_mib, peak_rss_mib()), "steps_peak_rss_mib": self.steps_mib}


def rank_record(comm, strategy, log, replayer, rss: PeakRss) -> dict:
    """What this rank sends rank 0 at the end of the run (gathered uncounted)."""
    return {"rank": comm.rank, "role": strategy.role, "losses": log.losses, "times": log.times,
            "step_bytes": comm.step_bytes.snapshot(), "other_bytes": comm.other_bytes.snapshot(),
            "wire_bytes": comm.wire_bytes.snapshot(), "messages": comm.messages,
            "timeline": comm.timeline, "step_starts": comm.step_starts, "step_spans": log.spans,
            "replay_wait_s": replayer.waited_s if replayer else None, **rss.record()}


def build_metrics(cfg, topo, device, start, everyone, replayed: dict | None = None) -> dict:
    n_steps = len(everyone[0]["times"])
    steps = []
    for i in range(n_steps):
        shares = [r["losses"][i] for r in everyone if r["losses"][i] is not None]
        steps.append({"step": start + i, "loss": sum(shares), "time_s": max(r["times"][i] for r in everyone)})
    timed = [s["time_s"] for s in steps[cfg.warmup:]] or [s["time_s"] for s in steps]
    ranks = []
    origins = _step_origins(everyone)
    # every rank's step spans on one time axis: seconds since the first rank started this run's
    # first step (perf_counter is the host's monotonic clock, shared by every process on it)
    zero = min((r["step_spans"][0][0] for r in everyone if r.get("step_spans")), default=0.0)
    for r in everyone:
        sent, recv = (report(c, max(n_steps, 1)) for c in r["step_bytes"])
        other_sent, other_recv = (report(c, 1) for c in r["other_bytes"])
        wire_sent, wire_recv = (report(c, max(n_steps, 1)) for c in r["wire_bytes"])
        ranks.append({"rank": r["rank"], "role": r["role"], "bytes_sent": sum(sent.values()),
                      "bytes_recv": sum(recv.values()), "sent": sent, "recv": recv,
                      "wire_bytes_sent": sum(wire_sent.values()), "wire_bytes_recv": sum(wire_recv.values()),
                      "setup_bytes_sent": sum(other_sent.values()), "setup_bytes_recv": sum(other_recv.values()),
                      "peak_rss_mib": r.get("peak_rss_mib"), "steps_peak_rss_mib": r.get("steps_peak_rss_mib"),
                      "step_start_s": [a - zero for a, _ in r.get("step_spans", [])],
                      "step_end_s": [b - zero for _, b in r.get("step_spans", [])]})
        if r.get("timeline") is not None:  # t: seconds since the first rank entered the step
            ranks[-1]["timeline"] = sorted(({**e, "step": start + e["step"], "t": e["t"] - origins[e["step"]]}
                                            for e in r["timeline"]), key=lambda e: (e["step"], e["t"]))
    metrics = {
        "compute": cfg.compute,
        "config": {**cfg.to_dict(), "world_size": topo.world_size, "data_workers": topo.data_workers,
                   "fc_workers_effective": topo.fc_workers, "ps_shards_effective": topo.ps_shards,
                   "ps_server_ranks": topo.server_ranks if topo.ps_servers else [],
                   "device_type": device.type, "torch": torch.__version__,
                   "backend": backend_name(), "numerics": numerics_record(cfg.exact), **provenance()},
        "steps": steps,
        "throughput": cfg.global_batch * len(timed) / sum(timed) if timed and sum(timed) > 0 else None,
        "step_time_median_s": statistics.median(timed) if timed else None,
        "ranks": ranks,
        "bytes_per_step": sum(r["bytes_sent"] for r in ranks),
        # what crossed the wire: bytes_per_step / F under payload scaling (config.payload_scale), else equal
        "wire_bytes_per_step": sum(r["wire_bytes_sent"] for r in ranks),
        "messages": message_sizes([r["messages"] for r in everyone], max(n_steps, 1)),
        "step_clock_origin_s": zero,  # perf_counter() of step_start_s = 0: the host clock the emulator samples on
    }
    if replayed is not None:  # times: as measured here, and / D (the target device's time)
        d = replayed["dilation"]
        for s in steps:
            s["loss"], s["target_time_s"] = None, s["time_s"] / d
        med = metrics["step_time_median_s"]
        metrics["replay"] = {**replayed, "note": "compute replayed (waits, no arithmetic): losses are not "
                             "computed, step times are measured; target times = measured / dilation",
                             "wait_s_per_rank": [r["replay_wait_s"] for r in everyone]}
        metrics["target_step_time_median_s"] = med / d if med else None
        metrics["target_throughput"] = metrics["throughput"] * d if metrics["throughput"] else None
    return metrics


def message_sizes(per_rank: list[list[int]], steps: int) -> dict:
    """The messages the ranks posted in steps (a send, an allreduce, a bucket; logical bytes): how
    many per step, and the byte-weighted 10th percentile of their sizes (the size below which a
    tenth of the step's bytes travel: what payload scaling must keep above the per-message floor,
    netem.facts.MIN_MESSAGE_BYTES)."""
    sizes = sorted(n for msgs in per_rank for n in msgs)
    total, acc, p10 = sum(sizes), 0, None
    for n in sizes:
        acc += n
        if acc >= 0.1 * total:
            p10 = n
            break
    return {"per_step": len(sizes) / steps, "p10_bytes": p10}
@functools.lru_cache(maxsize=1)
def provenance() -> dict:
    """Which code made the run: the installed package's version, and where stanza_core is a git
    checkout its commit and whether tracked files differ from it (None, None in an installed wheel)."""
    from .. import __version__  # __version__ reads importlib.metadata on first use (stanza_core.__getattr__)

    root = Path(__file__).resolve().parents[2]
    commit = dirty = None
    if (root / ".git").exists():  # a checkout (a worktree's .git is a file)
        def git(*args):
            return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
        try:
            head = git("rev-parse", "HEAD")
            if head.returncode == 0:
                commit = head.stdout.strip()
                status = git("status", "--porcelain", "--untracked-files=no")
                dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):  # no git on PATH: the commit stays unknown
            pass
    return {"stanza_core_version": __version__, "git_commit": commit, "git_dirty": dirty}


def peak_rss_mib() -> float | None:
    """This process's peak resident memory (MiB), or None where the OS does not say."""
    try:
        import resource  # resource: Unix only; elsewhere None
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def reset_peak_rss() -> bool:
    """Reset this process's peak-RSS mark to its current RSS (Linux: /proc/self/clear_refs), so
    the training steps' own peak can be read apart from setup's; False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return vm_hwm_mib() is not None
    except OSError:
        return False


def vm_hwm_mib() -> float | None:
    """Peak resident memory since the last reset (Linux VmHWM, MiB), or None."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _max(a: float | None, b: float | None) -> float | None:
    return None if a is None and b is None else max(x for x in (a, b) if x is not None)


def _step_origins(everyone) -> list[float]:
    """Per step, the earliest perf_counter() at which any rank started it (timeline runs only)."""
    starts = [r.get("step_starts") or [] for r in everyone]
    return [min(s[i] for s in starts if i < len(s)) for i in range(max(map(len, starts), default=0))]
