"""`python -m stanza_core.perf`: what to run on a cluster, and how fast it will be.

  python -m stanza_core.perf --model vgg16 --nodes 16 --gbps 10 --device v100
  python -m stanza_core.perf --model alexnet --sweep --out sweep.json
  python -m stanza_core.perf --profile measured.json --device measured --nodes 4 --gbps 0.08
  python -m stanza_core.perf calibrate --model vgg16 --batch 32 --out gpu.json   (on a GPU; its options:
                                                                                 calibrate --help)
  python -m stanza_core.perf --model vgg16 --device gpu.json                     (a DeviceProfile JSON)
  python -m stanza_core.perf --model vgg16 --device gpu.layers.json              (a per-layer record)
  python -m stanza_core.perf --model alexnet --device h200-measured              (the package's H200 records)

Bad arguments print one line and exit with status 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tabulate import tabulate

from .. import DIST_NAME, __version__, checks, registry
from ..errors import OneLineParser, command_name
from .cluster import DEFAULT_LATENCY_S, Cluster
from .devices import DeviceProfile
from .model import DEFAULT_BATCH_PER_WORKER, DEFAULT_BUCKET_MB
from .optimize import best_assignment
from .profiles import load_profile, named_profile
from .resolve import device_names, device_profile
from .sweep import DEFAULT_BANDWIDTHS_GBPS, DEFAULT_SIZES, fmt_table, sweep
from .calibrate import main as calibrate_main


_Parser = OneLineParser  # one line, `error: ...`, no usage block


def _floats(text: str) -> list[float]:
    try:
        vals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not vals or any(not v > 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return vals


def _ints(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=command_name("stanza_core.perf"), usage="%(prog)s [options]\n       %(prog)s calibrate [options]",
                description=f"Rank {registry.in_words(registry.compared())} (each in every configuration it "
                            "offers) for a model on a cluster, by the performance model.")
    p.add_argument("--version", action="version", version=f"{DIST_NAME} {__version__}")
    # calibrate parses its own options (perf/calibrate.py): everything after the word goes to it.
    sub = p.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    sub.add_parser("calibrate", add_help=False,
                   help="measure a DeviceProfile on this machine's GPU (options: calibrate --help)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", default="vgg16", help="zoo model name or package.module:factory (default vgg16)")
    src.add_argument("--profile", help="Profile JSON (Profile.to_dict), e.g. measured with time=True")
    p.add_argument("--image-size", type=int, default=224, help="square input size for --model (default 224)")
    p.add_argument("--num-classes", type=int, default=1000, help="classes for --model (default 1000)")
    p.add_argument("--nodes", type=int, default=16, help="cluster size N (default 16)")
    p.add_argument("--gbps", type=float, default=10.0, help="per-node link bandwidth, Gb/s each way (default 10)")
    p.add_argument("--latency-us", type=float, default=DEFAULT_LATENCY_S * 1e6,
                   help=f"per-message latency in microseconds (default {DEFAULT_LATENCY_S * 1e6:g})")
    p.add_argument("--device", default="v100",
                   help=f"{', '.join(device_names())} (table rows, then measured records: each "
                   "layer its own time), 'measured' (times of --profile) or PATH.json (a DeviceProfile or "
                   "a per-layer record, e.g. from `perf calibrate`)")
    batch = p.add_mutually_exclusive_group()
    batch.add_argument("--global-batch", type=int, help="global batch, split over the data workers")
    batch.add_argument("--batch-per-worker", type=int,
                       help=f"samples per data worker (default {DEFAULT_BATCH_PER_WORKER})")
    p.add_argument("--ps-shards", type=int, help="colocated parameter-server shards (default: one per node)")
    p.add_argument("--ps-servers", type=_ints, default=None,
                   help="dedicated parameter-server counts to try, e.g. 1,2 (default 1,2,4,.. <= N/2)")
    p.add_argument("--ps-overlap", choices=("both", "on", "off"), default="both",
                   help="ps candidates with the overlapped push, without it, or both (default both)")
    p.add_argument("--bucket-mb", type=float, default=DEFAULT_BUCKET_MB,
                   help=f"gradient bucket cap in MiB, as the engine's --bucket-mb (default {DEFAULT_BUCKET_MB:g})")
    p.add_argument("--top", type=int, default=12, help="rows of the ranking to print (default 12)")
    p.add_argument("--json", action="store_true", help="print the full result as JSON instead of a table")
    p.add_argument("--sweep", action="store_true", help="sweep bandwidths and cluster sizes, write --out")
    p.add_argument("--bandwidths", type=_floats, default=list(DEFAULT_BANDWIDTHS_GBPS),
                   help="sweep bandwidths in Gb/s, comma-separated (default 1..400)")
    p.add_argument("--sizes", type=_ints, default=list(DEFAULT_SIZES),
                   help="sweep cluster sizes, comma-separated (default 2,4,..,1024)")
    p.add_argument("--out", help="where --sweep writes its JSON")
    return p


def _device(args, profile) -> DeviceProfile:
    """--device resolved once (perf.device_profile) at the samples per data worker: a measured
    record's per-sample times depend on the batch (--batch-per-worker, else global batch / N)."""
    if args.batch_per_worker:
        batch = args.batch_per_worker
    elif args.global_batch and not args.sweep:
        batch = args.global_batch / args.nodes
    else:
        batch = DEFAULT_BATCH_PER_WORKER
    return device_profile(args.device, profile, batch).profile


def ps_layout(p) -> str:
    """The parameter-server deployment of a prediction, in one word ("-" for ddp and stanza)."""
    if not registry.owns(p.strategy, "ps_servers"):
        return "-"
    servers = p.variant.options.ps_servers
    return ("colocated" if not servers else f"S={servers}") + ("+overlap" if p.variant.options.ps_overlap else "")


RANKING_HEADERS = ("strategy", "k", "iter ms", "samples/s", "vs ps", "vs ddp", "MB sent", "MB recv", "MB/step",
                   "ps layout")


def _row(p, a) -> list:
    return [p.strategy, "-" if p.fc_workers is None else str(p.fc_workers), p.iteration_s * 1e3, p.throughput,
            f"{p.throughput / a.ps.throughput:.2f}x", f"{p.throughput / a.ddp.throughput:.2f}x",
            p.max_node_sent / 1e6, p.max_node_recv / 1e6, p.bytes_per_step / 1e6, ps_layout(p)]


def _print_ranking(profile, cluster, a, top: int) -> None:
    print(f"{profile.model} {profile.input_shape}: CONV {profile.conv.params / 1e6:.2f} M params, "
          f"FC {profile.fc.params / 1e6:.2f} M params, boundary {profile.boundary_values} values/sample")
    print(f"cluster: {cluster.nodes} nodes, {cluster.bandwidth_gbps:g} Gb/s, {cluster.latency_s * 1e6:g} us/message, "
          f"device {a.best.device}" + (f", {cluster.device.row_version}" if getattr(cluster.device, "row_version", "") else ""))
    print(f"best: {a.best.strategy}" + (f" k={a.best.fc_workers}" if a.best.fc_workers else "")
          + (f" {ps_layout(a.best)}" if registry.owns(a.best.strategy, "ps_servers") else "")
          + f"  {a.best.throughput:.1f} samples/s  ({a.speedup_vs_ps:.2f}x ps, {a.speedup_vs_ddp:.2f}x ddp, "
          f"{a.speedup_vs_best_ps:.2f}x the fastest ps: {ps_layout(a.best_ps)})")
    shown = a.ranking[:top]
    shown += [p for p in (a.ddp, a.ps) if p not in shown]  # baselines always shown
    print(tabulate([_row(p, a) for p in shown], headers=RANKING_HEADERS, tablefmt="simple",
                   floatfmt=("", "", ".2f", ".1f", "", "", ".1f", ".1f", ".1f", ""), colalign=("left",) + ("right",) * 8 + ("left",)))
    print("(MB sent/recv: busiest node per step; MB/step: whole cluster, sum of bytes sent; vs ps: against "
          "colocated ps without overlap; ps layout S=s: s of the nodes are dedicated servers)")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "calibrate":
        if argv[0] != "calibrate":  # the ranking's options would be dropped without a word
            parser.error("calibrate takes no ranking options; run python -m stanza_core.perf calibrate [its options]")
        return calibrate_main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        for name in ("nodes", "image_size", "num_classes", "top", "global_batch", "batch_per_worker", "ps_shards"):
            if getattr(args, name) is not None:
                checks.number(f"--{name.replace('_', '-')}", getattr(args, name), at_least=1)
        if not args.gbps > 0 or not args.latency_us >= 0 or not args.bucket_mb > 0:
            raise ValueError("--gbps and --bucket-mb must be > 0, --latency-us >= 0")
        if args.sweep and not args.out:
            raise ValueError("--sweep needs --out PATH for its JSON")
        if args.profile:
            profile = load_profile(args.profile)
        else:
            profile = named_profile(args.model, args.image_size, args.num_classes,
                                    args.batch_per_worker or DEFAULT_BATCH_PER_WORKER)
        device = _device(args, profile)
        batch = {"global_batch": args.global_batch, "batch_per_worker": args.batch_per_worker,
                 "ps_shards": args.ps_shards, "bucket_mb": args.bucket_mb}
        if args.sweep:
            result = sweep(profile, device, args.bandwidths, args.sizes, latency_s=args.latency_us * 1e-6, **batch)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(result, indent=1))
            print(fmt_table(result))
            print(f"wrote {args.out} ({len(result['rows'])} points)")
            return 0
        cluster = Cluster(args.nodes, args.gbps, args.latency_us * 1e-6, device)
        a = best_assignment(profile, cluster, **batch, ps_servers=args.ps_servers,
                            ps_overlap={"both": None, "on": True, "off": False}[args.ps_overlap])
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(a.to_dict(), indent=1))
    else:
        _print_ranking(profile, cluster, a, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
