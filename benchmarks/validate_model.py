"""The performance model against measured runs: predicted and measured throughput per configuration.

    .venv/bin/python benchmarks/validate_model.py benchmarks/results/bench_alexnet_10g.json [...]
    .venv/bin/python benchmarks/validate_model.py --measure [--nodes 3 --target-gbps 10,100 ...]

Each file is a bench results JSON (`python -m stanza_core.bench --out`, or a notebook's measured
bench). Files without timing rounds get them measured now, on this machine, with the contention
of each configuration (stanza_core.runs.compute_rounds); that is recorded in the output, since
the rounds then do not come from the moment of the runs. `--measure` runs its own small bench on
the emulated cluster first (needs root). Prints one row per configuration, the error summary
(no parameter fitted, and with a per-strategy step overhead fitted at the other link rates) and,
per strategy, the fitted communication scale and missing fixed time; `--json PATH` saves it all.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _pct(v) -> str:
    return "-" if v is None else f"{v:+.1%}"


def report(res: dict) -> str:
    lines = ["| bench | configuration | Mbit/s | measured samples/s | predicted | error | + overhead | comm share |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['bench_name']} | {r['label']} | {r['link_mbit']:.1f} | {r['measured_throughput']:.3f} | "
                     f"{r['predicted_throughput']:.3f} | {_pct(r['error'])} | {_pct(r['calibrated_error'])} | "
                     f"{r['comm_share']:.0%} |")
    for key, name in (("summary", "no parameter fitted"), ("calibrated_summary", "with fitted step overhead")):
        s = res[key]
        if s["configurations"]:
            lines.append(f"{name}: median |error| {s['median_abs_error']:.1%}, worst {s['worst_abs_error']:.1%} "
                         f"({s['worst']}), {s['configurations']} configurations")
    for b in res["benches"]:
        for strategy, fit in b["term_fit"].items():
            if fit:
                lines.append(f"{b['name']} {strategy}: measured = {fit['fixed_s'] * 1e3:.0f} ms + "
                             f"{fit['comm_scale']:.2f} x predicted communication + predicted compute "
                             f"(fitted over {fit['points']} configurations)")
        if b.get("timing_rounds_note"):
            lines.append(f"{b['name']}: timing rounds {b['timing_rounds_note']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="*", help="bench results JSON files")
    ap.add_argument("--measure", action="store_true", help="also measure a bench here (emulated cluster, root)")
    ap.add_argument("--model", default="cifar_alexnet")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--nodes", default="3", help="comma list of cluster sizes")
    ap.add_argument("--strategies", default="ps,ddp,stanza")
    ap.add_argument("--fc-workers", default="1", help="comma list of k (those <= N/2 run)")
    ap.add_argument("--global-batch", type=int, default=12)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--target-gbps", default="10,100")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--latency-us", type=float, default=50.0)
    ap.add_argument("--cache-dir", default=None, help="reuse/keep measured runs here (keyed by every parameter)")
    ap.add_argument("--json", default=None, help="write the rows and summaries here")
    args = ap.parse_args(argv)
    from stanza_core import atomic
    from stanza_core.experiments import validation

    try:
        if not args.results and not args.measure:
            raise ValueError("give bench results files, or --measure")
        p = validation.ValidationParams(model=args.model, image_size=args.image_size, num_classes=args.num_classes,
                            nodes=[int(n) for n in args.nodes.split(",")] if args.measure else [],
                            strategies=args.strategies.split(","),
                            fc_workers=[int(k) for k in args.fc_workers.split(",")],
                            global_batch=args.global_batch, steps=args.steps, warmup=args.warmup,
                            target_gbps=[float(g) for g in args.target_gbps.split(",")], repeats=args.repeats,
                            bench_json=args.results, measure_runs=args.measure)
        benches = validation.run_measured(p, args.cache_dir) + validation.load_benches(p)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    res = validation.validate(benches, latency_s=args.latency_us * 1e-6)
    if res["unavailable"]:
        print(f"measured part skipped: {res['unavailable']}")
    print(report(res))
    if args.json:
        atomic.write_text(args.json, json.dumps({**res, "inputs": args.results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
