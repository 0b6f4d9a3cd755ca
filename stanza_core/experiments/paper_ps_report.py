"""Notebook 05's section "What the paper must have assumed": the figures it judges and draws, on
top of paper_ps (the assumptions, the search, the rule).

    decomposition  a 16-node step at 100 Gb/s per strategy: the step as compute on the critical
                   path plus exposed communication, and each activity's busy time on its
                   busiest node (PS push / pull / update; activation exchange, FC worker, CONV
                   and FC allreduce) under the stated PS and the sharded one
    range_ends     the 10 Gb/s range's two ends, as bandwidth_sweep.yaml chose them before they
                   were computed: the low end the smallest of ResNet-50 / GoogLeNet (224) and
                   Inception-v3 (299) at 64 samples per worker on 16 nodes; the high end AlexNet
                   on 4 nodes at the set's batch; both at 10 Gb/s, stanza at its best k
    replay_set     the stated PS and stanza at its best k as runs.replayed.ReplaySet, for the
                   replayed 16-node check of the model
    replayed       that check as committed (benchmarks/paper_regime_replay.py's results file:
                   the real engine over emulated links, V100 row compute replayed): per model, the
                   replayed speedup beside the model's for the same runs, or why there is none
All else modelled (perf.predict, the device table's V100 row): seconds.
"""
from __future__ import annotations

import dataclasses
import json
import os
import statistics
from typing import Any

from .. import registry
from .paper_ps import (PAPER_100, RULE, SHARDED, TOLERANCE, PsAssumption, Speedups, choose, ps_prediction,
                       search, stanza_best, worst_distance)
from ..runs.replayed import ReplaySet

LOW_END_MODELS = {"resnet50": 224, "googlenet": 224, "inception_v3": 299}  # small heads (bandwidth_sweep.yaml)
LOW_END_BATCH, LOW_END_NODES = 64, 16
HIGH_END_MODEL, HIGH_END_NODES = "alexnet", 4
RANGE_GBPS = 10.0
PAPER_RANGE = (1.34, 13.9)


def _ps_activities(p) -> dict[str, float]:
    b = p.breakdown
    return {"compute": b["conv_compute_s"] + b["fc_compute_s"], "PS push": b["ps_push_s"],
            "PS pull": b["ps_pull_s"], "PS update": b["update_s"]}


def _stanza_activities(p) -> dict[str, float]:
    b = p.breakdown
    return {"compute": b["conv_compute_s"], "activation exchange": b["activation_ingress_s"] + b["activation_egress_s"],
            "FC worker": b["fc_worker_compute_s"], "CONV allreduce": b["conv_allreduce_s"],
            "FC allreduce": b["fc_allreduce_s"]}


def _bar(label: str, p, activities: dict[str, float]) -> dict[str, Any]:
    return {"label": label, "step_s": p.iteration_s, "critical_compute_s": p.iteration_s - p.exposed_comm_s,
            "exposed_comm_s": p.exposed_comm_s, "throughput": p.throughput, "activities": activities}


def decomposition(sp: Speedups, model: str, stated: PsAssumption, nodes: int, gbps: float) -> list[dict[str, Any]]:
    """Bars: ps and stanza (best k) under the sharded PS's terms, then under the stated PS's."""
    prof, out = sp.profiles[model], []
    for name, a in (("sharded", SHARDED), ("stated", stated)):
        ps = ps_prediction(prof, a, nodes, gbps, sp.device)
        st = stanza_best(prof, nodes, gbps, a.batch_per_worker, a.goodput, sp.device)
        out.append({**_bar(f"ps ({name}: S={a.servers(nodes)} {a.placement})", ps, _ps_activities(ps)), "set": name})
        out.append({**_bar(f"stanza k={st.fc_workers} ({a.batch_per_worker}/worker)", st, _stanza_activities(st)),
                    "set": name})
    return out


def range_ends(a: PsAssumption, device: str = "v100") -> dict[str, Any]:
    """The 10 Gb/s range's ends under `a` (module docstring): {low, high, ends}."""
    low_set = dataclasses.replace(a, batch_per_worker=LOW_END_BATCH)
    lows = Speedups(list(LOW_END_MODELS), LOW_END_MODELS, device)
    by = {m: lows.of(m, low_set, LOW_END_NODES, RANGE_GBPS) for m in LOW_END_MODELS}
    low_model = min(by, key=lambda m: by[m]["speedup"])
    high = Speedups([HIGH_END_MODEL], None, device).of(HIGH_END_MODEL, a, HIGH_END_NODES, RANGE_GBPS)
    return {"low": {"model": low_model, "nodes": LOW_END_NODES, "batch_per_worker": LOW_END_BATCH, **by[low_model]},
            "low_candidates": {m: v["speedup"] for m, v in by.items()},
            "high": {"model": HIGH_END_MODEL, "nodes": HIGH_END_NODES, "batch_per_worker": a.batch_per_worker, **high},
            "ends": [by[low_model]["speedup"], high["speedup"]], "ps": a.label,
            "within": [abs(v / f - 1) for v, f in zip((by[low_model]["speedup"], high["speedup"]), PAPER_RANGE)]}


def replay_set(a: PsAssumption, ks: dict[str, int], nodes: int = 16, gbps: float = 100.0, steps: int = 5,
               warmup: int = 2):
    """The replayed runs that check the model under `a` (one ReplaySet per model: ps under `a`
    and stanza at that model's best k, `steps` with `warmup` untimed; links at gbps x goodput)."""
    v = a.variant(nodes)
    return [ReplaySet(models=[m], nodes=[nodes], strategies=[v.strategy, "stanza"], fc_workers=[k],
                      target_gbps=[gbps * a.goodput], batch_per_worker=a.batch_per_worker, steps=steps, warmup=warmup,
                      ps_servers=[v.get("ps_servers", 0)], ps_overlap=[v.get("ps_overlap", False)]) for m, k in ks.items()]


def _stated_rows(runs: list[dict], a: PsAssumption, model: str, nodes: int, gbps: float) -> tuple[list, list]:
    """The ps runs under `a` and the plain stanza runs (any k) of `model` at N = nodes, gbps x goodput."""
    same = [r for r in runs if r["model"] == model and r["nodes"] == nodes and r["batch_per_worker"] == a.batch_per_worker
            and abs(r["target_gbps"] - gbps * a.goodput) < 1e-9 and not r.get("same_as")]
    if not a.runnable:
        return [], []
    v = a.variant(nodes)  # the ps Variant the stated PS is (its strategy, servers, push)
    ps = [r for r in same if (r["strategy"], r["ps_servers"], r["ps_overlap"])
          == (v.strategy, v.get("ps_servers", 0), v.get("ps_overlap", False))]
    # the paper's stanza: the strategy that owns fc_workers, at no share and no micro-batches
    stanza = [r for r in same if registry.owns(r["strategy"], "fc_workers") and not r.get("fc_batch")
              and r.get("micro_batches", 1) == 1]
    return ps, stanza


def _run_summary(r: dict) -> dict[str, Any]:
    return {"label": r["label"], "dilation": r["dilation"], "link_mbit": r["link_mbit"],
            "timed_steps": len(r.get("target_steps_s") or []), "target_step_s": r["target_step_s"],
            "predicted_step_s": r["predicted_step_s"], "error": r["error"],
            "target_samples_per_s": r["target_samples_per_s"], "predicted_samples_per_s": r["predicted_samples_per_s"],
            "bytes_equal_model": r["bytes_per_step"] == r["expected_bytes_per_step"],
            "finished_at": r.get("finished_at"), "git_commit": r.get("git_commit")}


def replayed(path: str | None, a: PsAssumption, models=tuple(PAPER_100), nodes: int = 16,
             gbps: float = 100.0) -> dict[str, Any]:
    """The committed replay of the stated PS (benchmarks/paper_regime_replay.py --configs ps_sN,...):
    per model, ps under `a` and stanza at its best replayed k, the replayed speedup (samples/s on
    the target: measured x D) beside the model's for the same configurations, or `missing` saying
    which run is not in the file. `path` empty or absent: every model missing."""
    runs: list[dict] = []
    if path and os.path.isfile(path):
        with open(path) as fh:
            runs = json.load(fh)["runs"]
    out: dict[str, Any] = {"source": path or None, "ps": a.label, "nodes": nodes, "target_gbps": gbps * a.goodput,
                           "by_model": {}}
    for m in models:
        ps, stanza = _stated_rows(runs, a, m, nodes, gbps)
        if not ps or not stanza:
            out["by_model"][m] = {"missing": ", ".join(w for w, rows in (("ps", ps), ("stanza", stanza)) if not rows)
                                  + f" not replayed under this PS ({a.label}) at N = {nodes}"}
            continue
        p = max(ps, key=lambda r: r["target_samples_per_s"])
        s = max(stanza, key=lambda r: r["target_samples_per_s"])
        replay_x = s["target_samples_per_s"] / p["target_samples_per_s"]
        model_x = s["predicted_samples_per_s"] / p["predicted_samples_per_s"]
        out["by_model"][m] = {"ps_run": _run_summary(p), "stanza_run": _run_summary(s), "stanza_k": s["fc_workers"],
                              "speedup_replayed": replay_x, "speedup_modelled": model_x,
                              "speedup_error": replay_x / model_x - 1, "paper": PAPER_100.get(m)}
    done = [v for v in out["by_model"].values() if "missing" not in v]
    out["median_abs_step_error"] = (statistics.median(abs(v[k]["error"]) for v in done for k in ("ps_run", "stanza_run"))
                                    if done else None)
    return out


def results(stated: PsAssumption, nodes: int = 16, gbps: float = 100.0, device: str = "v100",
            range_10: bool = True, replayed_json: str | None = None) -> dict[str, Any]:
    """results.json's `paper_ps`: the search, the rule's pick, both figures under the stated and
    the sharded PS, the decomposition, the 10 Gb/s range's ends under both, the replay to run."""
    sp = Speedups(list(PAPER_100), None, device)
    rows = search(sp, nodes, gbps)
    pick = choose(rows)
    at = {}
    for m in PAPER_100:
        s, sh = sp.of(m, stated, nodes, gbps), sp.of(m, SHARDED, nodes, gbps)
        at[m] = {"stated": s["speedup"], "sharded": sh["speedup"], "stated_k": s["fc_workers"],
                 "sharded_k": sh["fc_workers"], "servers": s["servers"], "paper": PAPER_100[m]}
    out = {"nodes": nodes, "gbps": gbps, "device": device, "rule": RULE, "tolerance": TOLERANCE,
           "stated": stated.to_dict(), "sharded": SHARDED.to_dict(),
           "rule_pick": pick.label if pick else None, "rule_picks_stated": int(pick == stated),  # 1: yes
           "both_hold_anywhere": int(any(r["both"] for r in rows)),  # 1: some set of the grid explains both
           "nearest": min(rows, key=worst_distance)["assumption"]["label"] if rows else None,
           "nearest_distance": min(map(worst_distance, rows)) if rows else None,
           "at_100": at, "region": [r["assumption"]["label"] for r in rows if r["both"]], "search": rows,
           "decomposition": {m: decomposition(sp, m, stated, nodes, gbps) for m in PAPER_100},
           "replay": [{"model": m, "nodes": nodes, "target_gbps": gbps * stated.goodput,
                       "batch_per_worker": stated.batch_per_worker, "ps": stated.variant(nodes).label,
                       "ps_global_batch": nodes * stated.batch_per_worker, "stanza": f"stanza k={at[m]['stated_k']}",
                       "stanza_global_batch": (nodes - at[m]["stated_k"]) * stated.batch_per_worker}
                      for m in PAPER_100] if stated.runnable else []}
    out["replayed"] = replayed(replayed_json, stated, tuple(PAPER_100), nodes, gbps)
    if range_10:
        r, sh = range_ends(stated, device), range_ends(SHARDED, device)
        out["range_10"] = {**r, "sharded_ends": sh["ends"], "sharded": sh}
    return out
