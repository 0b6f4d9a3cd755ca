# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # T8 · GPU against CPU: launch-bound steps, and where overlap shows
#
# *Course on layer separation, part 8 of 8. Before: T4 (overlap, measured on two CPU cores and
# modelled), T5 (the performance model), T7 (failure modes).*
#
# No GPU is needed: the GPU figures are *measured* on one NVIDIA H200 and shipped with the
# package (`stanza_core/perf/records/h200/*.json`, how they were taken in `SOURCE.md` beside
# them), or *modelled* from those records. Every figure says which.
#
# **Learning goals.** After this part a student can:
# 1. read a step time against the batch and tell a launch-bound step (flat: a fixed cost per
#    kernel) from a compute-bound one (proportional to the batch), and fit the two terms;
# 2. explain why AlexNet's H200 step hardly changes from batch 16 to 32: below about 40 samples
#    the host takes longer to issue its ~110 forward and backward operations (~28 µs each) than
#    the GPU takes to run them;
# 3. explain why bucketed overlap shows on a GPU cluster and hardly on two CPU cores: what
#    matters is the allreduce time of a bucket against the backward time that follows it.
#
# Runs in a minute or two on a laptop CPU (64 CPU seconds on the shared 2-core development
# machine: one 3-process job; the rest reads JSON); no root.

# %% tags=["parameters"]
batches: list[int] = [16, 32, 64, 128]  # the batches of the H200 records
model_gbps: list[float] = [10.0, 100.0]  # link speeds of the modelled GPU cluster
gpu_nodes: int = 8  # nodes of the modelled GPU cluster (all CONV workers: the CONV allreduce)
cpu_nodes: int = 3  # processes of the measured CPU run (N - 1 CONV workers)
png: bool = True  # also export PNG figures (needs a Chromium)
out_dir: str = "../reproductions/out/tutorials/t8_gpu_vs_cpu"  # where results.json and figures go

# %%
import json

import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import stanza_core.nbtools as nbt
from stanza_core import get_model, perf
from stanza_core.launch import run_job
from stanza_core.perf.model import bucketed_backward, layer_shares
from stanza_core.perf.records import RECORDS_DIR
from stanza_core.perf import device_profile
from stanza_core.viz import timeline_intervals

# %% [markdown]
# ## 1. A step against the batch: AlexNet and VGG-16 on an H200
#
# Each record holds `plain_fwd_bwd_s`: the median time of forward + loss + backward of the whole
# model, no hooks, CUDA events around it (measured). Beside it, the same step as the project's
# device resolver gives it: `h200-measured` (the per-layer records, scaled to the plain step;
# between measured batches it interpolates) and `h200` (the compute model's table row, fitted to
# these same 24 plain H200 steps and a few other points, `docs/performance-model.md`; so its
# agreement here is a fit, not a validation: its held-out test, leaving one model out of the
# fit, is in that document).

# %%
measured, rows = {}, {}
for name in ("alexnet", "vgg16"):
    measured[name] = [json.loads((RECORDS_DIR / "h200" / f"{name}-b{b}-tf32.json").read_text())["plain_fwd_bwd_s"]
                      for b in batches]
    for dev in ("h200-measured", "h200"):
        rows[name, dev] = [device_profile(dev, perf.named_profile(name, batch_size=b), b).profile.step_compute_s(b)
                           for b in batches]
    print(f"{name}: measured fwd+bwd ms at batch {batches}: " + ", ".join(f"{t * 1e3:.2f}" for t in measured[name]))
    for dev in ("h200-measured", "h200"):
        print(f"   {dev:14s} " + ", ".join(f"{t * 1e3:.2f}" for t in rows[name, dev]))

fig_batch = go.Figure()
for name in ("alexnet", "vgg16"):
    fig_batch.add_scatter(x=batches, y=[t * 1e3 for t in measured[name]], mode="lines+markers",
                          name=f"{name}: measured (H200 record, plain step)")
    fig_batch.add_scatter(x=batches, y=[t * 1e3 for t in rows[name, "h200"]], mode="lines", line_dash="dot",
                          name=f"{name}: modelled (h200 row, fitted to these records)")
fig_batch.update_layout(title="Forward + backward on one H200, TF32: measured records and the fitted model",
                        xaxis_type="log", yaxis_type="log", xaxis_title="batch", yaxis_title="ms", height=430)
fig_batch

# %% [markdown]
# **Two shapes.** VGG-16 doubles its time with the batch from 32 on: compute-bound, the GPU is
# busy with arithmetic. AlexNet's time does not move from 16 to 32 (it even drops a little, within
# the noise), then grows: below some batch its step has a floor that does not depend on the work.
#
# A step time T(b) = t0 + b c has a fixed part t0 and a per-sample part c. Fit them on two
# batches where the step grows (64 and 128), and compare the fit with what was measured at 16
# and 32:

# %%
fit = {}
for name in ("alexnet", "vgg16"):
    (b1, t1), (b2, t2) = (batches[-2], measured[name][-2]), (batches[-1], measured[name][-1])
    c = (t2 - t1) / (b2 - b1)
    t0 = t1 - b1 * c
    fit[name] = {"fixed_s": t0, "per_sample_s": c,
                 "floor_excess": {b: measured[name][i] / (t0 + b * c) for i, b in enumerate(batches[:2])},
                 "half_fixed_batch": t0 / c,  # below it the line's fixed part is over half the step
                 "line_meets_floor": (measured[name][0] - t0) / c}  # where the line reaches the smallest batch's time
    print(f"{name}: t0 = {t0 * 1e3:.2f} ms, c = {c * 1e6:.1f} µs per sample; measured / fitted at batch "
          f"{batches[0]}, {batches[1]}: " + ", ".join(f"{v:.2f}" for v in fit[name]["floor_excess"].values())
          + f"; the fixed part is half the line's step at batch {t0 / c:.1f}")
print(f"alexnet: the line reaches the {measured['alexnet'][0] * 1e3:.2f} ms measured at batch {batches[0]} "
      f"at batch {fit['alexnet']['line_meets_floor']:.0f}")
assert fit["alexnet"]["floor_excess"][16] > 1.3  # AlexNet: the line misses the small batches by far
assert abs(fit["vgg16"]["floor_excess"][32] - 1) < 0.1  # VGG-16: the line holds down to 32
assert 16 < fit["alexnet"]["half_fixed_batch"] < 32  # by the line's own rule: launch-bound at 16, not at 32

# %% [markdown]
# **Two ways to read "launch-bound".** The line T(b) = t0 + b c describes the GPU's work, fitted
# where the GPU is busy. Its fixed part is more than half of it below b = t0 / c (lab 8's
# rule): for AlexNet that is batch 19, for VGG-16 batch 4.7 (printed above). By the line alone,
# AlexNet is launch-bound at 16 and not at 32, where t0 is 37 % of the 2.7 ms the line gives.
# But the measured steps at 16 and 32 lie *above* the line (1.7x and 1.13x): something other than
# the GPU's work sets them. That is the host, which must issue every operation before the GPU
# can run it; a step takes the longer of the two, T(b) ≈ max(host time, t0 + b c). The host's
# time does not depend on the batch; the line reaches the ~3.1 ms measured at batch 16 at about
# batch 41. So at 16 both readings agree (host-bound, and t0 over half the line), at 32 AlexNet
# is at the edge (still on the host's floor, by 13 %, though t0 is under half the line), and
# from 64 on the GPU's work sets the step. Section 2 measures the host's side of the floor.

# %% [markdown]
# ## 2. The host's floor: operations x host time per operation
#
# In eager PyTorch every operation (a convolution, a ReLU, each gradient) is dispatched on the
# host CPU and, unless it only reshapes a view, launched as one or more GPU kernels. The
# forward's operations are issued from Python; the backward's by the autograd engine, in C++,
# walking the graph the forward recorded. If the GPU finishes each kernel before the host has
# issued the next, the step takes (operations) x (host time per operation), whatever the batch.
# We count AlexNet's operations with a `TorchDispatchMode` that counts every aten call (views
# included: an upper bound on the kernel count, a fair count of the host's dispatches), apart
# for forward + loss + backward and for the optimizer. The forward and backward dispatch the
# same calls on a GPU and at any batch. The optimizer does not: on CPU tensors `torch.optim.SGD`
# loops over the parameters (a few calls each), on CUDA tensors it defaults to its `foreach`
# implementation, a few calls for all parameters at once. Both are counted.


# %%
class CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def count_ops(fn):
    """aten calls dispatched while fn() runs."""
    counter = CountOps()
    with counter:
        fn()
    return counter.n


torch.manual_seed(0)
net = get_model("alexnet", 1000)
x, y = torch.randn(2, 3, 64, 64), torch.randint(1000, (2,))
ops_sgd = {}
for impl, foreach in (("for_loop", False), ("foreach", True)):
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, foreach=foreach)
    for _ in range(2):  # the second step: momentum buffers exist
        ops_zero = count_ops(opt.zero_grad)
        ops_fwd_bwd = count_ops(lambda: F.cross_entropy(net(x), y).backward())
        ops_sgd[impl] = count_ops(opt.step)
ops = ops_zero + ops_fwd_bwd + ops_sgd["for_loop"]  # one training step as the CPU runs it
floor_s = measured["alexnet"][0]  # forward + backward at the smallest batch: on the host's floor
us_per_op = floor_s / ops_fwd_bwd * 1e6
step_s = json.loads((RECORDS_DIR / "h200" / "alexnet-b32-tf32.json").read_text())["plain_step_s"]
prof = perf.named_profile("alexnet", batch_size=32)
flop = 3 * (prof.conv.flops + prof.fc.flops) * 32  # forward + backward ~ 3 x forward FLOPs
print(f"aten calls: forward + loss + backward {ops_fwd_bwd}; zero_grad {ops_zero}; SGD step {ops_sgd['for_loop']} "
      f"(per-parameter loop, the CPU's default) or {ops_sgd['foreach']} (foreach, the CUDA default)")
print(f"measured H200 forward + backward at batch {batches[0]}: {floor_s * 1e3:.2f} ms -> {us_per_op:.0f} µs per call")
print(f"arithmetic: {flop / 1e9:.0f} GFLOP per step; at the measured step time that is {flop / step_s / 1e12:.0f} TFLOP/s")
assert 100 < ops_fwd_bwd < 130 and ops_sgd["foreach"] * 5 < ops_sgd["for_loop"]

# %% [markdown]
# About 110 calls in forward and backward, and 3.1 ms measured at batch 16, where the step is on
# the host's floor: ~28 µs per call. That is an upper bound on the host's time per call (a step
# cannot end before its last kernel is issued) and of the order eager PyTorch takes: Python and
# the dispatcher for each forward call, the autograd engine's bookkeeping for each backward one,
# a few µs of `cudaLaunchKernel` per kernel, and cuDNN's and the memory allocator's host work
# around the convolutions. The optimizer's step is not in that count: on the H200 SGD runs its
# foreach implementation, a handful of calls. The arithmetic, some 140 GFLOP at batch 32 (forward
# FLOPs from `torch.utils.flop_counter`, 2 per multiply-add, x 3 for the backward), would take
# well under a millisecond at the H200's dense TF32 rate (hundreds of TFLOP/s); the measured step
# runs it at ~40 TFLOP/s. Remedies attack the number of calls or the host's time per call, not
# the FLOPs: CUDA graphs (the whole step replayed by one launch), `torch.compile` (fewer, fused
# kernels), `fused=True` for the optimizer. The engine's own step adds host work of its own
# (SOURCE.md: AlexNet 7.2 ms in the engine against 3.6-3.8 ms plain, VGG-16 26.7 against 26.5):
# a short GPU step cannot hide it. On a CPU no such floor appears: each operation's arithmetic
# takes milliseconds, the dispatch microseconds.

# %% [markdown]
# ## 3. Where overlap shows: compute against communication per bucket
#
# Bucketed allreduce (T4) hides a bucket's transfer behind the backward of the layers before it.
# It can hide at most the backward time left after the bucket is ready, and it has something to
# hide only if the transfer is not negligible. So what matters is the ratio of allreduce time to
# backward time.
#
# **Measured, 2 CPU cores.** A 3-process stanza run (2 CONV workers, `cifar_alexnet`, 0.5 MiB
# buckets) with the engine's timeline: the allreduce of each CONV worker against its backward.

# %%
cpu = run_job(nodes=cpu_nodes, strategy="stanza", model="cifar_alexnet", fc_workers=1, global_batch=16, steps=3,
              image_size=32, num_classes=10, device="cpu", timeline=True, bucket_mb=0.5)
conv = [r for r in cpu["ranks"] if r["role"] == "conv_worker"]
bars = {r["rank"]: timeline_intervals(r, 2) for r in conv}  # the last step
backward = {k: next(b for b in v if b["what"] == "backward") for k, v in bars.items()}
allreduces = {k: [b for b in v if b["what"] == "allreduce"] for k, v in bars.items()}
# A bucket's allreduce bar runs from a rank's launch to completion, so it includes the wait for
# the other ranks to launch theirs; the rank that launches LAST sees the transfer alone. Per
# bucket, the shortest bar over the CONV workers is the transfer time.
transfer_s = sum(min(b["end"] - b["start"] for b in col) for col in zip(*allreduces.values()))
cpu_row = {"backward_ms": sum(b["end"] - b["start"] for b in backward.values()) / len(backward) * 1e3,
           "allreduce_ms": transfer_s * 1e3, "buckets": len(next(iter(allreduces.values()))),
           "exposed_ms": min(max(0.0, max(b["end"] for b in allreduces[k]) - backward[k]["end"]) for k in bars) * 1e3}
print(f"measured CPU ({len(conv)} CONV workers): backward {cpu_row['backward_ms']:.1f} ms (mean), {cpu_row['buckets']} "
      f"buckets whose transfers take {cpu_row['allreduce_ms']:.1f} ms in all; the allreduce ends "
      f"{cpu_row['exposed_ms']:.1f} ms after the backward (the earliest CONV worker)")
assert cpu_row["buckets"] > 1

# %% [markdown]
# **Modelled, H200s.** `perf.model.bucketed_backward` with VGG-16's backward from the H200
# records (`h200-measured`, batch 32 per worker; each layer's share of it by FLOPs) and the ring
# allreduce of T5, on `gpu_nodes` data workers, 25 MiB buckets against one bucket.

# %%
vgg = perf.named_profile("vgg16", batch_size=32)
h200 = device_profile("h200-measured", vgg, 32)
bwd_s = h200.profile.time_s("conv", "bwd", 32)
units = [(p, share * bwd_s) for _, p, share in layer_shares(vgg, "conv")][::-1]  # backward order
gpu_rows = []
for gbps in model_gbps:
    cl = perf.Cluster(gpu_nodes, gbps)
    row = {"gbps": gbps, "backward_ms": bwd_s * 1e3}
    for label, cap in (("buckets", int(25 * 2**20)), ("one_bucket", 2**40)):
        bwd_end, ar_end, busy, n_buckets = bucketed_backward(units, cl, gpu_nodes, cap, False)
        row[label] = {"exposed_ms": (ar_end - bwd_end) * 1e3, "allreduce_ms": busy * 1e3, "buckets": n_buckets}
    gpu_rows.append(row)
    assert row["buckets"]["exposed_ms"] <= row["one_bucket"]["exposed_ms"]
    print(f"modelled H200 x {gpu_nodes}, {gbps:g} Gb/s: backward {bwd_s * 1e3:.1f} ms ({h200.caption.split(' (')[0]}), "
          f"allreduce {row['buckets']['allreduce_ms']:.1f} ms; after the backward: {row['buckets']['exposed_ms']:.1f} ms "
          f"with {row['buckets']['buckets']} buckets, {row['one_bucket']['exposed_ms']:.1f} ms with one")

# %%
fig_overlap = go.Figure()
labels = ["2 CPU cores (measured)"] + [f"H200, {r['gbps']:g} Gb/s (modelled)" for r in gpu_rows]
fig_overlap.add_bar(x=labels, y=[cpu_row["backward_ms"]] + [r["backward_ms"] for r in gpu_rows], name="backward")
fig_overlap.add_bar(x=labels, y=[cpu_row["allreduce_ms"]] + [r["buckets"]["allreduce_ms"] for r in gpu_rows],
                    name="allreduce transfers (sum over buckets)")
fig_overlap.add_bar(x=labels, y=[cpu_row["exposed_ms"]] + [r["buckets"]["exposed_ms"] for r in gpu_rows],
                    name="allreduce left after the backward (buckets)")
fig_overlap.add_bar(x=labels, y=[None] + [r["one_bucket"]["exposed_ms"] for r in gpu_rows],
                    name="... with one bucket (modelled)")
fig_overlap.update_layout(title="Backward against allreduce: cifar_alexnet on 2 shared CPU cores (measured) and "
                                f"VGG-16 on {gpu_nodes} H200s (modelled, h200-measured compute)",
                          yaxis_title="ms per step", yaxis_type="log", barmode="group", height=460)
fig_overlap

# %% [markdown]
# **What the figure says.** On the H200s the backward is short (16 ms) and the allreduce of
# 59 MB of CONV gradients is of the same order or longer: at 10 Gb/s the transfer dominates and
# buckets hide the share of it that fits under the backward; at 100 Gb/s the two are comparable
# and buckets hide more than half of what one bucket leaves exposed. On two CPU cores the backward of even
# a small model takes several times longer than its allreduce over loopback (a memory copy), so
# there is little to hide; and the "network" is the same two cores, so a transfer during the backward
# also takes CPU time from it. Overlap saves at most min(allreduce, backward after the first
# bucket): it shows where the two are comparable, which is a GPU cluster's regime, not a
# laptop's.

# %%
results = {"batches": batches, "measured_fwd_bwd_s": measured, "fit": fit, "ops_per_step": ops,
           "ops_fwd_bwd": ops_fwd_bwd, "ops_sgd": ops_sgd, "alexnet_step_s": step_s, "us_per_op": us_per_op,
           "resolver": {f"{n}|{d}": v for (n, d), v in rows.items()}, "cpu": cpu_row, "gpu_modelled": gpu_rows}
nbt.write_results(results, out_dir)
written = nbt.save_figures({"step_vs_batch": fig_batch, "overlap_cpu_gpu": fig_overlap}, out_dir, png=png)

# %% [markdown]
# ## Exercises
#
# Graded lab: `reproductions/out/course/release/lab8/lab8.ipynb`, the student release that
# `make course` builds at the repository root (the exercises without their solutions; nbgrader
# grades what you hand in, see `docs/course.md`).
#
# 1. `fixed_and_per_sample(b1, t1, b2, t2)`: the two terms of T(b) = t0 + b c from two
#    measurements; apply it to AlexNet's and VGG-16's H200 records.
# 2. `launch_bound_batch(t0, c)`: below which batch is more than half of the step fixed cost?
# 3. `exposed_after_backward(ready_s, comm_s, backward_s)`: a bucket schedule on one link, as
#    `bucketed_backward` runs it: how long the allreduce lasts after the backward.
