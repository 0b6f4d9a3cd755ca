"""What the full grid's store holds (benchmarks/results/full), as a table: per stored
configuration its D, the replayed step on the target (measured step / D) against the performance
model's step, the engine share the D rule allowed for, whether its links slipped, the host's
load, the ranks' peak RSS (largest rank, and summed over the ranks), and whether the bytes per
step the engine counted equal perf.expected_bytes for the configuration. Reads the committed JSON
files only; measures nothing.

    python benchmarks/full_grid_table.py                 # markdown table, then the summary lines
    python benchmarks/full_grid_table.py --json out.json

Each configuration is shown by its newest entry (runs.store.Store.latest): the current measurement
version's where it is stored, else an older version's, with its version and timed steps in the
table and the summary split by version.

The model error here is replay against model on the same compute (replay waits the model's own
per-layer times), so it checks the network and schedule model, not compute (docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stanza_core import atomic  # noqa: E402
from stanza_core.runs.replay_bench import expected_bytes_per_step  # noqa: E402
from stanza_core.runs.runconfig import RunConfig  # noqa: E402
from stanza_core.runs.store import MEASUREMENT_VERSION, Store  # noqa: E402


def rows(folder: Path) -> list[dict]:
    """One row per configuration of the store at `folder`, from its newest entry."""
    out = []
    for e in Store(folder).latest():
        run, plan = e["run"], e["plan"]
        d = run["dilation"]
        replayed = run["step_time_median_s"] / d  # the step on the target: measured here / D
        model = plan["target_step_s"]
        engine = plan.get("engine_s")
        check = run.get("link_check") or {}
        rss = [r["peak_rss_mib"] for r in run.get("ranks") or [] if r.get("peak_rss_mib") is not None]
        expected = expected_bytes_per_step(RunConfig(**e["config"]))
        out.append({"file": e["file"], "label": e["label"], "version": e["version"],
                    "timed_steps": len(run["steps_s"]) - e["key"]["warmup"], "dilation": d, "replayed_ms": 1e3 * replayed,
                    "model_ms": 1e3 * model, "error": replayed / model - 1,
                    "engine_share": engine / (d * model) if engine is not None else None,
                    "slipped": check.get("slipped"), "worst_mbit": check.get("worst_mbit"),
                    "set_mbit": check.get("set_mbit"), "cpu_busy": (run.get("host_load") or {}).get("cpu_busy"),
                    "rss_max_mib": max(rss) if rss else None, "rss_sum_gib": sum(rss) / 1024 if rss else None,
                    "bytes_per_step": run["bytes_per_step"], "expected_bytes_per_step": expected,
                    "seconds": e["measured"]["seconds"], "at": e["measured"]["at"]})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, default=ROOT / "benchmarks" / "results" / "full")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    if not args.store.is_dir():
        print(f"error: --store {args.store} is not a folder", file=sys.stderr)
        return 2
    rs = rows(args.store)
    if not rs:
        print(f"no stored configurations in {args.store}")
        return 0
    print("| configuration | version | timed steps | D | replayed ms | model ms | error | engine share | links | busy CPU "
          "| peak RSS, largest rank (MiB) | peak RSS, summed (GiB) | GB per step | bytes = model | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rs:
        share = f"{100 * r['engine_share']:.1f} %" if r["engine_share"] is not None else "-"
        links = {True: "slipped", False: "held", None: "not judged"}[r["slipped"]]
        busy = f"{100 * r['cpu_busy']:.0f} %" if r["cpu_busy"] is not None else "-"
        rss_max = f"{r['rss_max_mib']:.0f}" if r["rss_max_mib"] is not None else "-"
        rss_sum = f"{r['rss_sum_gib']:.1f}" if r["rss_sum_gib"] is not None else "-"
        print(f"| {r['label']} | {r['version']} | {r['timed_steps']} | {r['dilation']:g} | {r['replayed_ms']:.1f} | {r['model_ms']:.1f} | "
              f"{100 * r['error']:+.1f} % | {share} | {links} | {busy} | {rss_max} | {rss_sum} | "
              f"{r['bytes_per_step'] / 1e9:.2f} | {'yes' if r['bytes_per_step'] == r['expected_bytes_per_step'] else 'NO'} | "
              f"{r['seconds']:.0f} |")
    errs = [r["error"] for r in rs]
    low = [r["error"] for r in rs if r["engine_share"] is not None and r["engine_share"] <= 0.01]
    versions = sorted({r["version"] for r in rs}, reverse=True)
    print(f"\n{len(rs)} stored configurations ("
          + ", ".join(f"{sum(r['version'] == v for r in rs)} at measurement version {v}"
                      + (" (the current one)" if v == MEASUREMENT_VERSION else " (older: to measure again)")
                      for v in versions)
          + f"); replayed against the model: median abs. error {100 * statistics.median(abs(x) for x in errs):.1f} %, "
          f"bias (mean signed) {100 * statistics.fmean(errs):+.1f} %, worst {100 * max(errs, key=abs):+.1f} %")
    for v in versions if len(versions) > 1 else ():
        ev = [r["error"] for r in rs if r["version"] == v]
        print(f"  version {v}: {len(ev)} configurations, median abs. error "
              f"{100 * statistics.median(abs(x) for x in ev):.1f} %, bias {100 * statistics.fmean(ev):+.1f} %, "
              f"worst {100 * max(ev, key=abs):+.1f} %")
    if low:
        print(f"  runs with an engine share <= 1 %: {len(low)}, median abs. error "
              f"{100 * statistics.median(abs(x) for x in low):.1f} %, bias {100 * statistics.fmean(low):+.1f} %")
    slipped = [r["label"] for r in rs if r["slipped"]]
    print(f"  links slipped in {len(slipped)} of {len(rs)}" + (f": {', '.join(slipped)}" if slipped else ""))
    off = [r["label"] for r in rs if r["bytes_per_step"] != r["expected_bytes_per_step"]]
    print(f"  bytes per step differ from perf.expected_bytes in {len(off)} of {len(rs)}"
          + (f": {', '.join(off)}" if off else ""))
    print(f"  measuring time {sum(r['seconds'] for r in rs) / 60:.0f} min in all")
    if args.json:
        atomic.write_text(args.json, json.dumps(rs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
