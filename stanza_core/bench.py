"""Side-by-side benchmark of ps, ddp and stanza on the emulated cluster.

    python -m stanza_core.bench --model alexnet --image-size 64 --nodes 4 \\
        --strategies ps,ddp,stanza --fc-workers 1,2 --global-batch 96 --steps 4 --warmup 1 \\
        --target-gbps 10,40,100 --target-device v100 --repeats 2 --out results.json

Each configuration is a real multi-node job run by the one measurement primitive
(`runs.run.run_config` -> `netem.run_training`: one namespace and one torchrun agent per
node, every link shaped in both directions); the grid is `runs.run.measure`, the same
path notebooks 03-07 take. Runs interleave — for each
bandwidth and repeat, A B C then A B C — so drift of this shared machine hits all alike.

Parameter-server deployments: `--ps-servers 0,1` runs ps with its shards colocated on the N
workers (0) and with 1 dedicated server; dedicated servers are extra nodes (N workers + S
servers, each server its own namespace and shaped link: `RunConfig.cluster_nodes`), so every
ps variant trains the same G/N samples per worker as colocated ps and ddp. `--ps-overlap
off|on|both` adds the overlapped push (wait-free backprop). Stanza's N nodes include its k FC
workers. `vs ps` is against colocated ps without overlap; the results' summary also gives
`speedup_vs_best_ps`, against the fastest ps variant measured.

Every run records what its links carried over its timed steps and the host's load
(`link_check`, `host_load`: netem.linkstats). A run whose links slipped (a busy link carried
under 95 % of its set rate) is measured once more and the second run kept; a kept run that
slipped again is marked in the results (`link_check.slipped`, the summary's `slipped_runs`) and in
the table.

Bandwidth either as emulated rates (`--link-mbit 100,200`) or as targets (`--target-gbps`):
a target maps to the rate that gives this machine the target's communication-to-compute ratio
(PAPER.md; perf.emulated_bandwidth):

    rate_here = target_gbps * t_step_target / t_step_here

t_step_here is the median compute step (forward, backward, SGD update) of one data worker's
batch, timed with all N node processes computing at once, as they do in the runs (the same
contention: the timing round at level N, `runs.compute_rounds`); t_step_target is the same step on the target device from the perf device
table (perf.devices: vendor peaks and stated efficiencies).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .checks import int_list, positive_floats
from .runs.measurement import Measurement, summarize  # noqa: F401 (re-exported)
from .runs.run import measure, netem_unavailable, target_step_s  # noqa: F401 (re-exported)
from .runs.spec import MeasureSpec
from . import atomic, registry
from .labels import run_label
from .perf import Cluster, best_assignment, device_profile, named_profile


class BenchError(ValueError):
    pass


def run_bench(*, model: str, image_size: int, nodes: int, strategies: list[str], fc_workers: list[int],
              global_batch: int, steps: int, warmup: int = 1, num_classes: int = 1000,
              link_mbit: list[float] | None = None, target_gbps: list[float] | None = None,
              target_device: str = "v100", repeats: int = 1, delay_ms: float = 0.0, boundary: str | None = None,
              mtu: int = 9000, progress: bool = True, ps_servers: list[int] | None = None,
              ps_overlap: list[bool] | None = None) -> Measurement:
    """Run every configuration at every bandwidth (runs.run.measure, uncached); their
    Measurement. Bad input raises ValueError, an unusable emulator RuntimeError, before any run."""
    spec = MeasureSpec(model=model, image_size=image_size, num_classes=num_classes, nodes=nodes,
                       strategies=strategies, fc_workers=fc_workers, global_batch=global_batch, steps=steps,
                       warmup=warmup, target_gbps=target_gbps, link_mbit=link_mbit, target_device=target_device,
                       repeats=repeats, delay_ms=delay_ms, mtu=mtu, boundary=boundary,
                       max_link_mbit=float("inf"),  # the bench runs whatever rate it is asked for
                       ps_servers=ps_servers or [0], ps_overlap=ps_overlap or [False])
    if reason := netem_unavailable():
        raise RuntimeError(reason)
    return measure(spec, None, progress=progress)


def format_table(result: Measurement) -> str:
    bases = registry.baselines()
    lines = ["| target Gb/s | emulated Mbit/s | strategy | samples/s (median) | spread | "
             + " | ".join(f"vs {b}" for b in bases) + " | MB/step |", "|---" * (6 + len(bases)) + "|"]
    for r in result.summary:
        name = run_label(r) + (f" (links slipped in {r['slipped_runs']}/{r['repeats']})" if r.get("slipped_runs") else "")
        spread = f"{r['throughput_min']:.1f}-{r['throughput_max']:.1f}"
        vs = [f"{r[f'speedup_vs_{b}']:.2f}x" if r.get(f"speedup_vs_{b}") else "-" for b in bases]
        lines.append(f"| {r['target_gbps'] if r['target_gbps'] is not None else '-'} | {r['link_mbit']:.0f} | {name} "
                     f"| {r['throughput']:.2f} | {spread} | {' | '.join(vs)} | {r['bytes_per_step'] / 1e6:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stanza_core.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="alexnet")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--num-classes", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--strategies", default=",".join(registry.compared()))
    ap.add_argument("--fc-workers", default="1", help="comma list of k, or 'auto' (the optimiser's choice)")
    ap.add_argument("--ps-servers", default="0",
                    help="comma list of dedicated ps server counts S, extra nodes beside the N workers "
                         "(0: shards colocated with the workers)")
    ap.add_argument("--ps-overlap", choices=("off", "on", "both"), default="off",
                    help="ps with the overlapped push (wait-free backprop), without it, or both")
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
            fc = int_list("--fc-workers", args.fc_workers)
        result = run_bench(model=args.model, image_size=args.image_size, nodes=args.nodes, strategies=strategies,
                           fc_workers=fc, global_batch=args.global_batch, steps=args.steps, warmup=args.warmup,
                           num_classes=args.num_classes,
                           link_mbit=positive_floats("--link-mbit", args.link_mbit) if args.link_mbit else None,
                           target_gbps=positive_floats("--target-gbps", args.target_gbps) if args.target_gbps else None,
                           target_device=args.target_device, repeats=args.repeats, delay_ms=args.delay_ms,
                           boundary=args.boundary, mtu=args.mtu,
                           ps_servers=int_list("--ps-servers", args.ps_servers, 0),
                           ps_overlap={"off": [False], "on": [True], "both": [False, True]}[args.ps_overlap])
    except (BenchError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # netem unavailable, a failed node
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    if result.calibration:
        c = result.calibration
        print(f"compute step of {c['batch_per_worker']} samples: {c['t_step_here_s'] * 1e3:.1f} ms here, "
              f"{c['t_step_target_s'] * 1e3:.2f} ms on {c['target_device']} (ratio {c['ratio']:.4g})")
    print(format_table(result))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        atomic.write_text(args.out, json.dumps(result.to_dict(), indent=1))
    return 0


def auto_fc_workers(args) -> int:
    """k chosen by the performance model for the first target (or, with --link-mbit, the first rate)."""
    batch = args.global_batch // args.nodes
    profile = named_profile(args.model, args.image_size, args.num_classes, batch)
    gbps = float((args.target_gbps or "").split(",")[0] or 0) or float(args.link_mbit.split(",")[0]) / 1000
    # the one resolver: a table row, a measured device (h200-measured) or PATH.json, as perf.check_device accepts
    dev = device_profile(args.target_device, profile, batch, what="--target-device").profile
    a = best_assignment(profile, Cluster(args.nodes, gbps, device=dev), args.global_batch)
    return a.best_stanza().fc_workers


if __name__ == "__main__":
    sys.exit(main())
