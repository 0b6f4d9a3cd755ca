"""The simulator judged against the emulated cluster (benchmarks/sim_validation.py report).

The configurations and their split into a fit half and a held-out half are fixed in
benchmarks/sim_validation/plan.json before any was measured. Each is emulated at the current
measurement version (its entry in benchmarks/results/sim_validation/: the median of its timed
steps over D is the emulated step) and simulated (its generated program on SimGrid, the same
device row). The simulator's one parameter, the cost of a message beyond its bytes
(cluster.Platform.per_message_s), is chosen on the fit half alone: the value of PER_MESSAGE_GRID
with the least sum of squared log(simulated / emulated) over the fit half. The held-out half is
judged at that value only: median and worst |simulated / emulated - 1| against GOALS, beside the
analytic model's (perf.predict, the plan's target step) on the same runs. Where the emulation
lost packets (its TCP counters: retransmitted segments, queue drops) the row says so.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from ..runs.store import Store
from .cluster import Platform
from .generate import generate
from .run import SIM_VERSION, simulate_program, summarize, train_config

PER_MESSAGE_GRID = (0.0, 1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4)  # seconds per message
GOALS = {"median": 0.03, "worst": 0.10}  # held-out |simulated / emulated - 1|
SIM_STEPS = 3  # simulated steps (the first left out, as the emulation's warm-up)


def _emulated(entry: dict[str, Any]) -> dict[str, Any]:
    run = entry["run"]
    d = run["dilation"]
    losses = run.get("losses") or {}
    return {"emulated_step_s": run["step_time_median_s"] / d, "model_step_s": entry["plan"]["target_step_s"],
            "steps_s": [s / d for s in run["steps_s"]], "timed_steps": entry["key"]["steps"] - entry["key"]["warmup"],
            "dilation": d, "payload_scale": run.get("payload_scale", 1),
            "losses": {k: losses.get(k) for k in ("retrans_segs", "queue_drops", "fast_retrans", "timeouts")},
            "measured_at": entry["measured"]["at"], "measurement_version": entry["version"],
            "git_commit": run.get("git_commit")}


def _err(a: float, b: float) -> float:
    return a / b - 1.0


def report(points: list, store_root: str | Path) -> dict[str, Any]:
    """Every configuration of `points` ([(store.Point, half)]) emulated (from the store) and
    simulated; the fit of per_message_s on the fit half; the held-out verdict."""
    store = Store(store_root)
    rows, docs = [], []
    for pt, half in points:
        entry = store.get(pt)
        row = {"label": pt.label, "half": half, "model": pt.config.model, "nodes": pt.config.nodes,
               "configuration": pt.config.variant.label, "target_gbps": pt.target_gbps}
        if entry is None:
            row["missing"] = "not emulated at the current measurement version"
            rows.append(row)
            docs.append(None)
            continue
        row.update(_emulated(entry))
        cfg = train_config(pt.config, steps=SIM_STEPS)
        docs.append(generate(cfg, pt.config.cluster_nodes, SIM_STEPS))
        rows.append(row)

    def simulated(i: int, alpha: float) -> float:
        pt = points[i][0]
        key = f"_sim_{alpha!r}"
        if key not in rows[i]:
            plat = Platform(hosts=pt.config.cluster_nodes, target_gbps=pt.target_gbps, delay_ms=pt.config.delay_ms,
                            per_message_s=alpha)
            rows[i][key] = summarize(docs[i], simulate_program(docs[i], plat))["step_s"]
        return rows[i][key]

    fit = [i for i, r in enumerate(rows) if r["half"] == "fit" and "missing" not in r]
    held = [i for i, r in enumerate(rows) if r["half"] == "held_out" and "missing" not in r]
    scores = {}
    for alpha in PER_MESSAGE_GRID:
        scores[alpha] = sum(math.log(simulated(i, alpha) / rows[i]["emulated_step_s"]) ** 2 for i in fit)
    best = min(scores, key=lambda a: (scores[a], a))
    for i, r in enumerate(rows):
        if "missing" in r:
            continue
        r["simulated_step_s"] = simulated(i, best)
        r["simulated_at_zero_s"] = simulated(i, 0.0)
        r["sim_error"] = _err(r["simulated_step_s"], r["emulated_step_s"])
        r["model_error"] = _err(r["model_step_s"], r["emulated_step_s"])
        for k in [k for k in r if k.startswith("_sim_")]:
            del r[k]

    def verdict(idx):
        if not idx:
            return None
        s = [abs(rows[i]["sim_error"]) for i in idx]
        m = [abs(rows[i]["model_error"]) for i in idx]
        return {"configurations": len(idx), "sim_median_abs_error": statistics.median(s), "sim_worst_abs_error": max(s),
                "model_median_abs_error": statistics.median(m), "model_worst_abs_error": max(m),
                "sim_closer_than_model": statistics.median(s) < statistics.median(m)}

    held_v = verdict(held)
    if held_v:
        held_v["goals"] = GOALS
        held_v["median_met"] = held_v["sim_median_abs_error"] <= GOALS["median"]
        held_v["worst_met"] = held_v["sim_worst_abs_error"] <= GOALS["worst"]
    return {"sim_version": SIM_VERSION, "figure": "simulated against emulated (replayed compute, V100 row)",
            "fitted": {"parameter": "per_message_s", "value": best, "grid": list(PER_MESSAGE_GRID),
                       "criterion": "least sum of squared log(simulated / emulated) over the fit half",
                       "fitted_on": [rows[i]["label"] for i in fit], "score_by_value": {repr(k): v for k, v in scores.items()}},
            "fit_half": verdict(fit), "held_out": held_v, "rows": rows,
            "missing": [r["label"] for r in rows if "missing" in r]}


def table(out: dict[str, Any]) -> str:
    """The report as text: one row per configuration, then each half's verdict."""
    lines = [f"per_message_s fitted on the fit half: {out['fitted']['value'] * 1e6:g} us",
             f"{'configuration':44s} {'half':8s} {'emulated':>9s} {'simulated':>9s} {'err':>7s} {'model':>9s} "
             f"{'err':>7s}  retrans/drops"]
    for r in out["rows"]:
        if "missing" in r:
            lines.append(f"{r['label']:44s} {r['half']:8s} {r['missing']}")
            continue
        lo = r["losses"]
        lines.append(f"{r['label']:44s} {r['half']:8s} {r['emulated_step_s'] * 1e3:8.2f}ms {r['simulated_step_s'] * 1e3:8.2f}ms "
                     f"{r['sim_error'] * 100:+6.1f}% {r['model_step_s'] * 1e3:8.2f}ms {r['model_error'] * 100:+6.1f}%  "
                     f"{lo.get('retrans_segs')}/{lo.get('queue_drops')}")
    for name in ("fit_half", "held_out"):
        v = out.get(name)
        if v:
            lines.append(f"{name}: {v['configurations']} configurations; simulator median |err| "
                         f"{v['sim_median_abs_error'] * 100:.1f} %, worst {v['sim_worst_abs_error'] * 100:.1f} %; model median "
                         f"{v['model_median_abs_error'] * 100:.1f} %, worst {v['model_worst_abs_error'] * 100:.1f} %")
    return "\n".join(lines)
