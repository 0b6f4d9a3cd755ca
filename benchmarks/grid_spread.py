"""Step-to-step spread of replayed runs: a few stored configurations of the full grid run again
with more timed steps, each step's time kept, so a reader sees how far one timed step (what most
stored grid runs time: 3 steps, 2 of them warm-up) can be from the next.

    python benchmarks/grid_spread.py --list                   the chosen set and its estimate; runs nothing
    python benchmarks/grid_spread.py                          run it (~40 min; root; the machine alone)
    python benchmarks/grid_spread.py --configs "alexnet N=4 stanza k=1 @ 10*" --steps-timed 2 --out /tmp/s.json

Which configurations: the grid's stored points, each by its newest entry whatever its measurement
version (stanza_core/reproduce/grid.py, runs/store.py), so every run here repeats a stored figure.
By default (`choose`) a varied set, cheapest first within the variety: every kind of configuration
stored (ddp, ps, ps with dedicated servers, ps overlap, stanza k=1, stanza k>=2), both models and
both replay devices first, then more bandwidths and cluster sizes, within --budget-min; at least
--count of them while the budget holds. `--configs` picks by shell pattern on the label or on the
store's file name instead (comma-separated).

Time of one: the grid's own estimate (grid.estimate_s: set-up per node + steps x D x the model's
step) at the new step count, times that point's stored seconds over the grid's estimate of its
stored run, at least 1 (the grid's listing applies one such ratio to all; per point here because
VGG-16 runs took 2-5x their estimate and AlexNet ones about 1x).

How each runs: the stored plan exactly (same D, payload and wire rates, target step, engine
seconds; runs.plan.stored_plan), with steps = the stored warm-up + --steps-timed, through
runs.run.run_config, the primitive the grid's fill reaches through run.replayed_point (it
makes and removes the emulated cluster). No runs cache: every run is measured afresh. Today's D
rule (plan.replayed_plan with the stored engine seconds) is recorded beside it: a difference
means the stored figure was planned by another rule.

Step times: the run row's `steps_s` (the metrics JSON's `steps[i].time_s`: per step the slowest
rank's time, measured seconds, not / D; warm-up steps first); each rank's own step durations come
from `ranks[r].step_start_s/step_end_s`. spread = (max - min) / median of the timed steps; cv =
sample standard deviation / mean. The stored figure is the stored run's `step_time_median_s`.

Output: one JSON (default benchmarks/results/grid_spread.json, never inside the store),
rewritten atomically after every configuration; an existing file is refused unless --overwrite.
"""
from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stanza_core import atomic  # noqa: E402
from stanza_core.runs.dilation_rule import DilationRule  # noqa: E402
from stanza_core.runs.runconfig import RunConfig, UNSET_LINK_MBIT  # noqa: E402
from stanza_core.runs.store import MEASUREMENT_VERSION, STORE_DIR, Point, Store, host  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "grid_spread.json"
THRESHOLD = 0.01  # the line: a spread above 1 % means new measurements time >= 3 steps
# what the default set must vary over (weights: a new kind of configuration counts most)
WEIGHTS = {"kind": 4, "model": 3, "device": 3, "gbps": 1, "nodes": 1, "model kind": 1}
FIRST = ("kind", "model", "device")  # covered before bandwidths and cluster sizes


@dataclasses.dataclass
class Candidate:
    point: Point
    entry: dict[str, Any]  # the stored entry (runs.store)
    experiments: list[str]
    estimate_s: float = 0.0  # seconds to run it with the new step count (module docstring)

    @property
    def label(self) -> str:
        return self.point.label

    def features(self) -> dict[str, Any]:
        c = self.point.config
        v = c.variant
        kind = c.strategy + (" servers" if v.get("ps_servers") else "") + (" overlap" if v.get("ps_overlap") else "")
        if c.strategy == "stanza":
            kind += " k=1" if v.options.fc_workers == 1 else " k>=2"
        return {"kind": kind, "model": c.model, "device": str(c.replay_device), "gbps": self.point.target_gbps,
                "nodes": c.nodes, "model kind": f"{c.model} {kind}"}


def spread_stats(steps_s: list[float], threshold: float = THRESHOLD) -> dict[str, Any]:
    """median, min, max, spread = (max - min) / median, cv = stdev / mean, and whether spread > threshold."""
    if not steps_s:
        raise ValueError("spread_stats needs at least one step time")
    med, lo, hi = statistics.median(steps_s), min(steps_s), max(steps_s)
    cv = statistics.stdev(steps_s) / statistics.mean(steps_s) if len(steps_s) > 1 else None
    spread = (hi - lo) / med
    return {"median_s": med, "min_s": lo, "max_s": hi, "spread": spread, "cv": cv, "over": spread > threshold}


def summary(records: list[dict[str, Any]], threshold: float = THRESHOLD) -> dict[str, Any]:
    """Over the measured records: how many have spread > threshold, the median and worst spread."""
    ok = [r for r in records if r.get("spread") is not None]
    worst = max(ok, key=lambda r: r["spread"], default=None)
    over = [r["label"] for r in ok if r["spread"] > threshold]
    return {"configurations": len(records), "measured": len(ok), "failed": sum(bool(r.get("error")) for r in records),
            "threshold": threshold, "over_threshold": len(over), "over_labels": over,
            "median_spread": statistics.median(r["spread"] for r in ok) if ok else None,
            "worst_spread": worst["spread"] if worst else None, "worst_label": worst["label"] if worst else None,
            "rule": (f"spread over {threshold:.0%} in {len(over)} of {len(ok)}: new measurements should time at least "
                     f"3 steps" if over else f"no spread over {threshold:.0%}") if ok else "nothing measured"}


def with_steps(point: Point, warmup: int, steps_timed: int) -> Point:
    return dataclasses.replace(point, config=dataclasses.replace(point.config, steps=warmup + steps_timed,
                                                                 warmup=warmup))


def estimate(point: Point, entry: dict[str, Any], steps_timed: int) -> float:
    """The module docstring's estimate: grid.estimate_s at the new steps x this point's stored ratio."""
    from stanza_core.reproduce.grid import stored_estimate_s
    from stanza_core.runs.plan import stored_plan

    new = stored_plan(with_steps(point, entry["config"]["warmup"], steps_timed).config, entry["plan"]).expected_s()
    return new * max(1.0, entry["measured"]["seconds"] / stored_estimate_s(point, entry))


def from_grid(store: Store, steps_timed: int) -> list[Candidate]:
    """The stored configurations (from_store) that are points of the grid, each with the
    experiments that run it."""
    from stanza_core.reproduce.grid import grid
    from stanza_core.reproduce.spec import REPO_ROOT, load_specs
    from stanza_core.runs.store import configuration_id

    exps = {configuration_id(gp.point.key()): gp.experiments
            for gp in grid(load_specs(REPO_ROOT / "reproductions"), "full")}
    out = [c for c in from_store(store, steps_timed) if configuration_id(c.point.key()) in exps]
    for c in out:
        c.experiments = exps[configuration_id(c.point.key())]
    return out


def from_store(store: Store, steps_timed: int) -> list[Candidate]:
    """Each stored configuration by its newest entry, whatever its version (Store.latest: the spread
    is a property of re-running a stored plan, not of the version that stored it), its Point
    rebuilt from its config and key (the key's floor of D as the rule's floor gives the same key),
    kept only where its name is the file's."""
    out = []
    for e in store.latest():
        k = e["key"]
        cfg = RunConfig(**{**e["config"], "link_mbit": UNSET_LINK_MBIT, "dilation": 1.0})
        pt = Point(cfg, k["target_gbps"], DilationRule(floor=k["dilation_floor"], engine=k["engine"]), k["repeat"])
        if pt.name == e["file"]:
            out.append(Candidate(pt, e, [], estimate(pt, e, steps_timed)))
    return out


def choose(cands: list[Candidate], count: int, budget_s: float) -> list[Candidate]:
    """A varied set, cheapest first within the variety (module docstring): greedy weighted cover,
    each pick the best (new features' weight) / estimate among those that fit the budget left;
    FIRST's features before the others, then the others less 1/2 per pick of the same kind (so
    bandwidths and sizes spread over the kinds); past `count`, only picks that add something."""
    chosen: list[Candidate] = []
    seen: set[tuple[str, Any]] = set()
    left = sorted(cands, key=lambda c: (c.estimate_s, c.label))
    spent = 0.0
    while left:
        first_open = any((g, v) not in seen for c in left for g, v in c.features().items() if g in FIRST)

        def gain(c: Candidate) -> float:  # past FIRST: a kind already chosen n times costs n/2 (balance)
            f = c.features()
            new = sum(WEIGHTS[g] for g, v in f.items() if (g, v) not in seen and (g in FIRST or not first_open))
            return new - (0 if first_open else 0.5 * sum(x.features()["kind"] == f["kind"] for x in chosen))
        fits = [c for c in left if spent + c.estimate_s <= budget_s]
        useful = [c for c in fits if gain(c) > 0]
        if not useful and first_open:  # FIRST's features left are out of budget: go on with the others
            first_open = False
            useful = [c for c in fits if gain(c) > 0]
        pick = (max(useful, key=lambda c: (gain(c) / max(c.estimate_s, 1.0), -c.estimate_s)) if useful
                else fits[0] if fits and len(chosen) < count else None)
        if pick is None:
            break
        chosen.append(pick)
        left.remove(pick)
        spent += pick.estimate_s
        seen |= set(pick.features().items())
    return sorted(chosen, key=lambda c: c.estimate_s)


def by_pattern(cands: list[Candidate], patterns: str) -> list[Candidate]:
    """--configs: comma-separated shell patterns matched on the label or the store's file name."""
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    got = [c for c in cands if any(fnmatch.fnmatchcase(c.label, p) or fnmatch.fnmatchcase(c.point.name, p)
                                   or c.point.name.startswith(p) for p in pats)]
    if not got:
        raise ValueError(f"--configs {patterns!r} matches none of the {len(cands)} stored configurations; labels "
                         f"read like {cands[0].label!r}, file names like {cands[0].point.name!r}" if cands
                         else "no stored configurations")
    return sorted(got, key=lambda c: c.estimate_s)


def stored_plan(c: Candidate, steps_timed: int):
    """The stored plan with more timed steps (plan.stored_plan) and today's D rule."""
    from stanza_core.runs.plan import replayed_plan, stored_plan as planned

    p, warmup = c.entry["plan"], c.entry["config"]["warmup"]
    pt = with_steps(c.point, warmup, steps_timed)
    plan = planned(pt.config, p)
    rule, engine_s = pt.dilation_rule, p.get("engine_s")  # the stored engine seconds: nothing is measured
    today = replayed_plan(pt.config, pt.target_gbps, None,
                          dataclasses.replace(rule, engine=rule.engine and engine_s is not None),
                          engine_s=engine_s if rule.engine else None)
    return plan, {"dilation": today.dilation, "link_mbit": today.link.wire_mbit,
                  "payload_scale": today.link.payload_scale,
                  "same": today.dilation == plan.dilation and today.link.payload_scale == plan.link.payload_scale
                  and abs(today.link.wire_mbit - plan.link.wire_mbit) < 1e-3}


def base_record(c: Candidate, steps_timed: int) -> dict[str, Any]:
    e, p = c.entry, c.entry["plan"]
    run = e["run"]
    return {"label": c.label, "file": c.point.name, "key": c.point.key(), "experiments": c.experiments,
            "dilation": p["dilation"], "target_gbps": p["target_gbps"], "link_mbit": p["link_mbit"],
            "payload_gbps": p["payload_gbps"], "warmup": e["config"]["warmup"], "steps_timed": steps_timed,
            "estimate_s": round(c.estimate_s, 1),
            "stored": {"step_time_median_s": run["step_time_median_s"], "steps_s": run["steps_s"],
                       "warmup": e["config"]["warmup"], "at": e["measured"]["at"], "seconds": e["measured"]["seconds"]}}


def measure(c: Candidate, steps_timed: int, threshold: float) -> dict[str, Any]:
    """Run one candidate (module docstring) and its record; a failure is its error line."""
    from stanza_core.runs.run import run_config

    rec = base_record(c, steps_timed)
    t0 = time.monotonic()
    try:
        plan, today = stored_plan(c, steps_timed)
        rec["today_rule"] = today
        row = run_config(plan.config, timeout_s=plan.timeout_s())
    except Exception as e:  # noqa: BLE001 (one configuration's failure is recorded; the others go on)
        return {**rec, "error": " ".join(f"{type(e).__name__}: {e}".split())[:400],
                "seconds": round(time.monotonic() - t0, 1)}
    w = rec["warmup"]
    timed = row["steps_s"][w:]
    stats = spread_stats(timed, threshold)
    ranks = {r["rank"]: [b - a for a, b in zip(r["step_start_s"][w:], r["step_end_s"][w:])] for r in row["ranks"]}
    stored = rec["stored"]["step_time_median_s"]
    return {**rec, "steps_s": timed, "warmup_steps_s": row["steps_s"][:w], **stats,
            "target_median_s": stats["median_s"] / plan.dilation, "rank_steps_s": ranks,
            "diff_vs_stored": stats["median_s"] / stored - 1, "throughput": row["throughput"],
            "slipped": bool(row["link_check"].get("slipped")), "remeasured": "remeasured" in row,
            "host_load": row["host_load"], "wall_s": row["wall_s"], "seconds": round(time.monotonic() - t0, 1)}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f} %" if x < 0 else f"{100 * x:.2f} %"


def table(records: list[dict[str, Any]]) -> str:
    lines = ["| configuration | D | steps | median s | min s | max s | spread | cv | stored s | new vs stored |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        if r.get("error"):
            lines.append(f"| {r['label']} | {r['dilation']:g} | failed: {r['error'][:80]} |||||||")
            continue
        lines.append(f"| {r['label']} | {r['dilation']:g} | {len(r['steps_s'])} | {r['median_s']:.3f} | "
                     f"{r['min_s']:.3f} | {r['max_s']:.3f} | {_pct(r['spread'])}{' !' if r['over'] else ''} | "
                     f"{_pct(r['cv'])} | {r['stored']['step_time_median_s']:.3f} | "
                     f"{100 * r['diff_vs_stored']:+.2f} % |")
    return "\n".join(lines)


def _min(s: float) -> str:
    return f"{s / 60:.0f} min"


def check_out(out: Path, overwrite: bool) -> None:
    """One-line ValueError for an output the script must not write: inside the store, or there already."""
    if out.resolve().is_relative_to(STORE_DIR.resolve()):
        raise ValueError(f"--out {out} is inside the store of measured configurations ({STORE_DIR}): write elsewhere")
    if out.exists() and not overwrite:
        raise ValueError(f"{out} exists: pass --overwrite to replace it, or --out another path")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the chosen set and its estimate; run nothing")
    ap.add_argument("--configs", default=None, help="comma-separated shell patterns on label or store file name")
    ap.add_argument("--count", type=int, default=8, help="at least this many configurations (budget allowing)")
    ap.add_argument("--budget-min", type=float, default=40.0, help="estimated minutes the default set may take")
    ap.add_argument("--steps-timed", type=int, default=5, help="timed steps per run (after the stored warm-up)")
    ap.add_argument("--threshold", type=float, default=THRESHOLD, help="spread above which a run is flagged")
    ap.add_argument("--out", type=Path, default=OUT, help="the results JSON (never inside the store)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = ap.parse_args(argv)
    try:
        if args.steps_timed < 1 or args.count < 1 or args.budget_min <= 0:
            raise ValueError("--steps-timed and --count must be >= 1 and --budget-min > 0")
        if not args.list:
            check_out(args.out, args.overwrite)
        store = Store()
        cands = from_grid(store, args.steps_timed)
        chosen = (by_pattern(cands, args.configs) if args.configs
                  else choose(cands, args.count, 60 * args.budget_min))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    total = sum(c.estimate_s for c in chosen)
    print(f"{len(chosen)} of {len(cands)} stored configurations, {args.steps_timed} timed steps each, "
          f"estimate {_min(total)}:")
    for c in chosen:
        f = c.features()
        print(f"  {c.label}  D={c.entry['plan']['dilation']:g}, warm-up {c.entry['config']['warmup']}, "
              f"~{_min(c.estimate_s)} [{f['kind']}]")
    if args.list:
        return 0
    from stanza_core.runs.run import netem_unavailable

    if reason := netem_unavailable():
        print(f"error: {reason}", file=sys.stderr)
        return 2
    doc = {"what": "step-to-step spread of replayed runs (benchmarks/grid_spread.py)",
           "measurement_version": MEASUREMENT_VERSION,
           "stored_versions": sorted({c.entry["version"] for c in chosen}), "steps_timed": args.steps_timed, "threshold": args.threshold,
           "estimate_s": round(total, 1), "host": host(), "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
           "complete": False, "configs": []}
    for i, c in enumerate(chosen, start=1):
        print(f"[{i}/{len(chosen)}] {c.label} (~{_min(c.estimate_s)})", flush=True)
        rec = measure(c, args.steps_timed, args.threshold)
        print(f"[{i}/{len(chosen)}] " + (f"failed: {rec['error']}" if rec.get("error") else
              f"steps {[round(s, 3) for s in rec['steps_s']]} s, spread {_pct(rec['spread'])}, "
              f"vs stored {100 * rec['diff_vs_stored']:+.2f} %") + f" ({_min(rec['seconds'])})", flush=True)
        doc["configs"].append(rec)
        doc["summary"] = summary(doc["configs"], args.threshold)
        doc["complete"] = i == len(chosen)
        atomic.write_text(args.out, json.dumps(doc, indent=1) + "\n")
    s = doc["summary"]
    print(table(doc["configs"]))
    print(f"spread over {args.threshold:.0%}: {s['over_threshold']} of {s['measured']} "
          f"(median spread {_pct(s['median_spread'])}, worst {_pct(s['worst_spread'])}: {s['worst_label']}); "
          f"{s['failed']} failed; {s['rule']}; wrote {args.out}")
    return 0 if not s["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
