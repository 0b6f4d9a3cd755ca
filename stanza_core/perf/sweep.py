"""Sweeps of the performance model over bandwidths and cluster sizes (up to 1,024 nodes)."""
from __future__ import annotations

from typing import Any

from tabulate import tabulate

from ..anatomy import Profile
from .. import registry
from ..labels import config_label
from .cluster import DEFAULT_LATENCY_S, Cluster
from .resolve import device_profile
from .model import DEFAULT_BATCH_PER_WORKER, DEFAULT_BUCKET_MB
from .optimize import best_assignment

DEFAULT_BANDWIDTHS_GBPS = (1.0, 2.5, 5.0, 10.0, 25.0, 40.0, 100.0, 200.0, 400.0)
DEFAULT_SIZES = tuple(2 ** i for i in range(1, 11))  # 2 .. 1024 nodes


def sweep(profile: Profile, device="v100", bandwidths_gbps=DEFAULT_BANDWIDTHS_GBPS, sizes=DEFAULT_SIZES, *,
          latency_s: float = DEFAULT_LATENCY_S, global_batch: int | None = None,
          batch_per_worker: int | None = None, ps_shards: int | None = None,
          bucket_mb: float = DEFAULT_BUCKET_MB) -> dict[str, Any]:
    """best_assignment at every (bandwidth, size). One row per point with the winner, the
    baselines, the best stanza k, and stanza's throughput for every k = 1..N//2 (index k-1).

    With a fixed global_batch, sizes with more data workers than samples are skipped."""
    if not bandwidths_gbps or not sizes:
        raise ValueError("a sweep needs at least one bandwidth and one cluster size")
    dev = device_profile(device, profile).profile
    rows, skipped = [], []
    for n in sizes:
        if global_batch is not None and global_batch < n:
            skipped.append({"nodes": n, "reason": f"global batch {global_batch} < {n} data workers"})
            continue
        for gbps in bandwidths_gbps:
            cluster = Cluster(n, gbps, latency_s, dev)
            a = best_assignment(profile, cluster, global_batch, batch_per_worker=batch_per_worker,
                                ps_shards=ps_shards, bucket_mb=bucket_mb)
            stanza = sorted((p for p in a.ranking if registry.owns(p.strategy, "fc_workers")),
                            key=lambda p: p.fc_workers)
            top = a.best_stanza()
            rows.append({
                "nodes": n, "bandwidth_gbps": gbps,
                "best": {"strategy": a.best.strategy, "fc_workers": a.best.fc_workers,
                         "iteration_s": a.best.iteration_s, "throughput": a.best.throughput},
                "speedup_vs_ddp": a.speedup_vs_ddp, "speedup_vs_ps": a.speedup_vs_ps,
                "ddp": {"iteration_s": a.ddp.iteration_s, "throughput": a.ddp.throughput,
                        "max_node_sent": a.ddp.max_node_sent},
                "ps": {"iteration_s": a.ps.iteration_s, "throughput": a.ps.throughput,
                       "ps_shards": a.ps.ps_shards, "max_node_sent": a.ps.max_node_sent},
                "stanza_best": None if top is None else {
                    "fc_workers": top.fc_workers, "iteration_s": top.iteration_s, "throughput": top.throughput,
                    "max_node_sent": top.max_node_sent,
                    "speedup_vs_ddp": top.throughput / a.ddp.throughput,
                    "speedup_vs_ps": top.throughput / a.ps.throughput},
                "stanza_throughput_by_k": [p.throughput for p in stanza],
            })
    return {"model": profile.model, "input_shape": list(profile.input_shape),
            "conv_params": profile.conv.params, "fc_params": profile.fc.params,
            "boundary_values": profile.boundary_values, "device": dev.to_dict(), "latency_s": latency_s,
            "global_batch": global_batch, "bucket_mb": bucket_mb,
            "batch_per_worker": None if global_batch is not None else (batch_per_worker or DEFAULT_BATCH_PER_WORKER),
            "ps_shards": ps_shards if ps_shards is not None else "N",
            "bandwidths_gbps": list(bandwidths_gbps), "sizes": list(sizes), "rows": rows, "skipped": skipped}


def fmt_table(result: dict[str, Any]) -> str:
    """A compact text view of a sweep: best strategy/k and its speedup over ddp per point."""
    sizes = sorted({r["nodes"] for r in result["rows"]})
    bws = result["bandwidths_gbps"]
    cell = {(r["nodes"], r["bandwidth_gbps"]): r for r in result["rows"]}

    def shown(n, g) -> str:
        r = cell.get((n, g))
        if r is None:
            return "-"
        b = r["best"]
        return f"{config_label(b['strategy'], b['fc_workers'])} {r['speedup_vs_ddp']:.2f}x"

    table = tabulate([[n, *(shown(n, g) for g in bws)] for n in sizes], headers=["nodes", *(f"{g:g}" for g in bws)],
                     tablefmt="simple", colalign=("right",) * (len(bws) + 1))
    return f"best assignment and speedup over ddp ({result['model']}, columns: Gb/s)\n{table}"
