"""Link check: real TCP flows between namespaces, measured against the rate tc was told to hold.

Patterns (n = cluster size):
  pair     node 0 -> node 1                       one shaped path
  duplex   node 0 -> node 1 and node 1 -> node 0   full duplex: both directions at full rate
  fan-in   nodes 1..n-1 -> node 0                  node 0's download is the bottleneck
  fan-out  node 0 -> nodes 1..n-1                  node 0's upload is the bottleneck
  ring     node i -> node i+1 (mod n), all at once  every link busy both ways: the aggregate
                                                   rate the host sustains (a ring allreduce)
  star     fan-in and fan-out at once              node 0 busy both ways with every other node:
                                                   a dedicated parameter server's push and pull
  mesh     node i -> node j for every i != j       every link carries n-1 flows each way: a
                                                   colocated parameter server's push and pull
A path crosses two shaped queues (sender's upload, receiver's download) at the same rate, so
`pair` alone cannot tell which one shapes; `fan-in` / `fan-out` isolate each side.

"wire" rates come from the interface counters (Ethernet frames, headers included: the quantity
htb paces), "payload" from the bytes the receiving sockets returned.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from .cluster import EmulatedCluster
from .host import NetemError

PATTERNS = ("pair", "duplex", "fan-in", "fan-out", "ring", "star", "mesh")
PROBE = str(Path(__file__).with_name("linkprobe.py"))
PORT = 5201


def flows_for(pattern: str, nodes: int) -> list[tuple[int, int]]:
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    need = 2 if pattern in ("pair", "duplex", "ring") else 3
    if nodes < need:
        raise ValueError(f"pattern {pattern!r} needs at least {need} nodes, got {nodes}")
    return {"pair": [(0, 1)], "duplex": [(0, 1), (1, 0)],
            "fan-in": [(s, 0) for s in range(1, nodes)],
            "fan-out": [(0, d) for d in range(1, nodes)],
            "ring": [(i, (i + 1) % nodes) for i in range(nodes)] if nodes > 2 else [(0, 1), (1, 0)],
            "star": [(s, 0) for s in range(1, nodes)] + [(0, d) for d in range(1, nodes)],
            "mesh": [(s, d) for s in range(nodes) for d in range(nodes) if s != d]}[pattern]


def _rate_mbit(rows, col, t0, t1) -> float:
    """Mbit/s of column ``col`` between the samples closest to t0 and t1."""
    a = min(rows, key=lambda r: abs(r[0] - t0))
    b = min(rows, key=lambda r: abs(r[0] - t1))
    if b[0] - a[0] < 0.5 * (t1 - t0):
        raise NetemError("probe samples do not cover the measurement window")
    return (b[col] - a[col]) * 8 / (b[0] - a[0]) / 1e6


def measure_flows(cl: EmulatedCluster, flows: list[tuple[int, int]], *, seconds: float = 2.5,
                  warmup_s: float = 0.5) -> dict:
    """Run the flows at once for ``seconds``; rates over the span in which every sender runs:
    from the last sender's first sample + warmup_s to the first sender's last sample - 0.1 s (a
    16-node mesh starts 240 senders, which takes seconds: a window opened at the first launch
    would count the ramp)."""
    if seconds - warmup_s < 1.0:
        raise ValueError("seconds must exceed warmup_s by at least 1 s")
    procs, dests = [], sorted({d for _, d in flows})
    try:
        receivers = {}
        for d in dests:
            conns = sum(1 for _, dd in flows if dd == d)
            p = cl.exec(d, [sys.executable, "-I", PROBE, "recv", cl.nodes[d].address, str(PORT),
                            str(conns), cl.nodes[d].iface, str(seconds)],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(p)
            receivers[d] = p
            if p.stdout.readline().strip() != "ready":
                raise NetemError(f"probe receiver on node {d} failed: {p.stderr.read().strip()}")
        start = time.monotonic()
        senders = [(s, cl.exec(s, [sys.executable, "-I", PROBE, "send", cl.nodes[d].address,
                                   str(PORT), cl.nodes[s].iface, str(seconds)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
                   for s, d in flows]
        procs += [p for _, p in senders]
        rows = {}  # node -> list of (role, rows)
        for node, p in [*receivers.items(), *senders]:
            out, err = p.communicate(timeout=seconds + 30)
            if p.returncode != 0:
                raise NetemError(f"probe on node {node} failed: {err.strip().splitlines()[-1:]}")
            rec = json.loads(out.strip().splitlines()[-1])
            rows.setdefault(node, []).append((rec["role"], rec["rows"]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    sent = [r for node in rows.values() for role, r in node if role == "send"]
    last_start = max(r[0][0] for r in sent)
    t0, t1 = last_start + warmup_s, min(r[-1][0] for r in sent) - 0.1
    if t1 - t0 < 1.0:
        late = last_start - start
        raise NetemError(f"the last sender started {late:.1f} s after the launches began, leaving a {t1 - t0:.1f} s "
                         f"window in which all run; give more seconds (at least {late + warmup_s + 1.2:.0f})")
    per_node = []
    for node in sorted(rows):
        first = rows[node][0][1]  # every probe on a node samples the same interface
        entry = {"node": node, "wire_tx_mbit": _rate_mbit(first, 2, t0, t1),
                 "wire_rx_mbit": _rate_mbit(first, 3, t0, t1)}
        recv_rows = [r for role, r in rows[node] if role == "recv"]
        if recv_rows:
            entry["payload_rx_mbit"] = _rate_mbit(recv_rows[0], 1, t0, t1)
        per_node.append(entry)
    return {"set_mbit": cl.rate_mbit, "window_s": t1 - t0, "flows": flows, "nodes": per_node}


def check_link(rate_mbit: float, *, pattern: str = "pair", nodes: int | None = None, mtu: int = 1500,
               seconds: float = 2.5, delay_ms: float = 0.0) -> dict:
    """Build a cluster, run ``pattern``, report the bottleneck's rates beside the set rate.

    ``wire_error`` is (measured wire rate - set rate) / set rate at the bottleneck: the
    receiver's download for pair/duplex/fan-in, the sender's upload for fan-out, both of node 0
    for star; for mesh (every link is a bottleneck) the mean and the slowest of the nodes'
    downloads and uploads.
    """
    n = nodes or (2 if pattern in ("pair", "duplex") else 3)
    flows = flows_for(pattern, n)
    with EmulatedCluster(n, rate_mbit, delay_ms, mtu=mtu) as cl:
        res = measure_flows(cl, flows, seconds=seconds)
    by = {e["node"]: e for e in res["nodes"]}
    if pattern == "fan-out":
        checks = [("node 0 upload", by[0]["wire_tx_mbit"], None)]
    elif pattern == "star":
        checks = [("node 0 download", by[0]["wire_rx_mbit"], by[0]["payload_rx_mbit"]),
                  ("node 0 upload", by[0]["wire_tx_mbit"], None)]
    elif pattern == "mesh":
        rx, tx = sorted(res["nodes"], key=lambda e: e["wire_rx_mbit"]), sorted(res["nodes"], key=lambda e: e["wire_tx_mbit"])
        mean = lambda key: sum(e[key] for e in res["nodes"]) / n
        checks = [("mean download", mean("wire_rx_mbit"), mean("payload_rx_mbit")),
                  (f"slowest download (node {rx[0]['node']})", rx[0]["wire_rx_mbit"], rx[0]["payload_rx_mbit"]),
                  ("mean upload", mean("wire_tx_mbit"), None),
                  (f"slowest upload (node {tx[0]['node']})", tx[0]["wire_tx_mbit"], None)]
    else:
        checks = [(f"node {d} download", by[d]["wire_rx_mbit"], by[d]["payload_rx_mbit"])
                  for d in sorted({d for _, d in flows})]
    res["pattern"] = pattern
    res["aggregate_wire_mbit"] = sum(e["wire_rx_mbit"] for e in res["nodes"])
    res["bottlenecks"] = [{"link": name, "wire_mbit": w, "payload_mbit": p,
                           "wire_error": (w - rate_mbit) / rate_mbit} for name, w, p in checks]
    return res


def format_check(res: dict) -> str:
    lines = [f"pattern {res['pattern']}, set rate {res['set_mbit']:g} Mbit/s, "
             f"window {res['window_s']:.2f} s, aggregate received {res['aggregate_wire_mbit']:.0f} Mbit/s (wire)"]
    for b in res["bottlenecks"]:
        pay = f", TCP payload {b['payload_mbit']:.1f} Mbit/s" if b["payload_mbit"] is not None else ""
        lines.append(f"  {b['link']}: wire {b['wire_mbit']:.1f} Mbit/s "
                     f"({100 * b['wire_error']:+.1f} % of set){pay}")
    return "\n".join(lines)
