"""The standing queue of converging flows on a payload-scaled link: k senders each send X / F
bytes at once to one node whose links run at rate / F (the scaled link's queue and bucket as the
emulator sets them), and the receiver's download queue is sampled while it drains.

    python benchmarks/incast_queue.py --out benchmarks/results/incast_queue.json   (root; alone)

Per F and repetition: the completion time of the slowest sender over bytes / rate (1.0: the link
was busy all along), the download queue's backlog while it had one (median and max, as line time
in ms: backlog bytes x 8 / rate), its drops and TCP's retransmissions. If payload scaling changed
nothing but the bytes, the backlog's line time would be the same at every F (the unscaled
queue's time); where it grows, a message that arrives behind the backlog (a PS pull behind the
pushes, a gradient behind activations) waits longer at F than at 1.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stanza_core import atomic  # noqa: E402

RECV = r'''
import socket, sys, threading, time
k, x = int(sys.argv[1]), int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("", 5001)); s.listen(16)
conns = [s.accept()[0] for _ in range(k)]
for c in conns: c.sendall(b"g")
t0 = time.perf_counter(); done = []
def rd(c):
    n = 0
    while n < x:
        d = c.recv(1 << 20)
        if not d: break
        n += len(d)
    done.append(time.perf_counter() - t0)
th = [threading.Thread(target=rd, args=(c,)) for c in conns]
[t.start() for t in th]; [t.join() for t in th]
print(max(done))
'''
SEND = r'''
import socket, sys
s = socket.create_connection((sys.argv[1], 5001)); s.recv(1); s.sendall(b"x" * int(sys.argv[2])); s.recv(1)
'''


def one(cl, rate_mbit: float, k: int, x: int, mtu: int) -> dict:
    from stanza_core.netem import linkstats, tcpstats

    before = tcpstats.read(cl)
    with linkstats.Sampler(cl.queues()) as smp:
        recv = cl.exec(0, [sys.executable, "-c", RECV, str(k), str(x)], stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        send = [cl.exec(i, [sys.executable, "-c", SEND, cl.nodes[0].address, str(x)]) for i in range(1, k + 1)]
        out = recv.communicate(timeout=120)[0]
        for p in send:
            p.kill()
            p.wait()
    losses = tcpstats.difference(before, tcpstats.read(cl))
    wire = (mtu + 14) / (mtu - 52)  # wire bytes per payload byte (full frames)
    ideal = k * x * 8 * wire / (rate_mbit * 1e6)
    backlog_ms = sorted(r[2] * 8 / (rate_mbit * 1e6) * 1e3 for r in smp.rows[cl.nodes[0].switch_port] if r[2] > 0)
    return {"completion_over_ideal": float(out.split()[0]) / ideal,
            "backlog_median_ms": statistics.median(backlog_ms) if backlog_ms else 0.0,
            "backlog_max_ms": backlog_ms[-1] if backlog_ms else 0.0,
            "queue_drops": losses["queue_drops"], "retrans_segs": losses["retrans_segs"]}


def main(argv: list[str] | None = None) -> int:
    from stanza_core.netem.cluster import EmulatedCluster, scaled_queue_packets, TXQUEUELEN

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=252.0, help="the unscaled link's wire Mbit/s")
    ap.add_argument("--bytes", type=int, default=15_000_000, help="each sender's unscaled message")
    ap.add_argument("--senders", type=int, default=3)
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 2, 4, 8, 12])
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "incast_queue.json"))
    ap.add_argument("--overwrite", action="store_true")
    a = ap.parse_args(argv)
    if Path(a.out).exists() and not a.overwrite:
        sys.exit(f"{a.out} exists: pass --overwrite to replace it")
    rows = []
    for f in a.scales:
        rate = a.rate / f
        with EmulatedCluster(a.senders + 1, rate, mtu=a.mtu, payload_scale=f) as cl:
            reps = [one(cl, rate, a.senders, a.bytes // f, a.mtu) for _ in range(a.reps)]
        row = {"payload_scale": f, "link_mbit": rate, "message_bytes": a.bytes // f,
               "queue_packets": scaled_queue_packets(f) if f > 1 else TXQUEUELEN,
               "packet_line_time_us": (a.mtu + 14) * 8 / rate, "reps": reps}
        rows.append(row)
        print(f"F={f:3d} {rate:7.1f} Mbit/s: backlog median "
              + " ".join(f"{r['backlog_median_ms']:.1f}" for r in reps) + " ms, max "
              + " ".join(f"{r['backlog_max_ms']:.1f}" for r in reps) + " ms, drops "
              + " ".join(str(r["queue_drops"]) for r in reps) + ", completion / ideal "
              + " ".join(f"{r['completion_over_ideal']:.3f}" for r in reps), flush=True)
    atomic.write_text(a.out, json.dumps({"command": "python " + " ".join([sys.argv[0], *(argv or sys.argv[1:])]),
                                          "started": time.strftime("%Y-%m-%d %H:%M:%S"), "senders": a.senders,
                                          "mtu": a.mtu, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
