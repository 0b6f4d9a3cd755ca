"""Replay fidelity: does replayed compute reproduce a real-compute run's step time?

    python benchmarks/replay_fidelity.py --model cifar_alexnet --image-size 32 --nodes 4 \\
        --global-batch 48 --link-mbit 200 --steps 6 --repeats 2 --out benchmarks/results/replay_fidelity.json

For ps, ddp, stanza k=1 and stanza k=2, each configuration runs twice on the same emulated
cluster (netem: the same shaped links): once with real compute, once with `--compute replay`
driven by a DeviceProfile of THIS machine measured right before, under the contention of that
configuration (experiments' timing rounds: as many one-thread processes computing at once as
the configuration has, e.g. N for ddp, N - k CONV workers for stanza), scaled so that the
rounds' whole step equals the engine's own step of N concurrent `local` jobs (`engine_scale`;
--no-calibrate leaves the rounds as they are), at dilation 1. Runs
interleave (real, replay, real, replay, ... per configuration and repeat) so drift of this shared
machine hits both alike; the table compares medians over repeats of each run's median step time.
Needs root (network namespaces).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time

from stanza_core.launch import cli_args, run_job
from stanza_core.models import get_model

from stanza_core.experiments import compute_rounds as timing

CONFIGS = [("ps", 0), ("ddp", 0), ("stanza", 1), ("stanza", 2)]


def label(s: str, k: int) -> str:
    return f"{s} k={k}" if k else s


def profile_here(pool, strategy: str, k: int, nodes: int, g: int, params: int, scale: float):
    """DeviceProfile of this machine for one configuration, from rounds taken now (each piece at
    the level of processes computing at once in that configuration), times `scale` (below); the
    step overhead is what a whole timed step took beyond its pieces (loss, masks, zero_grad)."""
    need = sorted(set(timing.config_rounds(strategy, nodes, k, g).values()), key=lambda r: (-r[0], r[1]))
    rounds = pool.time(need)
    lead = timing.config_rounds(strategy, nodes, k, g)["step"]
    r = next(x for x in rounds if (x["level"], x["batch"]) == lead)
    overhead = max(0.0, r["step"] - sum(r[p] for p in (*timing.PARTS, "update")))
    dev = timing.device_for(strategy, nodes, k, g, rounds, params, overhead)
    scaled = {f: getattr(dev, f) * scale for f in ("conv_fwd_s", "conv_bwd_s", "fc_fwd_s", "fc_bwd_s",
                                                  "step_overhead_s", "update_s_per_param")}
    return dataclasses.replace(dev, name=f"{dev.name}, x{scale:.3f} (engine/rounds)", **scaled), rounds


def engine_scale(pool, a) -> tuple[float, float, float]:
    """The engine's own compute step (N concurrent single-process `local` jobs on G/N samples,
    bench.measure_compute_step) over the timing rounds' step at the same level and batch. The
    rounds' worker and the engine run the same layers, yet on this shared 2-core machine the
    rounds read up to ~2x slower than the engine computes in its runs; this ratio carries the
    engine's own speed into the rounds' per-piece split."""
    b = a.global_batch // a.nodes
    rounds = pool.time([(a.nodes, b)])[0]["step"]
    got, threads = [None] * a.nodes, []
    for i in range(a.nodes):
        def one(i=i):
            got[i] = run_job(1, strategy="local", model=a.model, image_size=a.image_size, num_classes=a.num_classes,
                             global_batch=b, steps=4, warmup=1, device="cpu", seed=i)
        threads.append(threading.Thread(target=one))
        threads[-1].start()
    for t in threads:
        t.join()
    if any(g is None for g in got):
        raise RuntimeError("a local calibration job failed")
    engine = statistics.median(s["time_s"] for m in got for s in m["steps"][1:])
    return engine / rounds, engine, rounds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cifar_alexnet")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--global-batch", type=int, default=48)
    ap.add_argument("--link-mbit", type=float, default=200.0)
    ap.add_argument("--mtu", type=int, default=9000)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--configs", default="ps,ddp,stanza1,stanza2")
    ap.add_argument("--calibrate", action=argparse.BooleanOptionalAction, default=True,
                    help="scale the rounds' times to the engine's own concurrent compute step (see engine_scale)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    from stanza_core.netem import run_training

    wanted = [c for c in CONFIGS if (c[0] + (str(c[1]) if c[1] else "")) in a.configs.split(",")]
    params = sum(p.numel() for p in get_model(a.model, a.num_classes).parameters())
    runs = []
    with tempfile.TemporaryDirectory(prefix="replay-fidelity-") as tmp, \
            timing.TimingPool(a.model, a.image_size, a.num_classes, a.nodes) as pool:
        for rep in range(a.repeats):
            scale, engine, rounds_step = engine_scale(pool, a) if a.calibrate else (1.0, None, None)
            print(f"rep {rep}: engine step {engine}, rounds step {rounds_step}, scale {scale:.3f}",
                  file=sys.stderr, flush=True)
            for s, k in wanted:
                dev, rounds = profile_here(pool, s, k, a.nodes, a.global_batch, params, scale)
                dev_path = os.path.join(tmp, f"dev-{s}{k}-{rep}.json")
                with open(dev_path, "w") as fh:
                    json.dump(dev.to_dict(), fh)
                for compute in ("real", "replay"):
                    metrics = os.path.join(tmp, f"{s}{k}-{compute}-{rep}.json")
                    extra = {"compute": "replay", "replay_device": dev_path, "dilation": 1} if compute == "replay" else {}
                    args = cli_args(strategy=s, model=a.model, image_size=a.image_size, num_classes=a.num_classes,
                                    global_batch=a.global_batch, steps=a.steps, warmup=a.warmup,
                                    fc_workers=k or None, device="cpu", quiet=True, metrics=metrics,
                                    overwrite=True, timeout_s=600, **extra)
                    m = run_training(a.nodes, a.link_mbit, args, mtu=a.mtu, timeout_s=1200, quiet=True)
                    runs.append({"strategy": s, "fc_workers": k, "compute": compute, "repeat": rep,
                                 "step_time_median_s": m["step_time_median_s"],
                                 "step_times_s": [x["time_s"] for x in m["steps"]],
                                 "bytes_per_step": m["bytes_per_step"], "device_profile": dev.to_dict(),
                                 "timing_rounds": rounds, "engine_scale": scale, "engine_step_s": engine,
                                 "rounds_step_s": rounds_step, "finished_at": time.strftime("%H:%M:%S")})
                    print(f"{label(s, k):10s} {compute:6s} rep {rep}: median step "
                          f"{m['step_time_median_s'] * 1e3:.1f} ms", file=sys.stderr, flush=True)
    rows = []
    for s, k in wanted:
        med = {c: statistics.median(r["step_time_median_s"] for r in runs
                                    if (r["strategy"], r["fc_workers"], r["compute"]) == (s, k, c))
               for c in ("real", "replay")}
        byte_sets = {r["bytes_per_step"] for r in runs if (r["strategy"], r["fc_workers"]) == (s, k)}
        rows.append({"config": label(s, k), "real_s": med["real"], "replay_s": med["replay"],
                     "error": med["replay"] / med["real"] - 1, "same_bytes": len(byte_sets) == 1})
    print(f"{a.model} {a.image_size}x{a.image_size}, N={a.nodes}, G={a.global_batch}, links {a.link_mbit:g} Mbit/s "
          f"(MTU {a.mtu}), {a.steps} steps ({a.warmup} warm-up), {a.repeats} repeats, interleaved")
    print("| configuration | real compute, median step (ms) | replayed (profile measured here), median step (ms) "
          "| replay vs real | bytes/step equal |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['real_s'] * 1e3:.1f} | {r['replay_s'] * 1e3:.1f} | {100 * r['error']:+.1f} % "
              f"| {'yes' if r['same_bytes'] else 'NO'} |")
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as fh:
            json.dump({"args": vars(a), "runs": runs, "table": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
