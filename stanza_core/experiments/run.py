"""Running on the emulated cluster: the one primitive every measurement goes through.

    run_config(RunConfig(...)) -> one run's row   (bench, notebooks 03-07 and the tests call it)
    measure(MeasureSpec(...), cache_dir) -> bench results dict ("config", "calibration", "runs",
                                            "summary", "timing_rounds", "cache", "unavailable")

`measure` takes the timing rounds the performance model needs (`compute_rounds`), resolves the
spec's plans (`MeasureSpec.plans`, experiments.plan: each configuration's D, payload and wire
rates, once; real compute maps a target with t_step_here = one data worker's compute step with
all N nodes computing at once, the timing round at level N; targets whose wire rate exceeds what
the emulator holds, `netem.max_link_mbit`, are listed as modelled only) and runs every plan with
`run_config`, real-compute runs each with the timing rounds of its own configuration taken right
before and after it (this machine is shared). Runs and rounds are cached (`cache.Cache`); each
run row carries its plan's values (`RunPlan.row`: link_mbit is the wire rate, payload_gbps the
payload, dilation, engine_s).
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from ..labels import run_label
from . import compute_rounds
from ..topology import Topology
from .cache import Cache
from .plan import RunPlan
from .spec import MeasureSpec, RunConfig


def netem_unavailable() -> str | None:
    """None when the emulated cluster can run here, else the one-line reason (the one root / tc
    check of the measured cells)."""
    from ..netem import missing_requirements

    missing = missing_requirements()
    return ("the emulated cluster needs Linux, root and iproute2; missing: " + ", ".join(missing)) if missing else None


def run_config(cfg: RunConfig, *, timeout_s: float = 1800) -> dict[str, Any]:
    """Train one configuration on a fresh emulated cluster; its row: the configuration, throughput,
    median step time, every step's time (`steps_s`; replayed runs: as measured, not / D), bytes (cluster total per step and per rank, as the engine counted them),
    the kernel's interface counters, the wall time, what the links carried (`link_check`) and the
    host's load over the timed steps. A run whose links slipped (carried under 95 % of their set
    rate while busy: netem.linkstats) is measured once more and the second run kept, marked if it
    slipped too; `remeasured` keeps the first one's check. Raises netem's errors (no root, a
    failed node) with the cluster removed."""
    row = _run_once(cfg, timeout_s)
    if row["link_check"].get("slipped"):
        first = {k: v for k, v in row["link_check"].items() if k != "queues"}
        row = {**_run_once(cfg, timeout_s), "remeasured": {"link_check": first, "throughput": row["throughput"]}}
    return row


def _run_once(cfg: RunConfig, timeout_s: float) -> dict[str, Any]:
    from ..netem import run_training

    with tempfile.TemporaryDirectory(prefix="stanza-run-") as tmp:
        m = run_training(cfg.cluster_nodes, cfg.link_mbit, cfg.train_args(os.path.join(tmp, "metrics.json")),
                         delay_ms=cfg.delay_ms, mtu=cfg.mtu, timeout_s=timeout_s, quiet=True)
    return {"strategy": cfg.strategy, "fc_workers": cfg.fc_workers, "ps_servers": cfg.ps_servers,
            "global_batch": cfg.global_batch, "ps_overlap": cfg.ps_overlap, **cfg.stanza_options,
            "label": cfg.label, "link_mbit": cfg.link_mbit,
            "compute": {k: m["config"].get(k) for k in ("compute", "replay_device", "dilation") if k in m["config"]},
            "throughput": m["throughput"], "step_time_median_s": m["step_time_median_s"],
            "steps_s": [s["time_s"] for s in m["steps"]],
            "bytes_per_step": m["bytes_per_step"], "ranks": m["ranks"], "kernel": m["netem"]["kernel"],
            "wall_s": m["netem"]["wall_s"], "link_check": m["link_check"], "host_load": m["host_load"]}


def target_step_s(model: str, image_size: int, num_classes: int, batch: int, device: str) -> float:
    """One data worker's step (forward, backward, update) on `batch` samples on a device-table row."""
    from ..perf import device_profile, named_profile

    profile = named_profile(model, image_size, num_classes, batch)
    dev = device_profile(device, profile, batch).profile
    return dev.step_compute_s(batch) + dev.update_s_per_param * profile.params


def _point(run: dict) -> tuple:
    """The bandwidth a run stands for: its target (configurations of one target may run at their
    own D and wire rate), else its wire rate."""
    return (0, run["target_gbps"]) if run.get("target_gbps") is not None else (1, run["link_mbit"])


def summarize(runs: list[dict]) -> list[dict]:
    """Per (bandwidth, configuration): median throughput over repeats, spread, speedups. A
    replayed run's throughput on the target is its measured throughput x its D, and speedups
    compare those (every configuration of a target may run at its own D)."""
    rows = []
    for point in sorted({_point(r) for r in runs}):
        here = [r for r in runs if _point(r) == point]
        med = {}
        for label in sorted({run_label(r) for r in here}):
            same = [r for r in here if run_label(r) == label]
            tp = [r["throughput"] for r in same]
            first = same[0]
            d = first.get("dilation") or 1.0
            med[label] = statistics.median(tp) * d
            rows.append({"strategy": first["strategy"], "fc_workers": first["fc_workers"],
                         "ps_servers": first.get("ps_servers") or 0, "ps_overlap": bool(first.get("ps_overlap")),
                         "fc_conv_share": first.get("fc_conv_share") or 0.0,
                         "micro_batches": first.get("micro_batches") or 1,
                         "label": label, "link_mbit": first["link_mbit"], "payload_gbps": first.get("payload_gbps"),
                         "dilation": d, "engine_s": first.get("engine_s"), "target_gbps": first["target_gbps"],
                         "throughput": statistics.median(tp), "throughput_min": min(tp), "throughput_max": max(tp),
                         "target_throughput": med[label], "repeats": len(tp), "bytes_per_step": first["bytes_per_step"],
                         "slipped_runs": sum(bool((r.get("link_check") or {}).get("slipped")) for r in same)})
        best_ps = max((v for r, v in zip(rows[-len(med):], med.values()) if r["strategy"] == "ps"), default=None)
        for row in rows[-len(med):]:
            for base in ("ps", "ddp"):  # ps: colocated shards, no overlap
                ref = med.get(base)
                row[f"speedup_vs_{base}"] = row["target_throughput"] / ref if ref else None
            row["speedup_vs_best_ps"] = row["target_throughput"] / best_ps if best_ps else None  # the fastest ps
    return rows


class _LazyPool:
    """The timing pool, started the first time something needs timing (a fully cached
    measurement starts no process)."""

    def __init__(self, stack: contextlib.ExitStack, spec: MeasureSpec):
        self.stack, self.spec, self.pool = stack, spec, None

    def __call__(self) -> compute_rounds.TimingPool:
        if self.pool is None:
            s = self.spec
            self.pool = self.stack.enter_context(compute_rounds.TimingPool(s.model, s.image_size, s.num_classes,
                                                                           s.nodes, reps=s.timing_reps))
        return self.pool


def _run_with_rounds(pool: compute_rounds.TimingPool, spec: MeasureSpec, cfg: RunConfig) -> dict:
    """One run with its configuration's timing rounds taken just before and just after it (their
    mean): the compute the model is given saw the load the run saw."""
    need = sorted(set(compute_rounds.config_rounds(cfg.strategy, spec.nodes, cfg.fc_workers,
                                                   spec.global_batch).values()), key=lambda r: (-r[0], r[1]))
    before = pool.time(need)
    run = run_config(cfg)
    return {**run, "timing_rounds": compute_rounds.mean_rounds(before, pool.time(need))}


def _empty(spec: MeasureSpec, unavailable: str | None) -> dict[str, Any]:
    return {"spec": spec.to_dict(), "config": {**spec.to_dict(), "fc_workers": spec.fc_workers},
            "unavailable": unavailable, "calibration": None, "timing_rounds": [], "runs": [], "summary": [],
            "modelled_only_gbps": [], "cache": None}


def skipped(spec: MeasureSpec, reason: str) -> dict[str, Any]:
    """The results of a measurement that was not run (e.g. measuring turned off): no runs."""
    return _empty(spec, reason)


MEASURE_OFF = "measure_runs=False: the measured cells were not run (modelled figures only)"


def measure_or_skip(spec: MeasureSpec, cache_dir: str | None, measure_runs: bool) -> dict[str, Any]:
    """measure(spec, cache_dir), or with measuring turned off (a notebook's `measure_runs`) the
    results of a measurement not run."""
    return measure(spec, cache_dir) if measure_runs else skipped(spec, MEASURE_OFF)


def modelled_only(benches: list[dict[str, Any] | None]) -> str | None:
    """Why an experiment's figures are modelled only: the reason its measurements did not run
    (no root or tc here, measuring turned off); None when something was measured or nothing
    was asked to be."""
    reasons = [b["unavailable"] for b in benches if b is not None and b.get("unavailable")]
    ran = [b for b in benches if b is not None and not b.get("unavailable")]
    return reasons[0] if reasons and not ran else None


def measure(spec: MeasureSpec, cache_dir: str | None = None, progress: bool = True) -> dict[str, Any]:
    """Timing rounds (real compute), the plans of `spec` (MeasureSpec.plans: D and link rates
    resolved once per configuration) and every run of them (cached); a bench results dict.

    Without root/netem: prints one line and returns the dict with "unavailable" set and no runs."""
    if not isinstance(spec, MeasureSpec):
        raise ValueError(f"measure needs a MeasureSpec, got {type(spec).__name__}")
    out = _empty(spec, netem_unavailable())
    if out["unavailable"]:
        print(f"measured part skipped: {out['unavailable']}")
        return out
    cache = Cache(cache_dir)
    if spec.replayed:
        plans = spec.plans(cache)
        out["calibration"] = {"compute": "replay", "replay_device": spec.replay_device,
                              "dilation": {p.label: p.dilation for p in plans}}
        execute(plans, spec.repeats, cache, out, run_config, key_extra={}, desc="replayed runs", progress=progress)
        return _finish(out, cache)
    base = {"model": spec.model, "image_size": spec.image_size, "num_classes": spec.num_classes}
    with contextlib.ExitStack() as stack:
        pool = _LazyPool(stack, spec)
        # The rounds of every configuration and the one that maps targets to link rates, once.
        # the calibration round: every one of the N nodes computing its share of G at once
        calib_round = (spec.nodes, Topology("ddp", spec.nodes, 0, 0).worker_batch(spec.global_batch))
        rounds = sorted(set(compute_rounds.rounds_needed(spec.configs(), spec.nodes, spec.global_batch))
                        | {calib_round}, key=lambda r: (-r[0], r[1]))
        keys = {r: {**base, "level": r[0], "batch": r[1], "reps": spec.timing_reps} for r in rounds}
        have = {r: cache.get("round", keys[r]) for r in rounds}
        missing = [r for r in rounds if have[r] is None]
        for r, got in zip(missing, pool().time(missing) if missing else []):
            cache.put("round", keys[r], got)
            have[r] = got
        out["timing_rounds"] = [have[r] for r in rounds]
        here = there = None
        if spec.target_gbps is not None:
            here = have[calib_round]["step"]
            there = target_step_s(spec.model, spec.image_size, spec.num_classes, calib_round[1], spec.target_device)
            out["calibration"] = {"batch_per_worker": calib_round[1], "t_step_here_s": here,
                                  "t_step_target_s": there, "target_device": spec.target_device,
                                  "ratio": there / here}
        plans = spec.plans(t_here=here, t_target=there)
        out["modelled_only_gbps"] = sorted({p.target_gbps for p in plans if p.link.wire_mbit > spec.max_link_mbit})
        plans = [p for p in plans if p.link.wire_mbit <= spec.max_link_mbit]
        execute(plans, spec.repeats, cache, out, lambda cfg: _run_with_rounds(pool(), spec, cfg),
                key_extra={"reps": spec.timing_reps}, desc="measured runs", progress=progress)
    return _finish(out, cache)


def execute(plans: list[RunPlan], repeats: int, cache: Cache, out: dict[str, Any], run, *, key_extra: dict[str, Any],
            desc: str, progress: bool = True) -> None:
    """Every plan `repeats` times (repeats interleaved: every plan once, then again) into
    out["runs"]: from the cache (keyed by the plan, the repeat and `key_extra`) or run by
    `run(plan.config)` and cached; each row carries its plan's values (RunPlan.row)."""
    todo = [(p, rep) for rep in range(repeats) for p in plans]
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(todo), desc=desc, unit="run")
    for p, rep in todo:
        key = p.cache_key(repeat=rep, **key_extra)
        got = cache.get("run", key)
        if got is None:
            got = run(p.config)
            cache.put("run", key, got)
        out["runs"].append({**got, **p.row(), "repeat": rep})
        if bar:
            d = f", D={p.dilation:g}" if p.config.compute == "replay" else ""
            bar.set_postfix_str(f"{p.label} @ {p.link.wire_mbit:.1f} Mbit/s{d}")
            bar.update(1)
    if bar:
        bar.close()


def _finish(out: dict[str, Any], cache: Cache) -> dict[str, Any]:
    """The summary and the cache report of a measurement whose runs are in out["runs"]."""
    out["summary"] = summarize(out["runs"]) if out["runs"] else []
    out["cache"] = cache.report()
    cache.say_reused()
    return out


def bench_from_metrics(paths: list[str], *, link_mbit: float, mtu: int = 1500,
                       target_gbps: float | None = None) -> dict[str, Any]:
    """A bench results dict from metrics JSONs of runs made elsewhere (e.g. one torchrun per GPU
    node with --device cuda), so the notebooks can plot and model them. All runs must share
    model, image size, classes, cluster size, global batch and steps; `link_mbit` is the
    network's rate in Mbit/s (per node and direction). No timing rounds: measure them on the
    machines that ran the jobs to compare predictions (validation.measure_rounds_for)."""
    if not paths:
        raise ValueError("bench_from_metrics needs at least one metrics JSON")
    runs, first = [], None
    for path in paths:
        m = json.loads(Path(path).read_text())
        c = m["config"]
        same = {k: c[k] for k in ("model", "image_size", "num_classes", "world_size", "global_batch", "steps",
                                  "warmup")}
        if first is None:
            first = same
        elif same != first:
            raise ValueError(f"{path}: config {same} differs from the first run's {first}")
        runs.append({"strategy": c["strategy"], "fc_workers": c.get("fc_workers_effective") or 0,
                     "target_gbps": target_gbps, "link_mbit": float(link_mbit), "repeat": 0,
                     "throughput": m["throughput"], "step_time_median_s": m["step_time_median_s"],
                     "bytes_per_step": m["bytes_per_step"], "ranks": m["ranks"], "device_type": c.get("device_type")})
    reps: dict[str, int] = {}
    for r in runs:  # repeated configurations count as repeats
        r["label"] = run_label(r)
        r["repeat"] = reps[r["label"]] = reps.get(r["label"], -1) + 1
    config = {"model": first["model"], "image_size": first["image_size"], "num_classes": first["num_classes"],
              "nodes": first["world_size"], "global_batch": first["global_batch"], "steps": first["steps"],
              "warmup": first["warmup"], "mtu": mtu, "delay_ms": 0.0,
              "strategies": sorted({r["strategy"] for r in runs}),
              "fc_workers": sorted({r["fc_workers"] for r in runs if r["fc_workers"]})}
    return {"spec": config, "config": config, "unavailable": None, "calibration": None, "timing_rounds": [],
            "runs": runs, "summary": summarize(runs), "modelled_only_gbps": [], "cache": None}
