"""Traffic per training step, measured by the engine's counters: PS vs DDP vs Stanza.

    .venv/bin/python benchmarks/traffic.py [--models alexnet,vgg16] [--nodes 4,8] [--steps 3]

Every configuration is a real torchrun job on this machine (gloo over loopback, unshaped). The
FC head of torchvision's AlexNet/VGG is the same at any input size (adaptive pooling), so the
jobs run at small images with the cut placed after the adaptive pool (`--boundary flatten`):
the boundary is then 9216 (AlexNet) / 25088 (VGG-16) values per sample, as at 224x224, and every
byte counted is the byte a 224x224 run moves. Only compute (and so step time) is smaller.
Step times are medians of the steps after the first; they are loopback figures on a shared
2-core machine, useful as ratios measured side by side, not as cluster predictions.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from stanza_core import atomic
from stanza_core import procgroup
from stanza_core.topology import global_batch_for
from stanza_core.variant import Variant

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE = {"alexnet": 64, "vgg16": 32}


def run(model, nodes, strategy, k, per_worker, steps, workdir):
    metrics = os.path.join(workdir, f"{model}-{strategy}{k}-{nodes}.json")
    variant = Variant.parse(strategy, {"fc_workers": k if strategy == "stanza" else None})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nodes}",
           "-m", "stanza_core.train", "--strategy", strategy, "--model", model, "--num-classes", "1000",
           "--image-size", str(IMAGE[model]), "--global-batch", str(global_batch_for(variant, nodes, per_worker)),
           "--steps", str(steps), "--warmup", "1", "--boundary", "flatten", "--device", "cpu",
           "--metrics", metrics, "--quiet", "--overwrite", "--timeout-s", "600"]
    if strategy == "stanza":
        cmd += ["--fc-workers", str(k)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", CUDA_VISIBLE_DEVICES="")
    proc = procgroup.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)  # Ctrl-C: the ranks end too
    if proc.returncode != 0:
        ours = [l for l in proc.stderr.splitlines() if l.startswith("error: ")]
        raise SystemExit(f"{model} {strategy} k={k} N={nodes} failed: " + (ours[0] if ours else proc.stderr))
    return json.load(open(metrics))


def summarize(m):
    by_role = {}
    for r in m["ranks"]:
        by_role.setdefault(r["role"], []).append(r["bytes_sent"] + r["bytes_recv"])
    return {"bytes_per_step": m["bytes_per_step"],
            "max_node_bytes": max(r["bytes_sent"] + r["bytes_recv"] for r in m["ranks"]),
            "per_role_bytes": {role: max(v) for role, v in by_role.items()},
            "step_time_median_s": m["step_time_median_s"], "ranks": m["ranks"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="alexnet,vgg16")
    ap.add_argument("--nodes", default="4,8")
    ap.add_argument("--per-worker", type=int, default=32, help="samples per data worker per step")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "traffic.json"))
    args = ap.parse_args(argv)
    configs = [("ps", 0), ("ddp", 0), ("stanza", 1), ("stanza", 2)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for n in map(int, args.nodes.split(",")):
                for strategy, k in configs:
                    s = summarize(run(model, n, strategy, k, args.per_worker, args.steps, tmp))
                    rows.append({"model": model, "nodes": n, "strategy": strategy, "fc_workers": k, **s})
                    print(f"{model:8s} N={n} {strategy:6s} k={k}: {s['bytes_per_step'] / 1e6:10.1f} MB/step  "
                          f"busiest node {s['max_node_bytes'] / 1e6:9.1f} MB  step {s['step_time_median_s']:.2f} s",
                          flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    atomic.write_text(args.out, json.dumps({"per_worker": args.per_worker, "rows": rows}, indent=1))
    print()
    print("| model | N | strategy | MB/step (cluster, sent) | busiest node MB (sent+recv) | CONV worker MB | FC worker MB | step s (median) | PS/this bytes | PS/this time |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ps = next(x for x in rows if x["model"] == r["model"] and x["nodes"] == r["nodes"] and x["strategy"] == "ps")
        name = r["strategy"] + (f" k={r['fc_workers']}" if r["strategy"] == "stanza" else "")
        roles = r["per_role_bytes"]
        conv = roles.get("conv_worker", roles.get("worker"))
        fc = roles.get("fc_worker")
        print(f"| {r['model']} | {r['nodes']} | {name} | {r['bytes_per_step'] / 1e6:.1f} | {r['max_node_bytes'] / 1e6:.1f} "
              f"| {conv / 1e6:.1f} | {'-' if fc is None else f'{fc / 1e6:.1f}'} | {r['step_time_median_s']:.2f} "
              f"| {ps['bytes_per_step'] / r['bytes_per_step']:.2f}x | {ps['step_time_median_s'] / r['step_time_median_s']:.2f}x |")


if __name__ == "__main__":
    main()
