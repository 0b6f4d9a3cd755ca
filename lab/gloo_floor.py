"""The network's own floor under a replayed ddp step: a plain gloo allreduce of VGG-16's gradients.

    torchrun --standalone --nproc-per-node 4 lab/gloo_floor.py [--params 138357544] [--bucket-mb 25]

The same bytes as DDP's buckets of VGG-16 (1000 classes: 138,357,544 float32 values, 553 MB) in
--bucket-mb buckets, allreduced asynchronously over gloo by the ranks of this job, 5 times; rank 0
prints each time and the median after the first. Replay keeps every byte crossing for real, so a
replayed ddp step cannot take less than this on the same machine (lab/LOG.md, replay engine
seconds). Measured, never modelled.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--params", type=int, default=138_357_544)
ap.add_argument("--bucket-mb", type=float, default=25.0)
a = ap.parse_args()
dist.init_process_group("gloo")
bucket = int(a.bucket_mb * 2**20) // 4
bufs = [torch.empty(min(bucket, a.params - i)) for i in range(0, a.params, bucket)]
times = []
for _ in range(5):
    dist.barrier()
    t0 = time.perf_counter()
    for w in [dist.all_reduce(b, async_op=True) for b in bufs]:
        w.wait()
    times.append(time.perf_counter() - t0)
if dist.get_rank() == 0:
    print(f"{len(bufs)} buckets, {a.params * 4 / 1e6:.0f} MB over {dist.get_world_size()} ranks: "
          f"{[round(t, 3) for t in times]} s; median after the first {statistics.median(times[1:]):.3f} s")
dist.destroy_process_group()
