"""Where a parameter-server step's time goes, from the engine's timeline (measures nothing).

    python benchmarks/ps_timeline.py benchmarks/results/ps_timeline_alexnet_n16_100g.json

Reads the metrics JSON of a `--strategy ps --timeline` run and prints, per step, the spread over
ranks of each milestone: the backward's end, the last push posted, the first and last push of a
shard to arrive at its server, the server's first update, its last pull posted, and the first and
last pull to complete at a worker. Times in seconds since the first rank entered the step
(divide by the run's dilation for the target's time). A colocated PS updates a shard once every
worker's push of it has arrived, so the step ends about one pull's transfer after the last
server's last push.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

MILESTONES = (("backward end", "backward_end", None, max),
              ("last push posted", "send", "grads", max),
              ("first push arrived", "recv_done", "grads", min),
              ("last push arrived", "recv_done", "grads", max),
              ("first update", "optimizer_start", None, min),
              ("last pull posted", "send", "params", max),
              ("first pull done", "recv_done", "params", min),
              ("last pull done", "recv_done", "params", max))


def milestones(metrics: dict) -> dict[int, dict[str, list[float]]]:
    """step -> milestone -> one time per rank that has it (seconds since the step's first start)."""
    out: dict[int, dict[str, list[float]]] = {}
    for s in metrics["steps"]:
        step = s["step"]
        per = out.setdefault(step, {name: [] for name, *_ in MILESTONES})
        for r in metrics["ranks"]:
            tl = [e for e in r.get("timeline") or [] if e["step"] == step]
            for name, event, category, pick in MILESTONES:
                ts = [e["t"] for e in tl if e["event"] == event and (category is None or e["category"] == category)]
                if ts:
                    per[name].append(pick(ts))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics", help="metrics JSON of a ps run with --timeline")
    a = ap.parse_args(argv)
    with open(a.metrics) as fh:
        m = json.load(fh)
    if m["config"]["strategy"] != "ps" or not any(r.get("timeline") for r in m["ranks"]):
        print(f"{a.metrics}: not a ps run with --timeline", file=sys.stderr)
        return 1
    d = m["config"].get("dilation") or 1.0
    print(f"{m['config']['model']} ps, {len(m['ranks'])} ranks, D = {d:g}; step times (s): "
          + ", ".join(f"{s['time_s']:.1f}" for s in m["steps"]))
    print("| step | milestone | first rank (s) | median | last |")
    print("|---|---|---|---|---|")
    for step, per in milestones(m).items():
        for name, *_ in MILESTONES:
            v = per[name]
            if v:
                print(f"| {step} | {name} | {min(v):.1f} | {statistics.median(v):.1f} | {max(v):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
