"""The replay benchmarks' one loop (benchmarks/paper_regime_replay.py, beyond_replay.py): run
each RunPlan on the emulated cluster and report it beside the performance model.

    run_plans(plans, names, done=..., write=...) -> rows   one row per plan, written after each run

A row holds the plan's values (RunPlan.row: D, wire and payload rates, engine seconds), the
measured step time / D (the target's time), the model's prediction of the same configuration on
the replay device's table profile at the bandwidth the links carried x D (Link.model_gbps), the
error, and the bytes counted beside perf.expected_bytes.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from .plan import model_prediction
from .plan import RunPlan
from .run import run_config
from .runconfig import RunConfig
from ..perf import expected_bytes, named_profile


def expected_bytes_per_step(cfg: RunConfig) -> int:
    """perf.expected_bytes of a run's configuration, summed over ranks (what the engine counts)."""
    profile = named_profile(cfg.model, cfg.image_size, cfg.num_classes)
    return sum(sum(r["sent"].values()) for r in expected_bytes(profile, cfg.variant, cfg.cluster_nodes,
                                                                global_batch=cfg.global_batch))


def plan_row(plan: RunPlan, m: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """One benchmark row: the plan, its run `m` (run.run_config's row) and the model beside it."""
    cfg, d = plan.config, plan.dilation
    pred = model_prediction(cfg, plan.link.model_gbps)
    target = m["step_time_median_s"] / d
    return {"model": cfg.model, "nodes": cfg.nodes, **plan.row(), "strategy": cfg.strategy,
            **cfg.layout(), "device": cfg.replay_device,
            "measured_step_s": m["step_time_median_s"], "target_step_s": target,
            "target_steps_s": [t / d for t in m.get("steps_s", [])],
            "model_step_s": plan.target_step_s, "predicted_step_s": pred.iteration_s,
            "error": target / pred.iteration_s - 1, "target_samples_per_s": cfg.global_batch / target,
            "predicted_samples_per_s": pred.throughput, "bytes_per_step": m["bytes_per_step"],
            "expected_bytes_per_step": expected_bytes_per_step(cfg),
            "peak_rss_mib": [r.get("peak_rss_mib") for r in m.get("ranks", [])], "wall_s": wall_s,
            "git_commit": m.get("git_commit"), "git_dirty": m.get("git_dirty"), "host_load": m.get("host_load"),
            "losses": m.get("losses"), "link_check": m.get("link_check"),
            "finished_at": time.strftime("%Y-%m-%d %H:%M:%S")}


def run_plans(plans: list[tuple[str, RunPlan]], *, write: Callable[[list[dict]], None] = lambda rows: None,
              timeout_s: float = 3600, name_key: str = "name") -> list[dict]:
    """Every (name, plan): a row (plan_row, the name under `name_key`); a plan equal to an earlier
    one (the same configuration under another name) is not run twice: its row is the earlier
    one's with `same_as` naming it. `write` gets the rows so far after every run. Each run's limit:
    `timeout_s`, or its plan's (RunPlan.timeout_s) where that is longer."""
    rows: list[dict] = []
    seen: dict[RunPlan, dict] = {}
    for name, plan in plans:
        kept = None
        if plan in seen:
            kept = dict(seen[plan], **{name_key: name, "same_as": seen[plan][name_key]})
        else:
            t0 = time.time()
            m = run_config(plan.config, timeout_s=max(timeout_s, plan.timeout_s()))
            kept = {name_key: name, **plan_row(plan, m, time.time() - t0)}
            r = kept
            print(f"{r['model']} N={r['nodes']} {r['target_gbps']:g} Gb/s {name} ({plan.label}): D={plan.dilation:g}, "
                  f"target step {r['target_step_s'] * 1e3:.1f} ms (model {r['predicted_step_s'] * 1e3:.1f} ms, "
                  f"{100 * r['error']:+.1f} %), bytes {'=' if r['bytes_per_step'] == r['expected_bytes_per_step'] else '!='}"
                  f" model, {r['wall_s']:.0f} s", file=sys.stderr, flush=True)
            seen[plan] = kept
        rows.append(kept)
        write(rows)
    return rows
