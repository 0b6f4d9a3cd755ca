"""Two failure modes in plain torch.distributed (gloo over loopback), for tutorial T7.

    torchrun --standalone --nproc-per-node 2 t7_failure_lab.py deadlock --timeout-s 3 --out DIR
    torchrun --standalone --nproc-per-node 3 t7_failure_lab.py straggler --delay-s 0.2 --out DIR

deadlock   Two ranks exchange one tensor. `--order swapped`: both call `dist.send` first, then
           `dist.recv`. Under gloo a send waits until its receive is posted (T3), so each rank
           waits for the other and neither posts its receive: nothing moves until the process
           group's timeout fires. Each rank writes the one-line error it got and when.
           `--order right`: rank 0 sends then receives, rank 1 receives then sends: it completes.
straggler  BSP steps of `--compute-s` of sleep ("compute") then an allreduce of `--numel` floats;
           rank `--slow-rank` sleeps `--delay-s` longer. Each rank writes, per step, its compute
           time and how long it waited in the allreduce: the fast ranks wait for the slow one.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


def deadlock(rank: int, order: str) -> dict:
    mine, theirs = torch.full((4,), float(rank)), torch.empty(4)
    peer = 1 - rank
    t0 = time.perf_counter()
    try:
        if order == "swapped" or rank == 0:  # swapped: both send first; right: rank 0 sends first
            dist.send(mine, peer)
            dist.recv(theirs, peer)
        else:
            dist.recv(theirs, peer)
            dist.send(mine, peer)
        return {"ok": True, "waited_s": time.perf_counter() - t0, "got": theirs.tolist()}
    except RuntimeError as e:
        first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        return {"ok": False, "waited_s": time.perf_counter() - t0, "error": first}


def straggler(rank: int, steps: int, compute_s: float, delay_s: float, slow_rank: int, numel: int) -> dict:
    grad = torch.ones(numel)
    rows = []
    dist.barrier()
    for _ in range(steps):
        t0 = time.perf_counter()
        time.sleep(compute_s + (delay_s if rank == slow_rank else 0.0))  # this rank's "forward + backward"
        t1 = time.perf_counter()
        dist.all_reduce(grad)  # BSP: nobody steps before everybody's gradient is in
        t2 = time.perf_counter()
        rows.append({"compute_s": t1 - t0, "allreduce_s": t2 - t1, "step_s": t2 - t0})
    return {"steps": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["deadlock", "straggler"])
    ap.add_argument("--order", choices=["swapped", "right"], default="swapped")
    ap.add_argument("--timeout-s", type=float, default=3.0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--compute-s", type=float, default=0.05)
    ap.add_argument("--delay-s", type=float, default=0.0)
    ap.add_argument("--slow-rank", type=int, default=0)
    ap.add_argument("--numel", type=int, default=1 << 16)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rank = int(os.environ["RANK"])  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    # the timeout applies to every collective and every point-to-point wait of this group
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout_s))
    if a.mode == "deadlock":
        result = deadlock(rank, a.order)
    else:
        result = straggler(rank, a.steps, a.compute_s, a.delay_s, a.slow_rank, a.numel)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps({"rank": rank, **result}))
    if a.mode == "straggler" or result["ok"]:
        dist.destroy_process_group()  # a timed-out group is not torn down collectively
    else:
        # Stay until every rank has its own timeout on record: a rank that left early would close
        # its sockets, and a slower peer would then report "connection closed", not the deadlock.
        deadline = time.monotonic() + 4 * a.timeout_s + 10
        world = int(os.environ["WORLD_SIZE"])
        while time.monotonic() < deadline and not all((out / f"rank{r}.json").exists() for r in range(world)):
            time.sleep(0.05)


if __name__ == "__main__":
    main()
