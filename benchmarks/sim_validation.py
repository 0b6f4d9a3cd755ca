"""The simulator against the emulated cluster: the configurations of
benchmarks/sim_validation/plan.json (fixed, with their fit / held-out split, before any was
measured), each emulated at the current measurement version and simulated.

    sudo .venv/bin/python benchmarks/sim_validation.py measure      # emulate what is missing (needs root)
    .venv/bin/python benchmarks/sim_validation.py report            # simulate each, write the table

`measure` runs each configuration on the emulated cluster exactly as the full grid does
(runs.run.replayed_point: engine seconds at D = 1, then the replayed run at D and F from the run
plan's rules) and writes one entry per configuration into benchmarks/results/sim_validation/
(runs.store.Store, keyed and versioned as the grid's store: an entry of an older measurement
version is measured again). Configurations that are also points of the full grid are written into
the grid's store (benchmarks/results/full) as well. Run it alone on the machine: timing.

`report` (sim.validation) simulates each stored configuration's generated program on SimGrid,
fits the simulator's parameters on the `fit` half only and writes
benchmarks/results/sim_validation.json: per configuration the emulated step (median of the
timed steps / D), the simulated one, the analytic model's, and the emulation's TCP losses.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "benchmarks" / "sim_validation" / "plan.json"
STORE = ROOT / "benchmarks" / "results" / "sim_validation"


def plan_points(plan_path: Path = PLAN):
    """(Point, half) for each configuration of the plan, in the plan's order."""
    from stanza_core.runs.dilation_rule import DilationRule
    from stanza_core.runs.runconfig import UNSET_LINK_MBIT, RunConfig
    from stanza_core.runs.store import Point
    from stanza_core.variant import Variant

    plan = json.loads(plan_path.read_text())
    base = plan["base"]
    out = []
    for c in plan["configurations"]:
        cfg = RunConfig(model=c["model"], nodes=c["nodes"], variant=Variant(c["strategy"], **c["options"]),
                        global_batch=c["global_batch"], link_mbit=UNSET_LINK_MBIT, **base)
        out.append((Point(cfg, float(c["target_gbps"]), DilationRule(floor=1.0, engine=True)), c["half"]))
    return out


def measure(args) -> int:
    from stanza_core.reproduce.grid import grid, measure_point
    from stanza_core.reproduce.spec import REPO_ROOT, load_specs
    from stanza_core.runs.run import netem_unavailable
    from stanza_core.runs.store import Store

    if reason := netem_unavailable():
        print(f"error: {reason}", file=sys.stderr)
        return 2
    store, grid_store = Store(STORE), Store()
    in_grid = {gp.point.name for gp in grid(load_specs(REPO_ROOT / "reproductions"), "full")}
    one = measure_point(args.cache)
    todo = [(pt, half) for pt, half in plan_points() if store.get(pt) is None]
    if args.only:
        todo = [(pt, h) for pt, h in todo if args.only in pt.label]
    print(f"{len(todo)} configurations to emulate")
    for i, (pt, half) in enumerate(todo, 1):
        print(f"[{i}/{len(todo)}] {pt.label} ({half})", flush=True)
        load = list(os.getloadavg())
        t0 = time.monotonic()
        try:
            plan, config, run = one(pt, None)
        except RuntimeError as e:
            print(f"  failed: {' '.join(str(e).split())[:300]}", flush=True)
            continue
        seconds = time.monotonic() - t0
        store.put(pt, plan=plan, config=config, run=run, seconds=seconds, load_before=load)
        if pt.name in in_grid:
            grid_store.put(pt, plan=plan, config=config, run=run, seconds=seconds, load_before=load)
        print(f"  {seconds:.0f} s, D={plan['dilation']:g}, {run.get('step_time_s') or run.get('median_step_s')}",
              flush=True)
    return 0


def report(args) -> int:
    from stanza_core.sim import validation

    out = validation.report(plan_points(), STORE)
    Path(args.out).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(validation.table(out))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="emulate the missing configurations (root)")
    m.add_argument("--cache", default=str(ROOT / "reproductions" / "out" / "bench-cache"))
    m.add_argument("--only", default=None, help="only the configurations whose label contains this")
    r = sub.add_parser("report", help="simulate every stored configuration and write the table")
    r.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sim_validation.json"))
    args = ap.parse_args(argv)
    return measure(args) if args.cmd == "measure" else report(args)


if __name__ == "__main__":
    sys.exit(main())
