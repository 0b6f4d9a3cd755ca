"""The paper's regime, replayed: AlexNet / VGG-16 at 224x224, 1000 classes, 32 samples per data
worker, V100 compute (perf device table) replayed, every byte crossing emulated links for real.

    python benchmarks/paper_regime_replay.py --models alexnet,vgg16 --nodes 4 --target-gbps 10 \\
        --configs ps,ps_s1,ps_ov,ddp,stanza1 --out benchmarks/results/paper_regime_replay.json

Configurations: ps (one shard colocated with every worker), ps_s1 (one dedicated server node
beside the N workers), ps_sN (N dedicated server nodes beside the N workers: the stated PS of
experiments/paper_ps.py, 2N ranks), ps_ov / ps_s1_ov / ps_sN_ov (the same with each gradient
bucket pushed as the backward produces it), ddp, stanza1 / stanza2 (k FC workers among the N
nodes). The stated PS's own check (notebook 05, "What the paper must have assumed"):

    python benchmarks/paper_regime_replay.py --models alexnet --nodes 16 --target-gbps 100 \
        --configs ps_sN,stanza1 --batch-per-worker 16 --steps 5 --warmup 2 --engine-s auto \
        --out benchmarks/results/paper_ps_replay.json

Per run, the dilation D from `perf.replay_dilation` (`runs.plan.replayed_plan`): the emulator must hold every link at
target / D with all the cluster's links busy at once, and the engine's own CPU seconds per step
(which replay keeps: gloo's copies and reductions, Python) must stay within 5 % of the dilated
step D x the model's step for that configuration (never below --min-dilation). --engine-s auto
measures those seconds per configuration: a replay run at D = 1 on loopback (unshaped), its
median step less the model's step on a 1000 Gb/s network. Links carry
`perf.emulated_bandwidth(target, dilation=D)` of TCP payload (runs.plan's link rule).
Every plan runs through `runs.replay_bench.run_plans`. Reported per run: the measured step
time / D (target time), the performance model's prediction for the same cluster (perf.predict,
same V100 table profile, the payload rate the links carry x D), the error, and the bytes counted
beside perf.expected_bytes. Results are written after every run;
--resume keeps the runs of an earlier --out and runs only what is missing. Needs root.

    python benchmarks/paper_regime_replay.py --table benchmarks/results/paper_regime_replay.json

prints the table and the error summary of a results file again (no runs): the median |error| and
the bias (mean signed error), and the same with the engine seconds held apart
(experiments.validation.engine_apart: the runs whose engine share is at most 1 %, and every run
with its engine seconds subtracted). Replay and model share compute by construction (the same
V100 table profile), so these errors validate the network and schedule model, not compute.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from stanza_core import atomic
from stanza_core.runs import plan as planner
from stanza_core.runs.plan import replayed_plan
from stanza_core.experiments.validation import engine_apart
from stanza_core.runs.dilation_rule import DilationRule
from stanza_core.runs.replay_bench import run_plans
from stanza_core.runs.runconfig import RunConfig
from stanza_core.variant import Variant, bench_variants
from stanza_core.netem import MAX_AGGREGATE_MBIT
from stanza_core.topology import global_batch_for

CONFIGS = bench_variants()  # name -> Variant: every named configuration of the benchmarks
PAPER = "1.34x-13.9x over PS at 10 Gb/s; 1.55x AlexNet, 1.72x VGG-16 at 100 Gb/s (PAPER.md)"


PER_N = {"ps_sN": False, "ps_sN_ov": True}  # S = N dedicated servers (overlapped push or not), per cluster size


def variants_at(names: str) -> dict:
    """name -> Variant, or -> a function of N for the per-N names (PER_N); one-line ValueError
    for an unknown name."""
    wanted = [n for n in names.split(",") if n]
    if bad := [n for n in wanted if n not in PER_N and n not in bench_variants()]:
        raise ValueError(f"unknown configuration(s) {', '.join(bad)}; expected some of "
                         f"{', '.join([*bench_variants(), *PER_N])}")
    return {n: (lambda N, o=PER_N[n]: Variant(strategy="ps", ps_servers=N, ps_overlap=o)) if n in PER_N
            else bench_variants([n])[n] for n in wanted}


def row_key(r: dict) -> tuple:
    return (r["model"], r["nodes"], r["target_gbps"], r["config"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="alexnet,vgg16")
    ap.add_argument("--nodes", default="4")
    ap.add_argument("--target-gbps", default="10")
    ap.add_argument("--configs", default="ps,ddp,stanza1")
    ap.add_argument("--device", default="v100")
    ap.add_argument("--batch-per-worker", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--mtu", type=int, default=9000)
    ap.add_argument("--engine-s", default="0", help="engine CPU seconds per step kept by replay, or 'auto' "
                    "(measured per configuration on loopback at D = 1)")
    ap.add_argument("--min-dilation", type=int, default=1, help="never run below this D")
    ap.add_argument("--resume", action="store_true", help="keep the runs already in --out, run the rest")
    ap.add_argument("--out")
    ap.add_argument("--table", metavar="JSON", help="print the table of a results file and exit (no runs)")
    a = ap.parse_args(argv)
    if a.table:
        with open(a.table) as fh:
            print(format_table(json.load(fh)["runs"]))
        return 0
    if not a.out:
        ap.error("--out is required (or --table)")
    try:
        variants = variants_at(a.configs)
        planner.check_engine_s_arg(a.engine_s)
    except ValueError as e:
        ap.error(str(e))

    results, engines = [], {}
    if a.resume and os.path.exists(a.out):
        with open(a.out) as fh:
            old = json.load(fh)
        results, engines = old["runs"], old.get("engine_s", {})
    kept = {row_key(r): r for r in results}
    plans = []
    for model in a.models.split(","):
        for n in [int(v) for v in a.nodes.split(",")]:
            for gbps in [float(v) for v in a.target_gbps.split(",")]:
                for name, v in variants.items():
                    if (model, n, gbps, name) in kept:
                        continue
                    v = v(n) if callable(v) else v
                    cfg = RunConfig.of(v, model=model, image_size=224, num_classes=1000, nodes=n,
                                       global_batch=global_batch_for(v, n, a.batch_per_worker),
                                       steps=a.steps, warmup=a.warmup, link_mbit=planner.UNSET_LINK_MBIT, mtu=a.mtu,
                                       compute="replay", replay_device=a.device)
                    e = planner.engine_seconds_arg(a.engine_s, engines, f"{model} N={n} {name}", cfg)
                    rule = DilationRule(floor=a.min_dilation)  # engine seconds given (e): nothing measured here
                    plans.append((name, replayed_plan(cfg, gbps, None, rule, engine_s=e)))

    def write(rows: list[dict]) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        atomic.write_text(a.out, json.dumps({"args": vars(a), "paper": PAPER, "engine_s": engines,
                                             "max_aggregate_mbit": MAX_AGGREGATE_MBIT, "runs": results + rows},
                                            indent=1))

    rows = run_plans(plans, write=write, name_key="config")
    print(format_table(results + rows))
    return 0


def format_table(results: list[dict]) -> str:
    """One row per run; stanza's speedup over each other configuration (samples/s on the target
    cluster: the configurations' global batches differ), replayed and modelled; then the error
    summary of the model against these runs."""
    lines = ["| model | N | target Gb/s | D | configuration | replayed step (ms, / D) | model (ms) | error "
             "| replayed samples/s | best stanza's speedup, replayed | model | bytes = model |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        same = [x for x in results if (x["model"], x["nodes"], x["target_gbps"]) == (r["model"], r["nodes"], r["target_gbps"])]
        st = [x for x in same if x["strategy"] == "stanza"]
        sp = mp = "-"
        if r["strategy"] != "stanza" and st:
            best = max(st, key=lambda x: x["target_samples_per_s"])
            sp = f"{best['target_samples_per_s'] / r['target_samples_per_s']:.2f}x"
            mp = f"{best['predicted_samples_per_s'] / r['predicted_samples_per_s']:.2f}x"
        lines.append(f"| {r['model']} | {r['nodes']} | {r['target_gbps']:g} | {r['dilation']} | {r['label']} "
                     f"| {r['target_step_s'] * 1e3:.1f} | {r['predicted_step_s'] * 1e3:.1f} | {100 * r['error']:+.1f} % "
                     f"| {r['target_samples_per_s']:.0f} | {sp} | {mp} "
                     f"| {'yes' if r['bytes_per_step'] == r['expected_bytes_per_step'] else 'NO'} |")
    if results:
        errs = sorted(abs(r["error"]) for r in results)
        lines.append("")
        lines.append(f"{len(errs)} runs: median |error| {100 * statistics.median(errs):.1f} %, worst "
                     f"{100 * errs[-1]:.1f} %, bias {100 * statistics.fmean(r['error'] for r in results):+.1f} % "
                     f"({sum(r['error'] > 0 for r in results)} of {len(results)} positive); bytes equal to the model in "
                     f"{sum(r['bytes_per_step'] == r['expected_bytes_per_step'] for r in results)} of {len(results)}")
        # on the dilated scale: the measured step, the engine seconds and the model's step x D
        ea = engine_apart([{"measured_step_s": r["measured_step_s"], "engine_s": r.get("engine_s"),
                            "plain_step_s": r["predicted_step_s"] * r["dilation"]} for r in results])
        if ea["configurations"]:
            lines.append(f"engine share (engine seconds / measured step): median "
                         f"{100 * ea['engine_share_median']:.1f} %, largest {100 * ea['engine_share_max']:.1f} %")
            for key, name in (("low_share", f"runs with engine share <= {100 * ea['share_low']:g} %"),
                              ("subtracted", "engine seconds subtracted per run")):
                e = ea[key]
                lines.append(f"{name}: {e['configurations']} runs" + (
                    f", median |error| {100 * e['median_abs_error']:.1f} %, worst {100 * e['worst_abs_error']:.1f} %, "
                    f"bias {100 * e['bias']:+.1f} % ({e['positive']} positive)" if e["configurations"] else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
