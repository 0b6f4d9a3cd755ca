"""Point-to-point message latency from the engine's timeline, by how many messages arrived at once.

    python benchmarks/message_latency.py --category activations \\
        benchmarks/results/replay_fidelity_timeline/stanza1-*.json

Reads metrics JSON files of runs made with `--timeline` (for instance kept by
`benchmarks/replay_fidelity.py --timeline --keep-metrics DIR`). A message's latency is the time
from its sender posting the send to its receiver's wait returning (recv_done), both on the host
clock every rank of a machine shares; sends and receives of one category between one pair are
matched in posting order within a step. Each message is grouped by how many other messages of the
same category to the same receiver were posted within --window-ms of it (0: it travelled alone).
Timed steps only (the run's warm-up left out). Measures nothing itself.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict


def latencies(metrics: dict, category: str, window_s: float) -> list[tuple[int, float]]:
    """(messages posted to the same receiver within window_s of this one, latency in seconds)
    for every message of `category` in the timed steps."""
    timed = {s["step"] for s in metrics["steps"][metrics["config"]["warmup"]:]}
    sends: dict[tuple, list[float]] = defaultdict(list)  # (step, src, dst) -> post times
    dones: dict[tuple, list[float]] = defaultdict(list)  # (step, src, dst) -> recv_done times
    for r in metrics["ranks"]:
        for e in r.get("timeline") or []:
            if e["step"] not in timed or e["category"] != category:
                continue
            if e["event"] == "send":
                sends[e["step"], r["rank"], e["peer"]].append(e["t"])
            elif e["event"] == "recv_done":
                dones[e["step"], e["peer"], r["rank"]].append(e["t"])
    out = []
    for (step, src, dst), posted in sends.items():
        arrived = sorted(dones.get((step, src, dst), []))
        others = [t for (s2, o, d2), ts in sends.items() if s2 == step and d2 == dst and o != src for t in ts]
        for t, done in zip(sorted(posted), arrived):
            out.append((sum(1 for u in others if abs(u - t) <= window_s), done - t))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="metrics JSON files of --timeline runs")
    ap.add_argument("--category", default="activations", help="message category (activations, grads, params, ...)")
    ap.add_argument("--window-ms", type=float, default=4.0, help="messages posted this close count as at once")
    a = ap.parse_args(argv)
    print(f"| run | {a.category} posted with n others within {a.window_ms:g} ms | messages | latency median (ms) | min | max |")
    print("|---|---|---|---|---|---|")
    for path in a.files:
        with open(path) as fh:
            m = json.load(fh)
        if not any(r.get("timeline") for r in m["ranks"]):
            print(f"{path}: no timeline (run the engine with --timeline)", file=sys.stderr)
            return 1
        by_n = defaultdict(list)
        for n, lat in latencies(m, a.category, a.window_ms / 1e3):
            by_n[n].append(lat * 1e3)
        for n in sorted(by_n):
            v = by_n[n]
            print(f"| {os.path.basename(path)} | {n} | {len(v)} | {statistics.median(v):.1f} | {min(v):.1f} | {max(v):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
