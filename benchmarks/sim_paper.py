"""The paper's four figures, simulated: 16 workers, AlexNet and VGG-16 at 224x224, V100 row, at
10 and 100 Gb/s; stanza at its best k (1 or 2) over the stated PS (S = N = 16 dedicated servers
beside the workers, blocking push, 16 samples per worker: reproductions/bandwidth_sweep.yaml's
paper_ps_*) and over the workbench's sharded PS (one shard colocated on every worker, blocking
push, 32 samples per worker); the traffic per iteration of VGG-16 under each PS over stanza's.

    .venv/bin/python benchmarks/sim_paper.py --out benchmarks/results/sim_paper.json

Every figure here is *simulated*: the engine's generated program (equal to its recording,
tests/dist/test_schedules.py) timed on SimGrid, compute from the V100 row (the device table's
v100), the per-message cost fitted by the validation (benchmarks/results/sim_validation.json).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    from stanza_core.runs.runconfig import UNSET_LINK_MBIT, RunConfig
    from stanza_core.sim.grid import fitted_per_message_s
    from stanza_core.sim.run import SIM_VERSION, available, simulate
    from stanza_core.topology import global_batch_for
    from stanza_core.variant import Variant

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sim_paper.json"))
    ap.add_argument("--nodes", type=int, default=16)
    args = ap.parse_args(argv)
    if reason := available():
        print(f"error: {reason}", file=sys.stderr)
        return 3
    n, alpha = args.nodes, fitted_per_message_s()

    def run(model, variant, b, gbps):
        g = global_batch_for(variant, n, b)
        rc = RunConfig(model=model, image_size=224, num_classes=1000, nodes=n, variant=variant, global_batch=g,
                       steps=3, warmup=1, link_mbit=UNSET_LINK_MBIT, compute="replay", replay_device="v100")
        t = time.monotonic()
        out = simulate(rc, gbps, per_message_s=alpha, steps=3)
        return {"label": f"{model} N={n} {variant.label} @ {gbps:g} Gb/s, {b} per worker", "global_batch": g,
                "step_s": out["step_s"], "throughput": out["throughput"], "bytes_per_step": out["bytes_per_step"],
                "cluster_nodes": out["cluster_nodes"], "wall_s": time.monotonic() - t}

    rows, figs = [], {}
    for model in ("alexnet", "vgg16"):
        for gbps in (10.0, 100.0):
            for ps_name, ps, b in (("stated", Variant("ps", ps_servers=n), 16), ("sharded", Variant("ps"), 32)):
                base = run(model, ps, b, gbps)
                st = [run(model, Variant("stanza", fc_workers=k), b, gbps) for k in (1, 2)]
                best = max(st, key=lambda r: r["throughput"])
                rows += [base, *st]
                figs[f"{model}@{gbps:g}/{ps_name}"] = {
                    "speedup": best["throughput"] / base["throughput"], "best": best["label"], "ps": base["label"],
                    "traffic_ratio": base["bytes_per_step"] / best["bytes_per_step"]}
                print(f"{model} {gbps:g} Gb/s over the {ps_name} PS: {figs[f'{model}@{gbps:g}/{ps_name}']['speedup']:.2f}x "
                      f"({best['label']})", flush=True)
    out = {"figure": "simulated (SimGrid; compute from the V100 row v3)", "sim_version": SIM_VERSION,
           "per_message_s": alpha, "nodes": n, "figures": figs, "runs": rows,
           "command": "python benchmarks/sim_paper.py --out benchmarks/results/sim_paper.json"}
    Path(args.out).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
