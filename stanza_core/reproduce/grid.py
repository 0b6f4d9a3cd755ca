"""The full grid: every replayed configuration the experiments' `full` parameter sets run, listed
against the store of measured configurations (runs.store, benchmarks/results/full), and
filled within a time budget.

    python -m stanza_core.reproduce --full --list              the grid: stored, missing, time to fill
    python -m stanza_core.reproduce --full --budget-min 60     measure missing ones for up to 60 min

The grid is built the way the notebooks build their runs: each measuring notebook's `parameters`
cell defaults, overridden by its YAML's parameter set, give its parameters dataclass
(nbtools.experiment_params), whose replayed MeasureSpecs give the configurations
(runs.store.points). A configuration several notebooks share is one point of the grid.
Real-compute runs are not in it: their link rates come from this machine's own timing rounds,
so they are measured (in seconds, on the small CIFAR-sized models) by the notebooks on each
machine, as before.

Filling measures the missing points cheapest first (by the estimate below), each with
run.replayed_point (engine seconds and runs also kept in the local runs cache), and writes each
into the store as soon as it is measured. It starts no new point once the budget is spent (a
point already started runs to its end). It commits nothing: a person commits the new files.

The time estimate of a point, measuring nothing: its plan with the links' D (the engine term,
measured on the machine, can only raise D; where the store already holds the configuration at
another target, its engine seconds are used), `steps` dilated steps D x the model's step on the
target, plus SETUP_S_PER_NODE per emulated node, plus the engine-seconds run (ENGINE_STEPS steps
at D = 1) once per configuration not yet stored at any target. Where points are stored, their
measured seconds against their estimate give a ratio per model that the listing applies to that
model's missing ones (the overall ratio to a model with none stored).
"""
from __future__ import annotations

import ast
import dataclasses
import fnmatch
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..runs.plan import SETUP_S_PER_NODE
from ..runs.store import Point, Store, check_timed_steps, points
from .spec import REPO_ROOT, Spec, SpecError
from ..nbtools import experiment_params
from ..runs.plan import (COMPUTE_ONLY_GBPS, ENGINE_STEPS, config_payload_scale, model_step_s, replayed_plan,
                         stored_plan)

MAX_FAILS_IN_A_ROW = 2  # fill: failed points in a row that stop it

def notebook_parameters(spec: Spec, mode: str) -> dict[str, Any]:
    """The parameters a notebook runs with in `mode`: its `parameters` cell's defaults, then the
    YAML's parameter set (as papermill injects it)."""
    import papermill as pm  # papermill: ~470 more modules; only when a notebook is read or run

    defaults = {name: ast.literal_eval(d["default"]) for name, d in pm.inspect_notebook(str(spec.notebook)).items()}
    return {**defaults, **spec.params[mode]}


def replayed_specs(spec: Spec, mode: str = "full") -> list:
    """The replayed MeasureSpecs an experiment's notebook runs in `mode` ([] for a notebook that
    replays nothing): its parameters class, registered by the experiment itself
    (runs.replayed.in_grid), built from the notebook's parameters as papermill passes
    them, paths among them taken from the notebook's folder."""
    from ..experiments import grid_experiments  # experiments: ~135 more modules (perf, torch's flop counter); keeps `stanza-reproduce --help` light
    params_cls = grid_experiments().get(spec.notebook.stem)
    if params_cls is None:
        return []
    params = notebook_parameters(spec, mode)
    for name in getattr(params_cls, "PATHS", ()):  # relative paths are the notebook's (papermill's cwd)
        value = params.get(name)
        params[name] = ([str(spec.notebook.parent / v) for v in value] if isinstance(value, list)
                        else str(spec.notebook.parent / value) if value else value)
    p = experiment_params(params_cls, params)
    return [s for s in p.grid_specs() if s.replayed] if getattr(p, "measure_runs", True) else []


@dataclasses.dataclass
class GridPoint:
    point: Point
    experiments: list[str]  # the experiments (YAML stems) that run it


def grid(specs: list[Spec], mode: str = "full") -> list[GridPoint]:
    """Every replayed configuration of `specs` in `mode`, once, in the experiments' order."""
    out: dict[str, GridPoint] = {}
    for spec in specs:
        for ms in replayed_specs(spec, mode):
            for pt in points(ms):
                gp = out.setdefault(pt.name, GridPoint(pt, []))
                if spec.name not in gp.experiments:
                    gp.experiments.append(spec.name)
    return list(out.values())


def estimate_s(point: Point, engine_s: float | None = None, *, engine_run: bool = True) -> float:
    """Seconds to measure `point` (the module docstring): set-up, `steps` dilated steps, and the
    engine-seconds run when `engine_run` (D from the links, or with `engine_s` when known)."""

    cfg = point.config
    scale = config_payload_scale(cfg, point.target_gbps)
    # F as the links ask for it (the messages, measured by the engine run, may lower it)
    rule = point.dilation_rule  # the engine term only with its seconds known: nothing is measured here
    known = dataclasses.replace(rule, engine=rule.engine and engine_s is not None)
    p = replayed_plan(cfg, point.target_gbps, None, known, engine_s=engine_s if rule.engine else None,
                      payload_scale=scale)
    run = p.expected_s()
    if engine_run and rule.engine:
        run += SETUP_S_PER_NODE * cfg.cluster_nodes + ENGINE_STEPS * (model_step_s(cfg, COMPUTE_ONLY_GBPS) + (engine_s or 0.0))
    return run


def stored_estimate_s(point: Point, entry: dict) -> float:
    """What the estimate of a stored entry's run was on the plan it ran on (its D and F, its steps):
    set-up and dilated steps, the machine's factor's denominator."""
    cfg = dataclasses.replace(point.config, steps=entry["key"]["steps"], warmup=entry["key"]["warmup"])
    return stored_plan(cfg, entry["plan"]).expected_s()


def _engine_key(point: Point, payload_scale: int | None = None) -> str:
    """A configuration without its target, at payload scale F (by default the F its links ask
    for, runs.plan.payload_scale_of: its messages are not known before it is measured): the
    points whose engine seconds are the same."""
    c = point.config
    if payload_scale is None:
        payload_scale = config_payload_scale(c, point.target_gbps)
    key = point.key()
    return repr(sorted((k, v) for k, v in key.items() if k not in ("target_gbps", "dilation_floor", "repeat"))
                + [("payload_scale", int(payload_scale))])


def _estimates(gps: list[GridPoint], engine: dict[str, float], engine_done: set[str]) -> dict[str, float]:
    """estimate_s of each point, cheapest first, the engine-seconds run counted once per
    configuration (none for those in `engine_done`); `engine`: known engine seconds."""
    est, done = {}, set(engine_done)
    for gp in sorted(gps, key=lambda g: estimate_s(g.point, engine_run=False)):
        k = _engine_key(gp.point)
        est[gp.point.name] = estimate_s(gp.point, engine.get(k), engine_run=k not in done)
        done.add(k)
    return est


def listing(points_: list[GridPoint], store: Store) -> dict[str, Any]:
    """The grid against the store: counts (stored at the current version, old versions, missing),
    per experiment, the order filling measures the missing ones in and the estimated seconds."""
    status = {gp.point.name: store.status(gp.point) for gp in points_}
    entries = {gp.point.name: store.read(gp.point) for gp in points_ if status[gp.point.name] == "stored"}
    engine = {_engine_key(gp.point, e["plan"].get("payload_scale", 1)): e["plan"]["engine_s"] for gp in points_
              if (e := entries.get(gp.point.name)) and e["plan"].get("engine_s") is not None}
    missing = [gp for gp in points_ if status[gp.point.name] != "stored"]
    est = _estimates(missing, engine, set(engine))
    measured = [(gp.point.config.model, entries[n]["measured"]["seconds"], stored_estimate_s(gp.point, entries[n]))
                for gp in points_ if (n := gp.point.name) in entries]
    # the machine's factor on its estimate does not depend on the version: older entries count
    # too, each against the estimate of the plan it ran on (its D, F and timed steps)
    for gp in points_:
        if status[gp.point.name] == "old" and (e := store.older(gp.point)) is not None:
            measured.append((gp.point.config.model, e["measured"]["seconds"], stored_estimate_s(gp.point, e)))
    ratio = sum(m for _, m, _ in measured) / sum(e for _, _, e in measured) if measured else None
    # per model: the estimate misses by a model's own factor (a VGG-16 run's host work is larger)
    by_model = {model: sum(m for x, m, _ in measured if x == model) / sum(e for x, _, e in measured if x == model)
                for model in {x for x, _, _ in measured}}
    model_of = {gp.point.name: gp.point.config.model for gp in missing}
    corrected = sum(e * by_model.get(model_of[n], ratio) for n, e in est.items()) if ratio else None
    per = {}
    for gp in points_:
        for x in gp.experiments:
            d = per.setdefault(x, {"points": 0, "stored": 0})
            d["points"] += 1
            d["stored"] += status[gp.point.name] == "stored"
    return {"points": len(points_), "stored": len(entries), "old_version": sum(s == "old" for s in status.values()),
            "missing": len(missing), "version": store.version, "store": str(store.root),
            "estimate_missing_s": sum(est.values()), "estimate_all_s": sum(_estimates(points_, {}, set()).values()),
            "measured_over_estimate": ratio, "measured_over_estimate_by_model": by_model,
            "corrected_missing_s": corrected, "by_experiment": per, "order": list(est), "estimate_s": est,
            "status": status, "engine_s": engine}


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def print_listing(lst: dict[str, Any], points_: list[GridPoint], *, verbose: bool = True) -> None:
    by_name = {gp.point.name: gp for gp in points_}
    root = Path(lst["store"]).resolve()
    where = root.relative_to(REPO_ROOT) if root.is_relative_to(REPO_ROOT) else root
    print(f"full grid: {lst['points']} replayed configurations; {lst['stored']} stored (measurement version "
          f"{lst['version']}, {where}), {lst['missing']} to measure"
          + (f" ({lst['old_version']} of them stored at an older version, shown by reports until measured again)"
             if lst["old_version"] else ""))
    for name, d in lst["by_experiment"].items():
        print(f"  {name}: {d['stored']} of {d['points']} stored")
    if verbose:
        for name in lst["order"]:
            gp = by_name[name]
            print(f"  to measure: {gp.point.label} (~{_h(lst['estimate_s'][name])}; {', '.join(gp.experiments)})")
    ratio = lst["measured_over_estimate"]
    print(f"estimate (steps x D x the model's step, {SETUP_S_PER_NODE:g} s set-up per node, the engine-seconds run; "
          f"F and D from the links where no engine seconds are stored, the engine term raises D for short steps): "
          f"{_h(lst['estimate_missing_s'])} to fill the missing ones, {_h(lst['estimate_all_s'])} for the whole grid"
          + (f"; the stored runs (every version) took {ratio:.2f}x their estimate ("
             + ", ".join(f"{m} {r:.2f}x" for m, r in sorted(lst["measured_over_estimate_by_model"].items()))
             + f"), so about {_h(lst['corrected_missing_s'])} to fill (each model's factor on its own runs)"
             if ratio else ""))


def fill(points_: list[GridPoint], store: Store,
         measure_point: Callable[[Point, float | None], tuple[dict, dict, dict]], *,
         budget_s: float, clock: Callable[[], float] = time.monotonic,
         say: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure the grid's missing points, cheapest first, each written to `store` once measured,
    starting none once `budget_s` seconds have passed. `measure_point(point, engine_s)` -> (plan
    row, RunConfig dict, Measurement row); the fill passes engine_s None: a configuration's engine
    seconds depend on its payload scale, which its target decides, and the plan measures them once
    per configuration and scale in the runs cache. A point whose job fails (a
    RuntimeError: the engine's JobError, the emulated cluster's errors) is one line and stays
    missing, and the fill goes on; MAX_FAILS_IN_A_ROW failures in a row stop it (a cause that is
    not one run's). Returns what was measured, what failed (label: error) and how many points are
    left (failed ones included)."""
    lst = listing(points_, store)
    by_name = {gp.point.name: gp for gp in points_}
    for name in lst["order"]:  # before hours of measuring: every point must be storable
        check_timed_steps(by_name[name].point)
    start, done, failed, in_a_row = clock(), [], [], 0
    for i, name in enumerate(lst["order"], start=1):
        spent = clock() - start
        if spent >= budget_s:
            say(f"budget of {_h(budget_s)} spent ({_h(spent)}): {len(lst['order']) - len(done)} configurations "
                f"left for a later run")
            break
        pt = by_name[name].point
        say(f"[{i}/{len(lst['order'])}] {pt.label} (~{_h(lst['estimate_s'][name])})")
        load = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
        t0 = clock()
        try:
            plan, config, run = measure_point(pt, None)
        except RuntimeError as e:
            error = " ".join(str(e).split())[:400]
            failed.append(f"{pt.label}: {error}")
            in_a_row += 1
            say(f"[{i}/{len(lst['order'])}] {pt.label} failed after {_h(clock() - t0)}, left missing: {error}")
            if in_a_row >= MAX_FAILS_IN_A_ROW:
                say(f"{in_a_row} configurations failed in a row: fill stopped")
                break
            continue
        in_a_row = 0
        path = store.put(pt, plan=plan, config=config, run=run, seconds=clock() - t0, load_before=load)
        done.append(path.name)
    return {"measured": done, "failed": failed, "left": len(lst["order"]) - len(done), "seconds": clock() - start}


def measure_point(cache_dir: str | os.PathLike | None) -> Callable[[Point, float | None], tuple[dict, dict, dict]]:
    """The real measure_point of `fill`: run.replayed_point with the runs cache at `cache_dir`."""
    from ..runs.cache import Cache  # runs.run: ~135 more modules (perf, torch's flop counter); keeps `stanza-reproduce --help` light
    from ..runs.run import replayed_point  # runs.run: ~135 more modules (perf, torch's flop counter); keeps `stanza-reproduce --help` light

    cache = Cache(cache_dir)

    def one(pt: Point, engine_s: float | None = None) -> tuple[dict, dict, dict]:
        plan, row = replayed_point(pt, cache, engine_s)
        return plan.row(), plan.config.to_dict(), row

    return one


def budget_seconds(minutes: float | None) -> float:
    """--budget-min as seconds (None: no limit); one-line ValueError for a bad value."""
    if minutes is None:
        return math.inf
    if not (isinstance(minutes, (int, float)) and math.isfinite(minutes) and minutes > 0):
        raise ValueError(f"--budget-min must be a positive number of minutes, got {minutes!r}")
    return 60.0 * minutes




def select(gps: list[GridPoint], pattern: str | None) -> list[GridPoint]:
    """The points whose label matches the shell pattern (fnmatch, case-sensitive; None: all), as
    `--points "*N=16*"`; one-line SpecError when none does."""
    if pattern is None:
        return gps
    got = [gp for gp in gps if fnmatch.fnmatchcase(gp.point.label, pattern)]
    if not got:
        raise SpecError(f"--points {pattern!r} matches none of the grid's {len(gps)} configurations; labels read "
                         f"like {gps[0].point.label!r}" if gps else f"--points {pattern!r}: the grid is empty")
    return got


def simulate_grid(gps) -> None:
    """The grid's points not simulated at the current simulator version, simulated into the
    committed store benchmarks/results/sim (minutes for all 125); without SimGrid one line says so."""
    from ..sim import grid as sim_grid  # the simulator (engine config, torch): only when the grid is filled
    from ..sim.run import available  # with sim.grid

    if reason := available():
        print(f"full grid not simulated: {reason}")
        return
    missing = [gp for gp in gps if sim_grid.read(gp.point) is None]
    if not missing:
        return
    got = sim_grid.run(missing)
    print(f"simulated {got['simulated']} grid configurations into {sim_grid.SIM_STORE.relative_to(sim_grid.ROOT)} in "
          f"{_h(got['seconds'])}" + "".join(f"; failed: {f}" for f in got["failed"]))


def run_grid(specs: list[Spec], *, store: Store, cache_dir: str | os.PathLike | None, list_only: bool,
             budget_s: float, pattern: str | None = None) -> str:
    """`reproduce --full`'s first step: list the grid (`list_only`: and stop, "listed"), else fill
    its missing points within `budget_s` (with `pattern`: only the points whose label matches it,
    `select`). Returns "complete" (every point stored at the current
    version), "partial" (the budget ran out), "failed" (a point's run failed: listed, left missing)
    or "unavailable" (no emulated cluster here)."""
    from ..runs.run import netem_unavailable  # runs.run: ~135 more modules (perf, torch's flop counter); keeps `stanza-reproduce --help` light

    gps = select(grid(specs, "full"), pattern)
    if pattern is not None:
        print(f"--points {pattern!r}: {len(gps)} configurations of the grid")
    lst = listing(gps, store)
    print_listing(lst, gps, verbose=list_only)
    from ..sim import grid as sim_grid  # the simulated grid's listing reads its own store (JSON files)

    print(sim_grid.listing(gps))
    if list_only:
        return "listed"
    simulate_grid(gps)
    if not lst["missing"]:
        return "complete"
    if reason := netem_unavailable():
        print(f"full grid not measured: {reason}")
        return "unavailable"
    got = fill(gps, store, measure_point(cache_dir), budget_s=budget_s)
    if got["measured"]:
        print(f"wrote {len(got['measured'])} measured configurations into {store.root} in {_h(got['seconds'])}; "
              f"nothing is committed: commit them with `git add {store.root}`")
    for line in got["failed"]:
        print(f"failed, left missing: {line}")
    if got["failed"]:
        return "failed"
    return "complete" if got["left"] == 0 else "partial"
