"""Side-by-side benchmark of ps, ddp and stanza on the emulated cluster.

    python -m stanza_core.bench --model alexnet --image-size 64 --nodes 4 \\
        --strategies ps,ddp,stanza --fc-workers 1,2 --global-batch 96 --steps 4 --warmup 1 \\
        --target-gbps 10,40,100 --target-device v100 --repeats 2 --out results.json

Each configuration is a real multi-node job (`netem.run_training`: one namespace and one
torchrun agent per node, every link shaped in both directions). Runs interleave — for each
bandwidth and repeat, A B C then A B C — so drift of this shared machine hits all alike.

Bandwidth either as emulated rates (`--link-mbit 100,200`) or as targets (`--target-gbps`):
a target maps to the rate that gives this machine the target's communication-to-compute ratio
(PAPER.md; perf.emulated_bandwidth):

    rate_here = target_gbps * t_step_target / t_step_here

t_step_here is the median compute step (forward, backward, SGD update) of one data worker's
batch, measured with all N node processes computing at once, as they do in the runs (the
same contention); t_step_target is the same step on the target device from the perf device
table (perf.devices: vendor peaks and stated efficiencies).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading

from .config import STRATEGIES
from .launch import cli_args, run_job
from .models import MIN_IMAGE_SIZE, MODEL_NAMES, known_model


class BenchError(ValueError):
    pass


def parse_list(text: str, kind, name: str, positive: bool = True) -> list:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise BenchError(f"--{name} {text!r}: expected a comma-separated list of {kind.__name__}s") from None
    if not values or (positive and any(v <= 0 for v in values)):
        raise BenchError(f"--{name} {text!r}: expected one or more positive values")
    return values


def configurations(strategies: list[str], fc_workers: list[int], nodes: int) -> list[tuple[str, int]]:
    out = []
    for s in strategies:
        if s == "stanza":
            for k in fc_workers:
                if not 1 <= k <= nodes // 2:
                    raise BenchError(f"--fc-workers {k} with {nodes} nodes: expected 1 <= k <= {nodes // 2}")
                out.append(("stanza", k))
        else:
            out.append((s, 0))
    return out


def measure_compute_step(model: str, image_size: int, num_classes: int, batch: int, nodes: int,
                         steps: int = 4) -> float:
    """Median step time of `nodes` concurrent single-process `local` jobs on `batch` samples."""
    results, errors = [None] * nodes, []

    def one(i):
        try:
            results[i] = run_job(1, strategy="local", model=model, image_size=image_size,
                                 num_classes=num_classes, global_batch=batch, steps=steps, warmup=1,
                                 device="cpu", seed=i)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(nodes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return statistics.median(s["time_s"] for r in results for s in r["steps"][1:])


def target_step_s(model: str, image_size: int, num_classes: int, batch: int, device: str) -> float:
    from .perf import DeviceProfile, named_profile

    profile = named_profile(model, image_size, num_classes, batch)
    dev = DeviceProfile.from_table(device, profile)
    return dev.step_compute_s(batch) + dev.update_s_per_param * profile.params


def run_bench(*, model: str, image_size: int, nodes: int, strategies: list[str], fc_workers: list[int],
              global_batch: int, steps: int, warmup: int = 1, num_classes: int = 1000,
              link_mbit: list[float] | None = None, target_gbps: list[float] | None = None,
              target_device: str = "v100", repeats: int = 1, delay_ms: float = 0.0, boundary: str | None = None,
              mtu: int = 9000,
              progress: bool = True, timeout_s: float = 1800) -> dict:
    """Run every configuration at every bandwidth; the results dict (see module docstring)."""
    from .netem import check_host
    from .perf import DEVICE_TABLE

    if not known_model(model):
        raise BenchError(f"unknown model {model!r}; expected one of: {', '.join(MODEL_NAMES)} or package.module:factory")
    if image_size < MIN_IMAGE_SIZE.get(model, 1):
        raise BenchError(f"--image-size {image_size} is too small for {model} (>= {MIN_IMAGE_SIZE[model]})")
    if nodes < 2:
        raise BenchError(f"--nodes must be >= 2, got {nodes}")
    bad = [s for s in strategies if s not in STRATEGIES or s == "local"]
    if bad:
        raise BenchError(f"unknown strategy {bad[0]!r}; expected ps, ddp or stanza")
    if (link_mbit is None) == (target_gbps is None):
        raise BenchError("give the bandwidth either as --link-mbit or as --target-gbps (exactly one)")
    if target_gbps is not None and target_device not in DEVICE_TABLE:
        raise BenchError(f"unknown --target-device {target_device!r}; expected one of {', '.join(DEVICE_TABLE)}")
    configs = configurations(strategies, fc_workers, nodes)
    for s, k in configs:
        workers = nodes - k if s == "stanza" else nodes
        if global_batch % workers:
            raise BenchError(f"--global-batch {global_batch} is not divisible by the {workers} data workers of "
                             f"{s}{f' k={k}' if k else ''} on {nodes} nodes")
    if warmup >= steps:
        raise BenchError(f"--warmup {warmup} leaves no timed step of --steps {steps}")
    check_host()

    calibration = None
    if target_gbps is not None:
        # One data worker's batch; stanza's CONV workers take G/(N-k), a little more: the ratio
        # is set by the data-parallel step, which is what every strategy computes.
        b = global_batch // nodes
        here = measure_compute_step(model, image_size, num_classes, b, nodes)
        there = target_step_s(model, image_size, num_classes, b, target_device)
        points = [(g, g * 1000 * there / here) for g in target_gbps]
        calibration = {"batch_per_worker": b, "t_step_here_s": here, "t_step_target_s": there,
                       "target_device": target_device, "ratio": there / here}
    else:
        points = [(None, m) for m in link_mbit]

    from .netem import run_training

    total = len(points) * repeats * len(configs)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=total, desc="bench", unit="run", file=sys.stderr)
    runs = []
    with tempfile.TemporaryDirectory(prefix="stanza-bench-") as tmp:
        for target, mbit in points:
            for rep in range(repeats):
                for s, k in configs:
                    metrics_path = os.path.join(tmp, f"{s}{k}-{mbit:.0f}-{rep}.json")
                    args = cli_args(strategy=s, model=model, image_size=image_size, num_classes=num_classes,
                                    global_batch=global_batch, steps=steps, warmup=warmup,
                                    fc_workers=k or None, boundary=boundary, device="cpu", quiet=True,
                                    metrics=metrics_path, overwrite=True, timeout_s=600)
                    m = run_training(nodes, mbit, args, delay_ms=delay_ms, mtu=mtu, timeout_s=timeout_s, quiet=True)
                    runs.append({"strategy": s, "fc_workers": k, "target_gbps": target, "link_mbit": mbit,
                                 "repeat": rep, "throughput": m["throughput"],
                                 "step_time_median_s": m["step_time_median_s"],
                                 "bytes_per_step": m["bytes_per_step"], "ranks": m["ranks"],
                                 "kernel": m["netem"]["kernel"], "wall_s": m["netem"]["wall_s"]})
                    if bar:
                        bar.set_postfix_str(f"{s}{f' k={k}' if k else ''} @ {mbit:.0f} Mbit/s")
                        bar.update(1)
    if bar:
        bar.close()
    return {"config": {"model": model, "image_size": image_size, "nodes": nodes, "num_classes": num_classes,
                       "global_batch": global_batch, "steps": steps, "warmup": warmup, "repeats": repeats,
                       "delay_ms": delay_ms, "mtu": mtu, "boundary": boundary, "strategies": strategies,
                       "fc_workers": fc_workers},
            "calibration": calibration, "runs": runs, "summary": summarize(runs)}


def summarize(runs: list[dict]) -> list[dict]:
    """Per (bandwidth, configuration): median throughput over repeats, spread, speedups."""
    rows = []
    for mbit in sorted({r["link_mbit"] for r in runs}):
        here = [r for r in runs if r["link_mbit"] == mbit]
        med = {}
        for key in sorted({(r["strategy"], r["fc_workers"]) for r in here}):
            tp = [r["throughput"] for r in here if (r["strategy"], r["fc_workers"]) == key]
            med[key] = statistics.median(tp)
            first = next(r for r in here if (r["strategy"], r["fc_workers"]) == key)
            rows.append({"strategy": key[0], "fc_workers": key[1], "link_mbit": mbit,
                         "target_gbps": first["target_gbps"], "throughput": med[key],
                         "throughput_min": min(tp), "throughput_max": max(tp), "repeats": len(tp),
                         "bytes_per_step": first["bytes_per_step"]})
        for row in rows[-len(med):]:
            for base in ("ps", "ddp"):
                ref = med.get((base, 0))
                row[f"speedup_vs_{base}"] = row["throughput"] / ref if ref else None
    return rows


def format_table(result: dict) -> str:
    lines = ["| target Gb/s | emulated Mbit/s | strategy | samples/s (median) | spread | vs ps | vs ddp | MB/step |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["summary"]:
        name = r["strategy"] + (f" k={r['fc_workers']}" if r["fc_workers"] else "")
        spread = f"{r['throughput_min']:.1f}-{r['throughput_max']:.1f}"
        vs = [f"{r[f'speedup_vs_{b}']:.2f}x" if r[f"speedup_vs_{b}"] else "-" for b in ("ps", "ddp")]
        lines.append(f"| {r['target_gbps'] if r['target_gbps'] is not None else '-'} | {r['link_mbit']:.0f} | {name} "
                     f"| {r['throughput']:.2f} | {spread} | {vs[0]} | {vs[1]} | {r['bytes_per_step'] / 1e6:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stanza_core.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="alexnet", help="zoo model name or package.module:factory")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--num-classes", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--strategies", default="ps,ddp,stanza")
    ap.add_argument("--fc-workers", default="1", help="comma list of k, or 'auto' (the optimiser's choice)")
    ap.add_argument("--global-batch", type=int, default=96)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--link-mbit", default=None, help="emulated link rates, e.g. 100,200")
    ap.add_argument("--target-gbps", default=None, help="target bandwidths, e.g. 10,40,100")
    ap.add_argument("--target-device", default="v100")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--boundary", default=None)
    ap.add_argument("--mtu", type=int, default=9000,
                    help="link MTU; jumbo frames let one emulated link reach ~1 Gbit/s on 2 cores (1500: ~340)")
    ap.add_argument("--out", default=None, help="results JSON (refuses to overwrite an existing file)")
    args = ap.parse_args(argv)
    try:
        if args.out and os.path.exists(args.out):
            raise BenchError(f"--out {args.out} already exists; choose another path")
        strategies = args.strategies.split(",")
        if args.fc_workers == "auto":
            fc = [auto_fc_workers(args)]
        else:
            fc = parse_list(args.fc_workers, int, "fc-workers")
        result = run_bench(model=args.model, image_size=args.image_size, nodes=args.nodes, strategies=strategies,
                           fc_workers=fc, global_batch=args.global_batch, steps=args.steps, warmup=args.warmup,
                           num_classes=args.num_classes,
                           link_mbit=parse_list(args.link_mbit, float, "link-mbit") if args.link_mbit else None,
                           target_gbps=parse_list(args.target_gbps, float, "target-gbps") if args.target_gbps else None,
                           target_device=args.target_device, repeats=args.repeats, delay_ms=args.delay_ms,
                           boundary=args.boundary, mtu=args.mtu)
    except (BenchError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # netem unavailable, a failed node
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    if result["calibration"]:
        c = result["calibration"]
        print(f"compute step of {c['batch_per_worker']} samples: {c['t_step_here_s'] * 1e3:.1f} ms here, "
              f"{c['t_step_target_s'] * 1e3:.2f} ms on {c['target_device']} (ratio {c['ratio']:.4g})")
    print(format_table(result))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


def auto_fc_workers(args) -> int:
    """k chosen by the performance model for the first target (or, with --link-mbit, the first rate)."""
    from .perf import Cluster, best_assignment, named_profile

    profile = named_profile(args.model, args.image_size, args.num_classes, args.global_batch // args.nodes)
    gbps = float((args.target_gbps or "").split(",")[0] or 0) or float(args.link_mbit.split(",")[0]) / 1000
    a = best_assignment(profile, Cluster(args.nodes, gbps, device=args.target_device), args.global_batch,
                        fc_workers=range(1, args.nodes // 2 + 1))
    return a.best_stanza().fc_workers


if __name__ == "__main__":
    sys.exit(main())
