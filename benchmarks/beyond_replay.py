"""Beyond the paper, replayed in the paper's regime: the optimiser's best stanza option (hybrid
FC worker share x micro-batches M, exact training: fp32, no compression) against the paper's
Stanza (k=1, share 0, M=1) and DDP. AlexNet / VGG-16 at 224x224, 1000 classes, 32 samples per
data worker of the paper's Stanza (the hybrid option keeps that global batch), V100 compute
replayed, every byte crossing emulated links for real (benchmarks/paper_regime_replay.py's method).

    python benchmarks/beyond_replay.py --models vgg16 --nodes 4 --target-gbps 10 \\
        --out benchmarks/results/beyond_replay.json

Per (model, N, target) cell: one dilation D for all its runs, so they run side by side at the
same D (runs.plan.cell_plans: each run's target step from the planner, and
perf.replay_dilation, the largest D any run of the cell needs; with --engine-s, each run's engine
seconds (runs.plan.engine_seconds_arg) within 5 % of its dilated step, as in
benchmarks/paper_regime_replay.py), links carrying perf.emulated_bandwidth(target, dilation=D)
of TCP payload (runs.plan's link rule). Every plan runs through
`runs.replay_bench.run_plans`. Reported per run: the
replayed step time / D, the performance model's prediction for the same cluster, and bytes
counted vs the model. Results are written after every run. Needs root (--modelled: no runs).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from stanza_core import atomic
from stanza_core.runs import plan as planner
from stanza_core.runs.replay_bench import run_plans
from stanza_core.runs.runconfig import RunConfig
from stanza_core.variant import Variant
from stanza_core.perf import Cluster, DeviceProfile, best_assignment, named_profile, predict
from stanza_core.perf.optimize import MICRO_BATCHES
from stanza_core.topology import global_batch_for

def candidates(profile, n, gbps, dev, b) -> dict[str, dict]:
    """name -> predict() keywords (its variant and global batch): ddp, the paper's stanza (k=1),
    the optimiser's best stanza over k x share x M, and the best with micro-batches only (share 0)."""
    cl = Cluster(n, gbps, device=dev)
    a = best_assignment(profile, cl, batch_per_worker=b, shares="auto", micro_batches=MICRO_BATCHES)
    stanza = [p for p in a.ranking if p.strategy == "stanza"]
    best = stanza[0]
    m_only = next(p for p in stanza if not p.fc_batch)
    ddp, paper = Variant("ddp"), Variant("stanza", fc_workers=1)
    out = {"ddp": {"variant": ddp, "global_batch": global_batch_for(ddp, n, b)},
           "paper stanza": {"variant": paper, "global_batch": global_batch_for(paper, n, b)}}
    for name, p in (("best option", best), ("best M only", m_only)):
        out[name] = {"variant": p.variant, "global_batch": p.global_batch}
    return out


def cells(a):
    """(model, its profile, the device-table profile, N, target Gb/s, candidates) for every model
    x N x target the arguments name."""
    for model in a.models.split(","):
        profile = named_profile(model, 224, 1000, a.batch_per_worker)
        dev = DeviceProfile.from_table(a.device, profile)
        for n in [int(v) for v in a.nodes.split(",")]:
            for gbps in [float(v) for v in a.target_gbps.split(",")]:
                yield model, profile, dev, n, gbps, candidates(profile, n, gbps, dev, a.batch_per_worker)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="vgg16")
    ap.add_argument("--nodes", default="4")
    ap.add_argument("--target-gbps", default="10")
    ap.add_argument("--runs", default="ddp,paper stanza,best option,best M only")
    ap.add_argument("--device", default="v100")
    ap.add_argument("--batch-per-worker", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--mtu", type=int, default=9000)
    ap.add_argument("--engine-s", default="0", help="engine CPU seconds per step kept by replay, or 'auto' "
                    "(measured per run on loopback at D = 1); the cell's D is the largest its runs need")
    ap.add_argument("--out", required=True)
    ap.add_argument("--modelled", action="store_true", help="no runs: the model's figures only (no root needed)")
    a = ap.parse_args(argv)
    try:
        planner.check_engine_s_arg(a.engine_s)
    except ValueError as e:
        ap.error(str(e))
    if a.modelled:
        print(modelled_table(a))
        return 0
    engines, wanted, plans = {}, a.runs.split(","), []
    for model, profile, dev, n, gbps, runs in cells(a):
        cfgs = {name: run_config_of(a, model, n, runs[name]) for name in wanted}  # every run's configuration checked first
        engine_s = {name: planner.engine_seconds_arg(a.engine_s, engines, f"{model} N={n} {cfgs[name].label}",
                                                      cfgs[name]) for name in wanted}
        plans += list(planner.cell_plans(cfgs, gbps, engine_s).items())  # one D for the cell: its runs side by side

    def write(rows: list[dict]) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        atomic.write_text(a.out, json.dumps({"args": vars(a), "engine_s": engines, "runs": rows}, indent=1))

    print(format_table(run_plans(plans, write=write, name_key="run")))
    return 0


def run_config_of(a, model: str, n: int, kw: dict) -> RunConfig:
    """The RunConfig of one candidate (predict() keywords `kw`) of a cell; its plan sets D and the links."""
    return RunConfig.of(kw["variant"], model=model, image_size=224, num_classes=1000, nodes=n, global_batch=kw["global_batch"],
                        steps=a.steps, warmup=a.warmup, link_mbit=planner.UNSET_LINK_MBIT, mtu=a.mtu, compute="replay",
                        replay_device=a.device)


def modelled_table(a) -> str:
    """Markdown of the model's figures for every (model, N, target): the four runs side by side."""
    lines = ["| model | N | Gb/s | DDP | paper's stanza | best option (configuration) | best vs paper stanza "
             "| best vs DDP | best M only (configuration) | M only vs paper stanza |", "|---|---|---|---|---|---|---|---|---|---|"]
    for model, profile, dev, n, gbps, runs in cells(a):
        p = {k: predict(profile, Cluster(n, gbps, device=dev), **kw) for k, kw in runs.items()}
        ddp, ps, best, mo = p["ddp"].throughput, p["paper stanza"], p["best option"], p["best M only"]
        lines.append(f"| {model} | {n} | {gbps:g} | {ddp:.0f} | {ps.throughput:.0f} | {best.throughput:.0f} "
                     f"({best.label}) | {best.throughput / ps.throughput:.2f}x | {best.throughput / ddp:.2f}x "
                     f"| {mo.throughput:.0f} ({mo.label}) | {mo.throughput / ps.throughput:.2f}x |")
    return "\n".join(lines)


def format_table(results: list[dict]) -> str:
    """Markdown: replayed and modelled throughput, and speedups over the paper's stanza and ddp."""
    lines = ["| model | N | Gb/s | D | run | configuration | replayed samples/s | model samples/s "
             "| replayed vs paper stanza | model vs paper stanza | replayed vs ddp | bytes = model |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        same = {x["run"]: x for x in results if (x["model"], x["nodes"], x["target_gbps"]) ==
                (r["model"], r["nodes"], r["target_gbps"])}
        ps, ddp = same.get("paper stanza"), same.get("ddp")
        vs_ps = f"{r['target_samples_per_s'] / ps['target_samples_per_s']:.2f}x" if ps else "-"
        m_ps = f"{r['predicted_samples_per_s'] / ps['predicted_samples_per_s']:.2f}x" if ps else "-"
        vs_ddp = f"{r['target_samples_per_s'] / ddp['target_samples_per_s']:.2f}x" if ddp else "-"
        lines.append(f"| {r['model']} | {r['nodes']} | {r['target_gbps']:g} | {r['dilation']} | {r['run']} | {r['label']} "
                     f"| {r['target_samples_per_s']:.0f} | {r['predicted_samples_per_s']:.0f} | {vs_ps} | {m_ps} | {vs_ddp} "
                     f"| {'yes' if r['bytes_per_step'] == r['expected_bytes_per_step'] else 'NO'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
