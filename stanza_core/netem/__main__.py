"""``python -m stanza_core.netem {up,down,cleanup,check,run}``: the emulated cluster from a shell.

    up      --nodes 3 --rate-mbit 200     build it, print it (JSON), hold until Ctrl-C/SIGTERM
    down    PREFIX                        remove a cluster left by `up --detach`
    cleanup [--all]                       remove leftovers of runs whose owner process is gone
    check   --rate-mbit 100               measure TCP throughput against the set rate
    run     --nodes 3 --rate-mbit 200 -- --strategy stanza --model tiny_cnn ...

Exit codes: 0 ok, 1 a node or the link check failed, 2 bad input or a host that cannot do it
(not Linux, not root, no ip/tc), 128+N killed by signal N (the cluster is removed first).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys

from .check import PATTERNS, check_link, format_check
from .cluster import EmulatedCluster
from .host import NetemError, NetemUnavailable, check_host, cleanup, remove_prefix
from .launch import NodeFailure, run_training


def _cluster_args(p: argparse.ArgumentParser, nodes: int | None = 3) -> None:
    if nodes is not None:
        p.add_argument("--nodes", type=int, default=nodes, help="number of nodes")
    p.add_argument("--rate-mbit", type=float, required=True,
                   help="each node's link rate, Mbit/s, in each direction")
    p.add_argument("--delay-ms", type=float, default=0.0,
                   help="one-way latency between two nodes, ms (needs the kernel's netem)")
    p.add_argument("--mtu", type=int, default=1500,
                   help="link MTU; 9000 lets a host emulate rates above ~300 Mbit/s")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m stanza_core.netem",
                                 description="Emulated cluster: one network namespace per node, "
                                             "tc-shaped full-duplex links.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="build a cluster and hold it until Ctrl-C / SIGTERM")
    _cluster_args(up)
    up.add_argument("--detach", action="store_true",
                    help="leave it up and exit; remove with `down PREFIX` or `cleanup`")
    down = sub.add_parser("down", help="remove one cluster")
    down.add_argument("prefix", help="the run prefix, e.g. stz1a2b3c")
    cl = sub.add_parser("cleanup", help="remove leftovers of earlier runs")
    cl.add_argument("--all", action="store_true",
                    help="also clusters whose owner process still runs")
    ck = sub.add_parser("check", help="measure link throughput against the set rate")
    _cluster_args(ck, nodes=None)
    ck.add_argument("--pattern", choices=PATTERNS, default="pair")
    ck.add_argument("--nodes", type=int, default=None, help="default: 2, or 3 for fan-in/out")
    ck.add_argument("--seconds", type=float, default=2.5, help="length of the flows")
    ck.add_argument("--tolerance", type=float, default=0.10,
                    help="allowed relative error of the wire rate (exit 1 beyond it)")
    ck.add_argument("--json", action="store_true", help="print the full result as JSON")
    run = sub.add_parser("run", help="torchrun the training CLI, one node per namespace; "
                                     "training arguments follow `--`")
    _cluster_args(run)
    run.add_argument("--timeout-s", type=float, default=900.0, help="limit for the whole run")
    run.add_argument("--out", help="write the metrics JSON with kernel counters here")
    return ap


def _run(ns: argparse.Namespace, train_args: list[str]) -> int:
    if ns.cmd == "up":
        cluster = EmulatedCluster(ns.nodes, ns.rate_mbit, ns.delay_ms, mtu=ns.mtu)
        if ns.detach:
            cluster.up(detached=True)
            print(json.dumps(cluster.describe()), flush=True)
            return 0
        with cluster:
            print(json.dumps(cluster.describe()), flush=True)
            print("cluster up; Ctrl-C or SIGTERM removes it", file=sys.stderr, flush=True)
            signal.pause()   # SIGTERM/SIGHUP raise SystemExit, Ctrl-C KeyboardInterrupt
        return 0
    if ns.cmd == "down":
        check_host()
        removed = remove_prefix(ns.prefix)
        print(f"removed {len(removed)} namespaces of {ns.prefix}")
        return 0
    if ns.cmd == "cleanup":
        removed = cleanup(include_live=ns.all)
        print(f"removed {', '.join(removed) or 'nothing'}")
        return 0
    if ns.cmd == "check":
        res = check_link(ns.rate_mbit, pattern=ns.pattern, nodes=ns.nodes, seconds=ns.seconds,
                         delay_ms=ns.delay_ms, mtu=ns.mtu)
        print(json.dumps(res, indent=1) if ns.json else format_check(res))
        worst = max(abs(b["wire_error"]) for b in res["bottlenecks"])
        if worst > ns.tolerance:
            print(f"netem: shaping off by {100 * worst:.1f} % (> {100 * ns.tolerance:g} %)",
                  file=sys.stderr)
            return 1
        return 0
    # run
    if not train_args:
        raise ValueError("run needs the training arguments after `--`, e.g. "
                         "`-- --strategy ddp --model tiny_cnn`")
    res = run_training(ns.nodes, ns.rate_mbit, train_args, delay_ms=ns.delay_ms, mtu=ns.mtu,
                       timeout_s=ns.timeout_s)
    if ns.out:
        with open(ns.out, "w") as f:
            json.dump(res, f, indent=1)
    net = res["netem"]
    print(f"{ns.nodes} nodes at {ns.rate_mbit:g} Mbit/s: throughput "
          f"{res.get('throughput', float('nan')):.1f} samples/s, engine bytes/step "
          f"{res.get('bytes_per_step')}, wall {net['wall_s']:.1f} s")
    for k in net["kernel"]:
        print(f"  node {k['node']}: kernel tx {k['tx_bytes']} B, rx {k['rx_bytes']} B")
    print(format_link_check(res["link_check"], res["host_load"]))
    return 0


def format_link_check(lc: dict, load: dict | None) -> str:
    """One line: what the busy links carried over the timed steps against the set rate, and the load."""
    host = (f"; host CPU busy {100 * load['cpu_busy']:.0f} %, load average {load['loadavg_1m']:.1f} on "
            f"{load['cpus']} CPUs" if load and load.get("cpu_busy") is not None else "")
    if lc.get("carried_mbit") is None:
        return f"links carried: not judged ({lc.get('reason')}){host}"
    verdict = (f"SLIPPED ({', '.join(lc['slow_queues'])} under {100 * (1 - lc['tolerance']):.0f} % of the set rate)"
               if lc["slipped"] else "within the tolerance")
    return (f"links carried {lc['carried_mbit']:.1f} Mbit/s while busy (worst {lc['worst_mbit']:.1f}, set "
            f"{lc['set_mbit']:g}) over the timed steps: {verdict}{host}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    train_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, train_args = argv[:cut], argv[cut + 1:]
    ns = _parser().parse_args(argv)
    if train_args and ns.cmd != "run":
        print("netem: arguments after `--` are for `run` only", file=sys.stderr)
        return 2
    try:
        return _run(ns, train_args)
    except (NetemUnavailable, ValueError) as e:
        print(f"netem: {e}", file=sys.stderr)
        return 2
    except NodeFailure as e:
        print(f"netem: {e}", file=sys.stderr)
        return 1
    except NetemError as e:
        print(f"netem: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("netem: interrupted; the cluster was removed", file=sys.stderr)
        return 130
    except SystemExit as e:   # SIGTERM / SIGHUP, turned into SystemExit(128 + signum)
        if isinstance(e.code, int) and e.code > 128:
            print(f"netem: stopped by signal {e.code - 128}; the cluster was removed",
                  file=sys.stderr)
        raise


if __name__ == "__main__":
    sys.exit(main())
