"""Notebook 04: throughput against the number of FC workers k for a fixed cluster, measured on the
emulated cluster and predicted by the performance model, with the optimiser's choice.

Two optimiser answers are recorded for the emulated cluster:
  optimiser_k               argmax over k = 1..N//2 of the model with this machine's profile per
                            k (timing.device_for: each phase at the contention it runs under,
                            since all emulated nodes share this machine's cores);
  optimiser_k_uncontended   perf.best_assignment with one profile for every k, measured with a
                            single process: the pick for a cluster of separate machines this fast.
At the paper's scale, best_assignment on the V100 table ranks every k for AlexNet and VGG-16.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..models import MIN_IMAGE_SIZE
from ..perf import DEFAULT_LATENCY_S, DEVICE_TABLE, Cluster, best_assignment, named_profile
from . import timing, validation
from .measured import MeasureSpec, measure
from .throughput import _floats, _names

PIPEDREAM_VGG16 = "PipeDream's planner: VGG-16 on 16 GPUs -> 15 CONV replicas + 1 FC node (k = 1)"


@dataclasses.dataclass(kw_only=True)
class Plan:
    measured: MeasureSpec | None  # stanza at every k = 1..N//2 (None: not measured)
    paper_models: list[str]
    paper_image_size: int
    paper_nodes: int
    paper_gbps: list[float]
    batch_per_worker: int
    paper_device: str


def plan(*, model: str, image_size: int, num_classes: int, nodes: int, global_batch: int, steps: int,
         warmup: int, target_gbps: float, target_device: str = "v100", repeats: int = 1, measure_runs: bool = True,
         paper_models, paper_image_size: int = 224, paper_nodes: int = 16, paper_gbps,
         batch_per_worker: int = 32, paper_device: str = "v100") -> Plan:
    """Check every parameter (one-line ValueError) before anything runs."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 2:
        raise ValueError(f"nodes must be an integer >= 2 (stanza needs a CONV and an FC worker), got {nodes!r}")
    spec = MeasureSpec(model=model, image_size=image_size, num_classes=num_classes, nodes=nodes,
                       strategies=["stanza"], fc_workers=list(range(1, nodes // 2 + 1)), global_batch=global_batch,
                       steps=steps, warmup=warmup, target_gbps=[target_gbps], target_device=target_device,
                       repeats=repeats)
    names = _names(paper_models, "paper_models")
    for n in names:
        if paper_image_size < MIN_IMAGE_SIZE.get(n, 1):
            raise ValueError(f"{n} needs paper_image_size >= {MIN_IMAGE_SIZE[n]}, got {paper_image_size}")
    if isinstance(paper_nodes, bool) or not isinstance(paper_nodes, int) or paper_nodes < 2:
        raise ValueError(f"paper_nodes must be an integer >= 2, got {paper_nodes!r}")
    if isinstance(batch_per_worker, bool) or not isinstance(batch_per_worker, int) or batch_per_worker < 1:
        raise ValueError(f"batch_per_worker must be a positive integer, got {batch_per_worker!r}")
    if paper_device not in DEVICE_TABLE:
        raise ValueError(f"unknown paper_device {paper_device!r}; expected one of {', '.join(DEVICE_TABLE)}")
    return Plan(measured=spec if measure_runs else None, paper_models=names, paper_image_size=paper_image_size,
                paper_nodes=paper_nodes, paper_gbps=_floats(paper_gbps, "paper_gbps"),
                batch_per_worker=batch_per_worker, paper_device=paper_device)


def run_measured(p: Plan, cache_dir: str | None = None) -> dict[str, Any] | None:
    return measure(p.measured, cache_dir) if p.measured else None


def _emulated(bench: dict[str, Any]) -> dict[str, Any]:
    """Measured and predicted throughput per k on the emulated cluster, and the optimiser's picks."""
    cfg = bench["config"]
    n, G = cfg["nodes"], cfg["global_batch"]
    out: dict[str, Any] = {"nodes": n, "global_batch": G, "unavailable": bench["unavailable"],
                           "calibration": bench["calibration"], "cache": bench["cache"],
                           "modelled_only_gbps": bench["modelled_only_gbps"]}
    if bench["unavailable"] or not bench["runs"]:
        return out
    rows = validation.predict_runs(bench)
    mbit = rows[0]["link_mbit"]
    prof = named_profile(cfg["model"], cfg["image_size"], cfg["num_classes"])
    by_k = {str(r["fc_workers"]): {"measured": r["measured_throughput"], "predicted": r["predicted_throughput"],
                                   "error": r["error"], "link_mbit": r["link_mbit"]} for r in rows}
    measured_best = max(rows, key=lambda r: r["measured_throughput"])
    optimiser = max(rows, key=lambda r: (r["predicted_throughput"], -r["fc_workers"]))
    # The same question without contention: one single-process profile for every k.
    gbps = mbit * timing.payload_per_wire_byte(cfg.get("mtu") or 1500) / 1000
    lone = [r for r in bench["timing_rounds"] if r["level"] == 1]
    uncontended = None
    if lone:
        b = max(lone, key=lambda r: r["batch"])["batch"]
        dev = timing.device_for("ddp", 1, 0, b, lone, prof.params)
        a = best_assignment(prof, Cluster(n, gbps, DEFAULT_LATENCY_S, dev), G, fc_workers=range(1, n // 2 + 1))
        uncontended = a.best_stanza().fc_workers
    best_tp = measured_best["measured_throughput"]
    opt_tp = optimiser["measured_throughput"]
    out.update(link_mbit=mbit, target_gbps=rows[0]["target_gbps"], by_k=by_k,
               measured_best_k=measured_best["fc_workers"], optimiser_k=optimiser["fc_workers"],
               optimiser_k_uncontended=uncontended,
               optimiser_is_measured_best=optimiser["fc_workers"] == measured_best["fc_workers"],
               optimiser_shortfall=1 - opt_tp / best_tp, optimiser_within_5pct=opt_tp >= 0.95 * best_tp,
               validation=rows, error_summary=validation.error_summary(rows))
    return out


def paper_scale(p: Plan) -> dict[str, Any]:
    """Per model and bandwidth on `paper_nodes` V100s: throughput of stanza at every k, ddp, ps, and
    best_assignment's pick."""
    out: dict[str, Any] = {}
    for name in p.paper_models:
        prof = named_profile(name, p.paper_image_size)
        for g in p.paper_gbps:
            a = best_assignment(prof, Cluster(p.paper_nodes, g, device=p.paper_device),
                                batch_per_worker=p.batch_per_worker)
            stanza = sorted((x for x in a.ranking if x.strategy == "stanza"), key=lambda x: x.fc_workers)
            top = a.best_stanza()
            out.setdefault(name, {})[f"{g:g}"] = {
                "by_k": {str(x.fc_workers): x.throughput for x in stanza},
                "ddp": a.ddp.throughput, "ps": a.ps.throughput,
                "best": {"strategy": a.best.strategy, "fc_workers": a.best.fc_workers or 0,
                         "throughput": a.best.throughput},
                "best_k": top.fc_workers, "best_k_vs_ddp": top.throughput / a.ddp.throughput,
                "best_k_vs_ps": top.throughput / a.ps.throughput}
    return out


def assignment_results(p: Plan, bench: dict[str, Any] | None, paper: dict[str, Any]) -> dict[str, Any]:
    """results.json of notebook 04."""
    spec = p.measured
    return {"experiment": "node_assignment",
            "measured": None if bench is None else {"model": spec.model, "image_size": spec.image_size,
                                                    "target_device": spec.target_device, **_emulated(bench),
                                                    "bench": bench},
            "paper_scale": {"models": p.paper_models, "nodes": p.paper_nodes, "device": p.paper_device,
                            "image_size": p.paper_image_size, "batch_per_worker": p.batch_per_worker,
                            "results": paper},
            "reference": PIPEDREAM_VGG16}
