"""Point-to-point latency on the emulated cluster without the engine: N - 1 senders to one receiver.

    python lab/p2p_incast.py --nodes 4 --link-mbit 125 --out benchmarks/results/p2p_incast.json

The message pattern of stanza k = 1's activations, in plain torch.distributed (gloo) on a
fresh emulated cluster (netem: the same shaped links as a training run; needs root): every
sender posts one message of --bytes (float32) and one of the labels (--batch int64) to the last
rank on its own two-rank process group (as the engine's pair groups), then waits for a reply
of --bytes on that group; the receiver waits for each sender's pair of messages in its own thread
(as `comm.as_completed`), and answers each sender in arrival order after --reply-ms (the FC
worker's chunk). Waits carry a timeout, as the engine's. Senders post at the same moment
("together") or 15 ms apart ("staggered"), after sleeping until then ("sleep", as replayed
compute) or spinning the CPU ("busy", as real compute). Latency: a sender's post to the
receiver's wait returning, on the host clock every process of the machine shares; the first
repetition of each mode is left out. Compare with the engine's timeline
(`benchmarks/message_latency.py`).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import threading
import time

MODES = ("together-sleep", "staggered-sleep", "together-busy", "staggered-busy")
STAGGER_S = 0.015


def rank_program(reps: int, nbytes: int, batch: int, reply_s: float, modes: list[str], out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    last, timeout = world - 1, datetime.timedelta(seconds=120)
    msg, labels = torch.zeros(nbytes // 4), torch.zeros(batch, dtype=torch.int64)
    pairs = [dist.new_group([s, last]) for s in range(last)]  # every rank makes every group, in order
    if rank < last:
        dist.all_reduce(torch.zeros(1), group=pairs[rank])  # warm each pair's connection up
    else:
        for g in pairs:
            dist.all_reduce(torch.zeros(1), group=g)
    rows = []
    for mode in modes:
        for rep in range(reps):
            t0 = torch.tensor([time.perf_counter() + 0.05], dtype=torch.float64)
            dist.broadcast(t0, 0)
            t0 = float(t0)
            if rank == last:
                bufs = [(torch.empty_like(msg), torch.empty_like(labels)) for _ in range(last)]
                works = [[dist.irecv(a, s, group=pairs[s], tag=1), dist.irecv(b, s, group=pairs[s], tag=2)]
                         for s, (a, b) in enumerate(bufs)]
                arrived, order, cv = [None] * last, [], threading.Condition()

                def wait(i):
                    for w in works[i]:
                        w.wait(timeout)
                    with cv:
                        arrived[i] = time.perf_counter()
                        order.append(i)
                        cv.notify()

                threads = [threading.Thread(target=wait, args=(i,)) for i in range(last)]
                for t in threads:
                    t.start()
                replies = []
                for k in range(last):  # answer in arrival order, each after its chunk's time
                    with cv:
                        cv.wait_for(lambda: len(order) > k)
                        i = order[k]
                    time.sleep(reply_s)
                    replies.append(dist.isend(msg, i, group=pairs[i], tag=3))
                for w in replies:
                    w.wait(timeout)
                for t in threads:
                    t.join()
                mine = arrived
            else:
                when = t0 + (STAGGER_S * rank if mode.startswith("staggered") else 0.0)
                if mode.endswith("busy"):
                    while time.perf_counter() < when:
                        pass
                else:
                    time.sleep(max(0.0, when - time.perf_counter()))
                posted = time.perf_counter()
                sends = [dist.isend(msg, last, group=pairs[rank], tag=1),
                         dist.isend(labels, last, group=pairs[rank], tag=2)]
                back = torch.empty_like(msg)
                dist.irecv(back, last, group=pairs[rank], tag=3).wait(timeout)
                for w in sends:
                    w.wait(timeout)
                mine = [posted]
            everyone = [None] * world  # each sender's post time, the receiver's arrival times
            dist.all_gather_object(everyone, mine)
            if rank == 0:
                rows.append({"mode": mode, "repeat": rep,
                             "latency_s": [everyone[last][i] - everyone[i][0] for i in range(last)]})
            dist.barrier()
    if rank == 0:
        from stanza_core import atomic

        atomic.write_text(out, json.dumps(rows))
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--link-mbit", type=float, default=125.0)
    ap.add_argument("--mtu", type=int, default=9000)
    ap.add_argument("--bytes", type=int, default=24 * 1536 * 4,
                    help="message size (default: cifar_alexnet's activations at 32 px, 24 samples x 1536 floats)")
    ap.add_argument("--batch", type=int, default=24, help="labels sent beside each message")
    ap.add_argument("--reply-ms", type=float, default=9.0)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--modes", default=",".join(MODES), help=f"some of {', '.join(MODES)}")
    ap.add_argument("--out", default=None)
    ap.add_argument("--rank-program", default=None, help=argparse.SUPPRESS)  # what each node runs
    a = ap.parse_args(argv)
    modes = a.modes.split(",")
    if any(m not in MODES for m in modes):
        ap.error(f"--modes {a.modes}: expected some of {', '.join(MODES)}")
    if a.rank_program:
        rank_program(a.reps, a.bytes, a.batch, a.reply_ms / 1e3, modes, a.rank_program)
        return 0
    if a.nodes < 2:
        ap.error(f"--nodes {a.nodes}: need at least 2 (senders and one receiver)")
    from stanza_core.netem.cluster import EmulatedCluster
    from stanza_core.netem.launch import launch

    with tempfile.TemporaryDirectory(prefix="p2p-incast-") as tmp:
        rows_path = os.path.join(tmp, "rows.json")
        entry = [os.path.abspath(__file__), "--bytes", str(a.bytes), "--batch", str(a.batch),
                 "--reply-ms", str(a.reply_ms), "--reps", str(a.reps), "--modes", a.modes, "--rank-program", rows_path]
        with EmulatedCluster(a.nodes, a.link_mbit, 0.0, mtu=a.mtu) as cl:
            launch(cl, entry, timeout_s=600, log_dir=os.path.join(tmp, "logs"))
        with open(rows_path) as fh:
            rows = json.load(fh)
    print(f"{a.nodes - 1} senders -> 1 receiver, {a.bytes} B + {a.batch} labels each, links {a.link_mbit:g} Mbit/s "
          f"(MTU {a.mtu}), {a.reps} repetitions per mode (the first left out)")
    print("| mode | messages | latency median (ms) | min | max |")
    print("|---|---|---|---|---|")
    table = []
    for mode in modes:
        v = [x * 1e3 for r in rows if r["mode"] == mode and r["repeat"] > 0 for x in r["latency_s"]]
        table.append({"mode": mode, "messages": len(v), "median_ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v)})
        print(f"| {mode} | {len(v)} | {statistics.median(v):.1f} | {min(v):.1f} | {max(v):.1f} |")
    if a.out:
        from stanza_core import atomic

        atomic.write_text(a.out, json.dumps({"args": {k: v for k, v in vars(a).items() if k != "rank_program"},
                                             "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %z"), "table": table,
                                             "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
