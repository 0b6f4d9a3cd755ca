"""Notebook 03: throughput of ps, ddp and stanza against cluster size, measured on the emulated
cluster (a small model, one target bandwidth) and modelled at the paper's scale (AlexNet and
VGG-16 at 224x224 on the V100 table device, 2..N nodes, the paper's bandwidths).

    p = plan(measured_model="cifar_alexnet", measured_nodes=[3], ...)   # every check, first
    measured = run_measured(p, cache_dir)                                # bench dicts, one per N
    modelled = model_curves(p)                                           # perf.predict rows
    results = throughput_results(p, measured, modelled)                  # results.json
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..models import MIN_IMAGE_SIZE, MODEL_NAMES, known_model
from ..perf import DEVICE_TABLE, Cluster, best_assignment, named_profile
from .measured import MeasureSpec, measure

PAPER = {"speedup_vs_ps_10gbps": [1.34, 13.9], "alexnet_speedup_vs_ps_100gbps": 1.55,
         "vgg16_speedup_vs_ps_100gbps": 1.72,
         "source": "arXiv 1812.10624: 1.34x-13.9x over PS at 10 Gb/s (EC2 V100, 'common models'); "
                   "1.55x AlexNet, 1.72x VGG-16 at 100 Gb/s (simulation)"}


def _names(value, what: str) -> list[str]:
    names = [v.strip() for v in value.split(",")] if isinstance(value, str) else list(value)
    if not names:
        raise ValueError(f"{what} must name at least one model")
    for n in names:
        if not known_model(n):
            raise ValueError(f"unknown model {n!r}; expected one of: {', '.join(MODEL_NAMES)} or package.module:factory")
    return names


def _ints(value, what: str, low: int) -> list[int]:
    vals = [value] if isinstance(value, int) else list(value)
    if not vals or any(isinstance(v, bool) or not isinstance(v, int) or v < low for v in vals):
        raise ValueError(f"{what} must be a non-empty list of integers >= {low}, got {value!r}")
    return sorted(set(vals))


def _floats(value, what: str) -> list[float]:
    vals = [value] if isinstance(value, (int, float)) else list(value)
    if not vals or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in vals):
        raise ValueError(f"{what} must be a non-empty list of positive numbers, got {value!r}")
    return [float(v) for v in vals]


@dataclasses.dataclass(kw_only=True)
class Plan:
    measured: list[MeasureSpec]  # one per emulated cluster size (empty: nothing measured)
    model_names: list[str]  # modelled at the paper's scale
    model_image_size: int
    model_num_classes: int
    model_nodes: list[int]
    model_gbps: list[float]
    batch_per_worker: int  # samples per data worker in the modelled runs
    model_device: str  # perf device-table row


def plan(*, measured_model: str, measured_image_size: int, measured_num_classes: int, measured_nodes,
         strategies, fc_workers: int, global_batch: int, steps: int, warmup: int, target_gbps: float,
         target_device: str = "v100", repeats: int = 1, model_names, model_image_size: int = 224,
         model_num_classes: int = 1000, model_nodes, model_gbps, batch_per_worker: int = 32,
         model_device: str = "v100") -> Plan:
    """Check every parameter (one-line ValueError) before anything runs."""
    nodes = _ints(measured_nodes, "measured_nodes", 2) if measured_nodes else []
    specs = [MeasureSpec(model=measured_model, image_size=measured_image_size, num_classes=measured_num_classes,
                         nodes=n, strategies=strategies, fc_workers=[fc_workers], global_batch=global_batch,
                         steps=steps, warmup=warmup, target_gbps=[target_gbps], target_device=target_device,
                         repeats=repeats) for n in nodes]
    names = _names(model_names, "model_names")
    for n in names:
        if model_image_size < MIN_IMAGE_SIZE.get(n, 1):
            raise ValueError(f"{n} needs model_image_size >= {MIN_IMAGE_SIZE[n]}, got {model_image_size}")
    if isinstance(batch_per_worker, bool) or not isinstance(batch_per_worker, int) or batch_per_worker < 1:
        raise ValueError(f"batch_per_worker must be a positive integer, got {batch_per_worker!r}")
    if model_device not in DEVICE_TABLE:
        raise ValueError(f"unknown model_device {model_device!r}; expected one of {', '.join(DEVICE_TABLE)}")
    return Plan(measured=specs, model_names=names, model_image_size=model_image_size,
                model_num_classes=model_num_classes, model_nodes=_ints(model_nodes, "model_nodes", 2),
                model_gbps=_floats(model_gbps, "model_gbps"), batch_per_worker=batch_per_worker,
                model_device=model_device)


def run_measured(p: Plan, cache_dir: str | None = None) -> list[dict[str, Any]]:
    """One bench results dict per measured cluster size (see measured.measure)."""
    return [measure(spec, cache_dir) for spec in p.measured]


def model_curves(p: Plan) -> list[dict[str, Any]]:
    """Per model, bandwidth and cluster size: ddp, ps (S = N) and stanza with its best k."""
    rows = []
    for name in p.model_names:
        prof = named_profile(name, p.model_image_size, p.model_num_classes)
        for gbps in p.model_gbps:
            for n in p.model_nodes:
                a = best_assignment(prof, Cluster(n, gbps, device=p.model_device), batch_per_worker=p.batch_per_worker)
                st = a.best_stanza()
                for pred in (a.ps, a.ddp, st):
                    rows.append({"model": name, "bandwidth_gbps": gbps, "nodes": n, "strategy": pred.strategy,
                                 "fc_workers": pred.fc_workers or 0, "throughput": pred.throughput,
                                 "iteration_s": pred.iteration_s, "speedup_vs_ps": pred.throughput / a.ps.throughput,
                                 "speedup_vs_ddp": pred.throughput / a.ddp.throughput,
                                 "best": pred.strategy == a.best.strategy and pred.fc_workers == a.best.fc_workers})
    return rows


def _measured_summary(res: dict[str, Any]) -> dict[str, Any]:
    spec = res["spec"]
    out = {"nodes": spec["nodes"], "unavailable": res["unavailable"], "calibration": res["calibration"],
           "link_mbit": None, "throughput": {}, "cache": res["cache"], "modelled_only_gbps": res["modelled_only_gbps"]}
    for row in res["summary"]:
        label = row["strategy"] + (f"_k{row['fc_workers']}" if row["fc_workers"] else "")
        out["link_mbit"] = row["link_mbit"]
        out["throughput"][label] = row["throughput"]
        if row["strategy"] == "stanza":
            out["stanza_speedup_vs_ps"] = row["speedup_vs_ps"]
            out["stanza_speedup_vs_ddp"] = row["speedup_vs_ddp"]
            out["stanza_fc_workers"] = row["fc_workers"]
    return out


def _model_speedups(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in rows:
        if r["strategy"] != "stanza":
            continue
        d = out.setdefault(r["model"], {}).setdefault(f"{r['bandwidth_gbps']:g}", {"by_nodes": {}})
        d["by_nodes"][str(r["nodes"])] = {"fc_workers": r["fc_workers"], "vs_ps": r["speedup_vs_ps"],
                                          "vs_ddp": r["speedup_vs_ddp"]}
    for per_model in out.values():
        for d in per_model.values():
            vs_ps = [v["vs_ps"] for v in d["by_nodes"].values()]
            vs_ddp = [v["vs_ddp"] for v in d["by_nodes"].values()]
            d.update(min_vs_ps=min(vs_ps), max_vs_ps=max(vs_ps), min_vs_ddp=min(vs_ddp), max_vs_ddp=max(vs_ddp))
    return out


def throughput_results(p: Plan, measured: list[dict[str, Any]], modelled: list[dict[str, Any]]) -> dict[str, Any]:
    """results.json of notebook 03 (claims point into measured.by_nodes and modelled.speedups)."""
    by_nodes = {str(m["spec"]["nodes"]): _measured_summary(m) for m in measured}
    return {
        "experiment": "throughput",
        "measured": {"model": p.measured[0].model if p.measured else None,
                     "image_size": p.measured[0].image_size if p.measured else None,
                     "target_gbps": p.measured[0].target_gbps[0] if p.measured else None,
                     "target_device": p.measured[0].target_device if p.measured else None,
                     "global_batch": p.measured[0].global_batch if p.measured else None,
                     "unavailable": next((m["unavailable"] for m in measured if m["unavailable"]), None),
                     "by_nodes": by_nodes, "benches": measured},
        "modelled": {"models": p.model_names, "image_size": p.model_image_size, "device": p.model_device,
                     "batch_per_worker": p.batch_per_worker, "rows": modelled, "speedups": _model_speedups(modelled)},
        "paper": PAPER,
    }
