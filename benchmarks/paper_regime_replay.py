"""The paper's regime, replayed: AlexNet / VGG-16 at 224x224, 1000 classes, 32 samples per data
worker, V100 compute (perf device table) replayed, every byte crossing emulated links for real.

    python benchmarks/paper_regime_replay.py --models alexnet,vgg16 --nodes 4 --target-gbps 10 \\
        --configs ps,ddp,stanza1 --out benchmarks/results/paper_regime_replay.json

Per (model, N, target): one dilation D for all its configurations, from `perf.replay_dilation`
(the emulator must hold every link at target / D, all N busy at once; optionally the engine's
own CPU seconds per step, --engine-s, within 5 % of the shortest dilated step); links shaped to
`perf.emulated_bandwidth(target, dilation=D)` of TCP payload (wire rate = that / payload per
wire byte). Reported per run: the measured step time / D (target time), the performance
model's prediction for the same cluster (perf.predict, same V100 table profile, bandwidth =
the emulated payload rate x D), the error, and the bytes counted beside perf.expected_bytes.
Results are written after every run, so an interrupted sweep keeps what it measured. Needs root.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from stanza_core.launch import cli_args
from stanza_core.perf import (Cluster, DeviceProfile, emulated_bandwidth, expected_bytes, named_profile, predict,
                              replay_dilation)

CONFIGS = {"ps": ("ps", 0), "ddp": ("ddp", 0), "stanza1": ("stanza", 1), "stanza2": ("stanza", 2)}
PAPER = "1.34x-13.9x over PS at 10 Gb/s; 1.55x AlexNet, 1.72x VGG-16 at 100 Gb/s (PAPER.md)"


def payload_per_wire_byte(mtu: int) -> float:
    try:
        from stanza_core.netem import payload_per_wire_byte as f
    except ImportError:
        from stanza_core.experiments.timing import payload_per_wire_byte as f
    return f(mtu)


def max_link_mbit(mtu: int) -> float:
    try:
        from stanza_core.netem import max_link_mbit as f
        return f(mtu)
    except ImportError:
        from stanza_core.experiments.measured import EMULATOR_MAX_MBIT
        return EMULATOR_MAX_MBIT.get(mtu, EMULATOR_MAX_MBIT[1500])


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
    ap.add_argument("--engine-s", type=float, default=0.0, help="engine CPU seconds per step kept by replay")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    from stanza_core.netem import MAX_AGGREGATE_MBIT, run_training

    ppwb, results = payload_per_wire_byte(a.mtu), []
    for model in a.models.split(","):
        profile = named_profile(model, 224, 1000, a.batch_per_worker)
        dev = DeviceProfile.from_table(a.device, profile)
        for n in [int(v) for v in a.nodes.split(",")]:
            for gbps in [float(v) for v in a.target_gbps.split(",")]:
                cfgs = [CONFIGS[c] for c in a.configs.split(",")]
                preds = {c: predict(profile, Cluster(n, gbps, device=dev), s, k or None,
                                    batch_per_worker=a.batch_per_worker) for c, (s, k) in zip(a.configs.split(","), cfgs)}
                shortest = min(p.iteration_s for p in preds.values())
                d = replay_dilation(gbps, n, max_link_mbit=max_link_mbit(a.mtu), max_aggregate_mbit=MAX_AGGREGATE_MBIT,
                                    engine_s=a.engine_s, target_step_s=shortest)
                payload_gbps = emulated_bandwidth(gbps, dilation=d)
                link_mbit = 1000 * payload_gbps / ppwb
                for (s, k) in cfgs:
                    g = a.batch_per_worker * (n - k if s == "stanza" else n)
                    # the model at the rate the links really carry (payload), scaled back by D
                    pred = predict(profile, Cluster(n, payload_gbps * d, device=dev), s, k or None, g)
                    with tempfile.TemporaryDirectory(prefix="paper-replay-") as tmp:
                        path = os.path.join(tmp, "m.json")
                        args = cli_args(strategy=s, model=model, image_size=224, num_classes=1000, global_batch=g,
                                        steps=a.steps, warmup=a.warmup, fc_workers=k or None, device="cpu",
                                        quiet=True, metrics=path, overwrite=True, timeout_s=1800,
                                        compute="replay", replay_device=a.device, dilation=d)
                        t0 = time.time()
                        m = run_training(n, link_mbit, args, mtu=a.mtu, timeout_s=3600, quiet=True)
                    want = sum(sum(r["sent"].values()) for r in expected_bytes(profile, s, n, k or None, g))
                    target = m["target_step_time_median_s"]
                    row = {"model": model, "nodes": n, "target_gbps": gbps, "strategy": s, "fc_workers": k,
                           "global_batch": g, "dilation": d, "link_mbit": link_mbit, "device": dev.name,
                           "measured_step_s": m["step_time_median_s"], "target_step_s": target,
                           "target_steps_s": [x["target_time_s"] for x in m["steps"]],
                           "predicted_step_s": pred.iteration_s, "error": target / pred.iteration_s - 1,
                           "bytes_per_step": m["bytes_per_step"], "expected_bytes_per_step": want,
                           "peak_rss_mib": [r.get("peak_rss_mib") for r in m["ranks"]], "wall_s": time.time() - t0}
                    results.append(row)
                    print(f"{model} N={n} {gbps:g} Gb/s {s}{f' k={k}' if k else ''}: D={d}, target step "
                          f"{target * 1e3:.1f} ms (model {pred.iteration_s * 1e3:.1f} ms, {100 * row['error']:+.1f} %), "
                          f"bytes {'=' if row['bytes_per_step'] == want else '!='} model", file=sys.stderr, flush=True)
                    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
                    with open(a.out, "w") as fh:
                        json.dump({"args": vars(a), "paper": PAPER, "runs": results}, fh, indent=1)
    print(format_table(results))
    return 0


def format_table(results: list[dict]) -> str:
    lines = ["| model | N | target Gb/s | D | strategy | replayed step (ms, / D) | model (ms) | error "
             "| measured speedup of stanza | model speedup | bytes = model |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        same = [x for x in results if (x["model"], x["nodes"], x["target_gbps"]) == (r["model"], r["nodes"], r["target_gbps"])]
        st = [x for x in same if x["strategy"] == "stanza"]
        sp = mp = "-"
        if r["strategy"] != "stanza" and st:
            best = min(st, key=lambda x: x["target_step_s"])
            sp = f"{r['target_step_s'] / best['target_step_s']:.2f}x"
            mp = f"{r['predicted_step_s'] / best['predicted_step_s']:.2f}x"
        name = r["strategy"] + (f" k={r['fc_workers']}" if r["fc_workers"] else "")
        lines.append(f"| {r['model']} | {r['nodes']} | {r['target_gbps']:g} | {r['dilation']} | {name} "
                     f"| {r['target_step_s'] * 1e3:.1f} | {r['predicted_step_s'] * 1e3:.1f} | {100 * r['error']:+.1f} % "
                     f"| {sp} | {mp} | {'yes' if r['bytes_per_step'] == r['expected_bytes_per_step'] else 'NO'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
