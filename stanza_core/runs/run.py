"""Running on the emulated cluster: the one primitive every measurement goes through.

    run_config(RunConfig(...)) -> one run's row   (bench, notebooks 03-07 and the tests call it)
    measure(MeasureSpec(...), cache_dir) -> Measurement (runs.measurement: runs, summary,
                                            timing rounds, calibration, cache, why unavailable)

`measure` takes the timing rounds the performance model needs (`compute_rounds`), resolves the
spec's plans (`MeasureSpec.plans`, runs.plan: each configuration's D, payload and wire
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
import tempfile
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..labels import run_label
from . import compute_rounds
from ..topology import Topology
from .cache import Cache
from .measurement import Measurement, summarize
from .plan import RunPlan, replayed_plan
from .spec import MeasureSpec
from .runconfig import RunConfig
from .store import STORE_DIR, Point, Store, points
from ..netem import missing_requirements, run_training
from ..perf import device_profile, named_profile


def netem_unavailable() -> str | None:
    """None when the emulated cluster can run here, else the one-line reason (the one root / tc
    check of the measured cells)."""
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
    with tempfile.TemporaryDirectory(prefix="stanza-run-") as tmp:
        m = run_training(cfg.cluster_nodes, cfg.link_mbit, cfg.train_args(os.path.join(tmp, "metrics.json")),
                         delay_ms=cfg.delay_ms, mtu=cfg.mtu, timeout_s=timeout_s, quiet=True)
    lay = cfg.layout()
    extra = {k: v for k, v in cfg.variant.options.given().items() if k not in lay}
    return {"strategy": cfg.strategy, "fc_workers": lay["fc_workers"], "ps_servers": lay["ps_servers"],
            "global_batch": cfg.global_batch, "ps_overlap": lay["ps_overlap"], "fc_conv_share": lay["fc_conv_share"],
            "micro_batches": lay["micro_batches"], **extra, "label": cfg.label, "link_mbit": cfg.link_mbit,
            "compute": {k: m["config"].get(k) for k in ("compute", "replay_device", "dilation") if k in m["config"]},
            "throughput": m["throughput"], "step_time_median_s": m["step_time_median_s"],
            "steps_s": [s["time_s"] for s in m["steps"]],
            "bytes_per_step": m["bytes_per_step"], "ranks": m["ranks"], "kernel": m["netem"]["kernel"],
            "wall_s": m["netem"]["wall_s"], "losses": m["netem"].get("losses"),
            "link_check": m["link_check"], "host_load": m["host_load"],
            "git_commit": m["config"].get("git_commit"), "git_dirty": m["config"].get("git_dirty")}


def target_step_s(model: str, image_size: int, num_classes: int, batch: int, device: str) -> float:
    """One data worker's step (forward, backward, update) on `batch` samples on a device-table row."""
    profile = named_profile(model, image_size, num_classes, batch)
    dev = device_profile(device, profile, batch).profile
    return dev.step_compute_s(batch) + dev.update_s_per_param * profile.params


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
    need = sorted(set(compute_rounds.config_rounds(cfg.strategy, spec.nodes, cfg.layout()["fc_workers"],
                                                   spec.global_batch).values()), key=lambda r: (-r[0], r[1]))
    before = pool.time(need)
    run = run_config(cfg)
    return {**run, "timing_rounds": compute_rounds.mean_rounds(before, pool.time(need))}


def _config(spec: MeasureSpec) -> dict[str, Any]:
    return {**spec.to_dict(), "fc_workers": spec.fc_workers}


def skipped(spec: MeasureSpec, reason: str) -> Measurement:
    """The result of a measurement that was not run (e.g. measuring turned off): no runs."""
    return Measurement(spec=spec.to_dict(), config=_config(spec), unavailable=reason)


MEASURE_OFF = "measure_runs=False: the measured cells were not run (modelled figures only)"


def measure_or_skip(spec: MeasureSpec, cache_dir: str | None, measure_runs: bool) -> Measurement:
    """measure(spec, cache_dir), or with measuring turned off (a notebook's `measure_runs`) the
    result of a measurement not run."""
    return measure(spec, cache_dir) if measure_runs else skipped(spec, MEASURE_OFF)


def modelled_only(benches: list[Measurement | None]) -> str | None:
    """Why an experiment's figures are modelled only: the reason its measurements did not run
    (no root or tc here, measuring turned off); None when something was measured or nothing
    was asked to be."""
    reasons = [b.unavailable for b in benches if b is not None and b.unavailable]
    ran = [b for b in benches if b is not None and not b.unavailable]
    return reasons[0] if reasons and not ran else None


def measure(spec: MeasureSpec, cache_dir: str | None = None, progress: bool = True,
            store_dir: str | os.PathLike | None = STORE_DIR) -> Measurement:
    """Timing rounds (real compute), the plans of `spec` (MeasureSpec.plans: D and link rates
    resolved once per configuration) and every run of them (cached); their Measurement.

    Replayed runs are first looked up in the store at `store_dir` (runs.store: by default
    the committed configurations, benchmarks/results/full, of the current MEASUREMENT_VERSION;
    None: no store); a stored one is neither measured nor planned again (no engine seconds
    either). The store is only read here.

    Without root/netem: prints one line and returns a Measurement with `unavailable` set and no
    runs, unless every replayed run is stored."""
    if not isinstance(spec, MeasureSpec):
        raise ValueError(f"measure needs a MeasureSpec, got {type(spec).__name__}")
    store = Store(store_dir) if spec.replayed and store_dir is not None else None
    todo = points(spec) if spec.replayed else []
    stored = [store.get(pt) for pt in todo] if store is not None else [None] * len(todo)
    if todo and all(stored):  # everything stored: nothing to measure, here or on a machine without the emulator
        runs = [e["run"] for e in stored]
        return _finish(spec, Cache(cache_dir), runs, calibration=_replay_calibration(spec, runs), store=store)
    if reason := netem_unavailable():
        print(f"measured part skipped: {reason}")
        return skipped(spec, reason)
    cache = Cache(cache_dir)
    if spec.replayed:
        bar = _bar(len(todo), "replayed runs") if progress else None
        runs = []
        for pt, entry in zip(todo, stored):
            runs.append(entry["run"] if entry else replayed_point(pt, cache)[1])
            if bar:
                bar.set_postfix_str(f"{pt.label}{' (stored)' if entry else ''}")
                bar.update(1)
        if bar:
            bar.close()
        return _finish(spec, cache, runs, calibration=_replay_calibration(spec, runs), store=store)
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
        here = there = calibration = None
        if spec.target_gbps is not None:
            here = have[calib_round]["step"]
            there = target_step_s(spec.model, spec.image_size, spec.num_classes, calib_round[1], spec.target_device)
            calibration = {"batch_per_worker": calib_round[1], "t_step_here_s": here, "t_step_target_s": there,
                           "target_device": spec.target_device, "ratio": there / here}
        plans = spec.plans(t_here=here, t_target=there)
        too_fast = sorted({p.target_gbps for p in plans if p.link.wire_mbit > spec.max_link_mbit})
        plans = [p for p in plans if p.link.wire_mbit <= spec.max_link_mbit]
        runs = execute(plans, spec.repeats, cache, lambda cfg: _run_with_rounds(pool(), spec, cfg),
                       key_extra={"reps": spec.timing_reps}, desc="measured runs", progress=progress)
    return _finish(spec, cache, runs, calibration=calibration, timing_rounds=[have[r] for r in rounds],
                   modelled_only_gbps=too_fast)


def execute(plans: list[RunPlan], repeats: int, cache: Cache, run, *, key_extra: dict[str, Any], desc: str,
            progress: bool = True) -> list[dict[str, Any]]:
    """Every plan `repeats` times (repeats interleaved: every plan once, then again), one row each:
    from the cache (keyed by the plan, the repeat and `key_extra`) or run by `run(plan.config)`
    and cached; each row carries its plan's values (RunPlan.row)."""
    todo = [(p, rep) for rep in range(repeats) for p in plans]
    bar = None
    if progress:
        bar = tqdm(total=len(todo), desc=desc, unit="run")
    rows = []
    for p, rep in todo:
        rows.append(cache.run_or_cached(p, rep, lambda p=p: run(p.config), **key_extra))
        if bar:
            d = f", D={p.dilation:g}" if p.config.compute == "replay" else ""
            bar.set_postfix_str(f"{p.label} @ {p.link.wire_mbit:.1f} Mbit/s{d}")
            bar.update(1)
    if bar:
        bar.close()
    return rows


def replayed_point(point: Point, cache: Cache, engine_s: float | None = None) -> tuple[RunPlan, dict[str, Any]]:
    """One replayed configuration measured: its plan (runs.plan.replayed_plan: engine
    seconds measured once and kept in `cache`, or `engine_s` when the configuration's are already
    known) and its run (from the runs cache, or run_config), as the Measurement row run.measure
    makes of it."""
    p = replayed_plan(point.config, point.target_gbps, cache, point.dilation_rule,
                      engine_s=engine_s if point.dilation_rule.engine else None)
    return p, cache.run_or_cached(p, point.repeat, lambda: run_config(p.config, timeout_s=p.timeout_s()))



def _replay_calibration(spec: MeasureSpec, runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"compute": "replay", "replay_device": spec.replay_device,
            "dilation": {r["label"]: r["dilation"] for r in runs}}


def _bar(total: int, desc: str):
    return tqdm(total=total, desc=desc, unit="run")


def _finish(spec: MeasureSpec, cache: Cache, runs: list[dict[str, Any]], store: Store | None = None,
            **made: Any) -> Measurement:
    """The Measurement of `spec`'s runs: their summary and the cache report (with the store's:
    how many runs it gave)."""
    report = cache.report()
    cache.say_reused()
    if store is not None and store.reused:
        print(f"reused {len(store.reused)} stored configurations from {store.root} "
              f"(measurement version {store.version})")
        report = {**report, "store": store.report()}
    return Measurement(spec=spec.to_dict(), config=_config(spec), runs=runs, summary=summarize(runs),
                       cache=report, **made)


def bench_from_metrics(paths: list[str], *, link_mbit: float, mtu: int = 1500,
                       target_gbps: float | None = None) -> Measurement:
    """A Measurement of metrics JSONs of runs made elsewhere (e.g. one torchrun per GPU
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
    return Measurement(spec=config, config=config, runs=runs, summary=summarize(runs), source=", ".join(paths))
