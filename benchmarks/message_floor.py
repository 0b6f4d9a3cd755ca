"""Where per-message costs, not bytes, start to set a shaped link's transfer time (payload scaling's floor).

    sudo python benchmarks/message_floor.py --rates 62.5 250 --out benchmarks/results/message_floor.json

Payload scaling (`--payload-scale F`, stanza_core/comm/process_group.py) sends 1/F of every message
on links shaped to 1/F of their rate, so each transfer keeps its emulated time as long as a
message's time on the link is its bytes over the rate. Below some size it is not: the shaper's
token bucket lets a burst through at memory speed after an idle spell (netem/cluster.py:
burst_bytes), and gloo's and TCP's per-message work is a fixed cost. This measures, on two
emulated nodes (gloo over one shaped veth path, MTU 9000, as a replayed run uses it), the time of
an isolated message of s bytes (rank 0 posts it, rank 1 receives it and answers with one value;
`--reps` times per size, median) against the bytes-over-rate law

    t(s) = t0 + s / payload rate,    t0 = the median round trip of a one-value message

and reports per size the ratio t(s) / law. MIN_MESSAGE_BYTES (netem/facts.py) is the smallest
size from which every larger size measured is within `--tolerance` (2 %) of the law at every
rate measured. Needs Linux and root (network namespaces), like the emulated cluster.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = [4, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20]
PORT = 29611
STREAM = 8  # messages of a stream


def worker(rank: int, addr: str, sizes: list[int], reps: int) -> None:
    """One of the two ranks (run inside its node's namespace); rank 0 prints one JSON line:
    per size, the median time of an isolated message (an idle spell before it, then the message
    and a one-value answer) and of a stream of STREAM messages back to back (then the answer)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{PORT}", rank=rank, world_size=2)
    buf, ack = torch.zeros(max(sizes) // 4 + 1), torch.zeros(1)
    out = {}
    for s in sizes:
        msg = buf[:max(1, s // 4)]
        for mode, count in (("isolated", 1), ("stream", STREAM)):
            times = []
            for r in range(reps + 1):  # the first of each size and mode warms the path up, not timed
                dist.barrier()
                time.sleep(0.05)  # an idle spell, as between a step's phases
                t0 = time.perf_counter()
                if rank == 0:
                    for _ in range(count):
                        dist.send(msg, 1)
                    dist.recv(ack, 1)
                else:
                    for _ in range(count):
                        dist.recv(msg, 0)
                    dist.send(ack, 0)
                if r:
                    times.append(time.perf_counter() - t0)
            out.setdefault(mode, {})[s] = statistics.median(times)
    if rank == 0:
        print(json.dumps(out), flush=True)
    dist.destroy_process_group()


def measure(rate_mbit: float, sizes: list[int], reps: int, mtu: int, scale: int) -> dict:
    from stanza_core.netem.cluster import EmulatedCluster
    from stanza_core.netem.facts import payload_per_wire_byte

    with EmulatedCluster(nodes=2, rate_mbit=rate_mbit, mtu=mtu, payload_scale=scale) as cl:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        procs = []
        for i in range(2):
            argv = [sys.executable, __file__, "worker", str(i), cl.nodes[0].address, json.dumps(sizes), str(reps)]
            procs.append(cl.exec(i, argv, env={**env, "GLOO_SOCKET_IFNAME": cl.nodes[i].iface},
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=600) for p in procs]
        if any(p.returncode for p in procs):
            raise SystemExit(f"error: a rank failed: {[o[1][-500:] for o in outs]}")
    measured = json.loads(outs[0][0].strip().splitlines()[-1])
    payload_bps = rate_mbit * 1e6 * payload_per_wire_byte(mtu) / 8  # bytes per second
    t0 = measured["isolated"][str(min(sizes))]  # a one-value message and its answer: the round trip
    rows = []
    for s in sizes[1:]:
        iso, stream = measured["isolated"][str(s)], measured["stream"][str(s)]
        law = s / payload_bps
        rows.append({"bytes": s, "isolated_s": iso, "stream_s_per_message": (stream - t0) / STREAM, "law_s": law,
                     "isolated_ratio": (iso - t0) / law, "ratio": (stream - t0) / STREAM / law})
    return {"rate_mbit": rate_mbit, "mtu": mtu, "payload_scale": scale, "round_trip_s": t0, "rows": rows}


def floor_of(results: list[dict], tolerance: float) -> int | None:
    """The smallest size from which every larger size is within `tolerance` of the law at every rate."""
    sizes = sorted({r["bytes"] for res in results for r in res["rows"]})
    ok = {s: all(abs(r["ratio"] - 1) <= tolerance for res in results for r in res["rows"] if r["bytes"] == s)
          for s in sizes}
    floor = None
    for s in reversed(sizes):
        if not ok[s]:
            break
        floor = s
    return floor


def main(argv: list[str] | None = None) -> int:
    if argv and argv[0] == "worker":
        worker(int(argv[1]), argv[2], json.loads(argv[3]), int(argv[4]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", type=float, nargs="+", default=[62.5, 250.0], help="wire Mbit/s of the link")
    p.add_argument("--reps", type=int, default=7, help="timed messages per size")
    p.add_argument("--mtu", type=int, default=9000)
    p.add_argument("--payload-scale", type=int, default=16,
                   help="F the links' token buckets are set for (netem.cluster.scaled_burst_bytes)")
    p.add_argument("--tolerance", type=float, default=0.02)
    p.add_argument("--out", help="write the results JSON here")
    a = p.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    results = [measure(r, SIZES, a.reps, a.mtu, a.payload_scale) for r in a.rates]
    for res in results:
        print(f"{res['rate_mbit']:g} Mbit/s, F = {res['payload_scale']} (round trip {res['round_trip_s'] * 1e3:.2f} ms):")
        for r in res["rows"]:
            print(f"  {r['bytes']:>9} B  law {r['law_s'] * 1e3:8.2f} ms  stream {r['stream_s_per_message'] * 1e3:8.2f} ms "
                  f"(ratio {r['ratio']:.3f})  isolated, less the round trip: ratio {r['isolated_ratio']:.3f}")
    floor = floor_of(results, a.tolerance)
    print(f"min message bytes (every size from it within {a.tolerance:.0%} of the law): {floor}")
    if a.out:
        Path(a.out).write_text(json.dumps({"command": "python benchmarks/message_floor.py " + " ".join(argv or sys.argv[1:]),
                                           "started": started, "load_before": os.getloadavg(), "tolerance": a.tolerance,
                                           "min_message_bytes": floor, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
