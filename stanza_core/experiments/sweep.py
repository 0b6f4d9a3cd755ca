"""Notebook 05: the bandwidth sweep. Stanza against ps and ddp at 10 / 25 / 40 / 100 Gb/s:

  emulated     the targets mapped to this machine's speed (measured.measure); the targets listed
               in `measure_gbps` (and that the emulator can shape) are measured, every target is
               also predicted with this machine's profile (validation.predict_runs), so the
               model continues the measured points;
  paper scale  AlexNet / VGG-16 on `paper_nodes` V100s at each target (perf.best_assignment);
  sweep        perf.sweep over 1-400 Gb/s and 2-1,024 nodes: the best strategy and k everywhere.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..perf import DEVICE_TABLE, Cluster, best_assignment, named_profile, sweep
from . import validation
from .measured import MeasureSpec, measure
from .throughput import PAPER, _floats, _ints, _names

SWEEP_GBPS = (1.0, 2.5, 5.0, 10.0, 25.0, 40.0, 100.0, 200.0, 400.0)
SWEEP_NODES = tuple(2 ** i for i in range(1, 11))


@dataclasses.dataclass(kw_only=True)
class Plan:
    measured: MeasureSpec | None  # the measured targets (None: nothing measured)
    predicted: MeasureSpec  # every target: the configurations the model continues to
    target_gbps: list[float]
    paper_models: list[str]
    paper_image_size: int
    paper_nodes: int
    sweep_gbps: list[float]
    sweep_nodes: list[int]
    batch_per_worker: int
    paper_device: str


def plan(*, model: str, image_size: int, num_classes: int, nodes: int, strategies, fc_workers: int,
         global_batch: int, steps: int, warmup: int, target_gbps, measure_gbps, target_device: str = "v100",
         repeats: int = 1, paper_models, paper_image_size: int = 224, paper_nodes: int = 16,
         sweep_gbps=SWEEP_GBPS, sweep_nodes=SWEEP_NODES, batch_per_worker: int = 32,
         paper_device: str = "v100") -> Plan:
    """Check every parameter (one-line ValueError) before anything runs."""
    targets = _floats(target_gbps, "target_gbps")
    measured_targets = _floats(measure_gbps, "measure_gbps") if measure_gbps else []
    if extra := [g for g in measured_targets if g not in targets]:
        raise ValueError(f"measure_gbps {extra} are not among target_gbps {targets}")
    common = dict(model=model, image_size=image_size, num_classes=num_classes, nodes=nodes, strategies=strategies,
                  fc_workers=[fc_workers], global_batch=global_batch, steps=steps, warmup=warmup,
                  target_device=target_device, repeats=repeats)
    predicted = MeasureSpec(**common, target_gbps=targets)
    measured = MeasureSpec(**common, target_gbps=measured_targets) if measured_targets else None
    if isinstance(paper_nodes, bool) or not isinstance(paper_nodes, int) or paper_nodes < 2:
        raise ValueError(f"paper_nodes must be an integer >= 2, got {paper_nodes!r}")
    if isinstance(batch_per_worker, bool) or not isinstance(batch_per_worker, int) or batch_per_worker < 1:
        raise ValueError(f"batch_per_worker must be a positive integer, got {batch_per_worker!r}")
    if paper_device not in DEVICE_TABLE:
        raise ValueError(f"unknown paper_device {paper_device!r}; expected one of {', '.join(DEVICE_TABLE)}")
    return Plan(measured=measured, predicted=predicted, target_gbps=targets,
                paper_models=_names(paper_models, "paper_models"), paper_image_size=paper_image_size,
                paper_nodes=paper_nodes, sweep_gbps=_floats(sweep_gbps, "sweep_gbps"),
                sweep_nodes=_ints(sweep_nodes, "sweep_nodes", 2), batch_per_worker=batch_per_worker,
                paper_device=paper_device)


def run_measured(p: Plan, cache_dir: str | None = None) -> dict[str, Any] | None:
    return measure(p.measured, cache_dir) if p.measured else None


def emulated(p: Plan, bench: dict[str, Any] | None) -> dict[str, Any]:
    """Per target: the emulated link rate, measured samples/s (where measured) and the model's
    prediction with this machine's profile, per configuration."""
    out: dict[str, Any] = {"nodes": p.predicted.nodes, "model": p.predicted.model, "image_size": p.predicted.image_size,
                           "unavailable": bench["unavailable"] if bench else None,
                           "modelled_only_gbps": bench["modelled_only_gbps"] if bench else [], "by_gbps": {}}
    if bench is None or bench["unavailable"] or not bench["timing_rounds"]:
        return out
    cal = bench["calibration"]
    # The same configurations at every target rate, predicted (runs with no measurement behind them).
    ghost = [{"strategy": s, "fc_workers": k, "target_gbps": g, "link_mbit": g * 1000 * cal["ratio"], "repeat": 0,
              "throughput": float("nan"), "step_time_median_s": float("nan"), "bytes_per_step": None}
             for g in p.target_gbps for s, k in p.predicted.configs()]
    predicted = validation.predict_runs({**bench, "runs": ghost})
    measured = {(r["target_gbps"], r["strategy"], r["fc_workers"]): r for r in validation.predict_runs(bench)}
    for row in predicted:
        g = row["target_gbps"]
        label = row["strategy"] + (f"_k{row['fc_workers']}" if row["fc_workers"] else "")
        m = measured.get((g, row["strategy"], row["fc_workers"]))
        d = out["by_gbps"].setdefault(f"{g:g}", {"target_gbps": g, "link_mbit": row["link_mbit"],
                                                 "measured": {}, "predicted": {}, "error": {}})
        d["predicted"][label] = row["predicted_throughput"]
        if m:
            d["measured"][label] = m["measured_throughput"]
            d["error"][label] = m["error"]
    for d in out["by_gbps"].values():
        for kind in ("measured", "predicted"):
            tp = d[kind]
            st = next((v for k, v in tp.items() if k.startswith("stanza")), None)
            for base in ("ps", "ddp"):
                if st is not None and base in tp:
                    d[f"{kind}_stanza_vs_{base}"] = st / tp[base]
    out["calibration"] = cal
    out["cache"] = bench["cache"]
    return out


def paper_scale(p: Plan) -> dict[str, Any]:
    """Stanza (best k), ddp and ps on `paper_nodes` V100s at each target bandwidth."""
    out: dict[str, Any] = {}
    for name in p.paper_models:
        prof = named_profile(name, p.paper_image_size)
        for g in p.target_gbps:
            a = best_assignment(prof, Cluster(p.paper_nodes, g, device=p.paper_device),
                                batch_per_worker=p.batch_per_worker)
            st = a.best_stanza()
            out.setdefault(name, {})[f"{g:g}"] = {
                "stanza": st.throughput, "fc_workers": st.fc_workers, "ddp": a.ddp.throughput,
                "ps": a.ps.throughput, "stanza_vs_ps": st.throughput / a.ps.throughput,
                "stanza_vs_ddp": st.throughput / a.ddp.throughput, "best": a.best.strategy}
    return out


def model_sweep(p: Plan) -> dict[str, Any]:
    """perf.sweep per paper model (per-k throughput lists dropped: they hold up to N/2 values)."""
    out = {}
    for name in p.paper_models:
        s = sweep(named_profile(name, p.paper_image_size), p.paper_device, p.sweep_gbps, p.sweep_nodes,
                  batch_per_worker=p.batch_per_worker)
        best_at: dict[str, dict[str, str]] = {}
        for r in s["rows"]:
            r.pop("stanza_throughput_by_k", None)
            b = r["best"]
            best_at.setdefault(str(r["nodes"]), {})[f"{r['bandwidth_gbps']:g}"] = (
                f"stanza k={b['fc_workers']}" if b["strategy"] == "stanza" else b["strategy"])
        out[name] = {**s, "best_at": best_at}
    return out


def sweep_results(p: Plan, bench, emu: dict[str, Any], paper: dict[str, Any], swept: dict[str, Any]) -> dict[str, Any]:
    """results.json of notebook 05."""
    return {"experiment": "bandwidth_sweep", "target_gbps": p.target_gbps, "emulated": emu,
            "paper_scale": {"nodes": p.paper_nodes, "device": p.paper_device, "batch_per_worker": p.batch_per_worker,
                            "image_size": p.paper_image_size, "results": paper},
            "sweep": swept, "paper": PAPER, "bench": bench}
