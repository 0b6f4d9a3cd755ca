# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # T4 · Overlap: buckets during the backward, a pipeline on the FC worker
#
# *Course on layer separation, part 4 of 8. Before: T3 (the step in plain `torch.distributed`).
# Next: T5 (from bytes to seconds).*
#
# **The idea of this part.** T3's script does one thing at a time: a CONV worker computes its
# whole backward, *then* allreduces its gradients; the FC worker takes its CONV workers in rank
# order. The engine (`stanza_core/strategies/stanza/engine.py`) overlaps:
#
# * **Bucketed CONV allreduce.** Backward produces gradients last layer first. The engine groups
#   the CONV parameters into buckets (`--bucket-mb`, in reverse order) and launches a bucket's
#   allreduce the moment its last gradient exists, from inside the backward (a
#   `register_post_accumulate_grad_hook`). The network works while the CPU still computes.
# * **The FC worker's pipeline.** The FC worker posts one receive per CONV worker, processes the
#   activations in the order they *arrive*, and sends each activation gradient back at once, so
#   the first CONV worker starts its backward while the FC worker still works on the others.
#
# We see both in a timeline recorded by the engine itself: with `--timeline`, every rank writes
# the time of each send and receive it posts, each allreduce it launches and completes, and its
# compute phases into the metrics JSON (`ranks[i]["timeline"]`). The two timelines below are
# *measured* on this machine (loopback, shared CPU cores): read the order of events, not the
# milliseconds. The last figure is *modelled*: the same mechanism where the network is real.
#
# Runs in about a minute (two 4-process jobs); no root.

# %% tags=["parameters"]
nodes: int = 4  # N: processes; N - 1 CONV workers, 1 FC worker
global_batch: int = 24  # G: samples per step
model: str = "cifar_alexnet"  # zoo model (32x32 inputs)
small_bucket_mb: float = 0.5  # bucket size of the overlapped run (MiB)
steps: int = 3  # steps per run; the last one is drawn
model_of_model: str = "vgg16"  # zoo model of the modelled section (224x224 counts)
model_gbps: list[float] = [1.0, 2.5, 5.0, 10.0, 25.0, 100.0]  # link speeds of the modelled section
png: bool = True  # also export PNG figures (needs a Chromium)
out_dir: str = "../reproductions/out/tutorials/t4_overlap"  # where results.json and figures go

# %%
import plotly.graph_objects as go

import stanza_core.nbtools as nbt
from stanza_core.launch import run_job
from stanza_core.viz import step_timeline, timeline_intervals

common = dict(strategy="stanza", model=model, fc_workers=1, global_batch=global_batch, steps=steps,
              image_size=32, num_classes=10, device="cpu", timeline=True)
overlapped = run_job(nodes=nodes, bucket_mb=small_bucket_mb, **common)
print("ranks:", [(r["rank"], r["role"]) for r in overlapped["ranks"]])
print("CONV gradients allreduced per step by each CONV worker:", overlapped["ranks"][0]["sent"]["conv_grads"], "B")

# %% [markdown]
# ## The timeline of one step
#
# One pair of lanes per rank: *compute* (CONV body in blue, FC head in red) and *network*
# (receives as bars from when they are posted until the data is there; sends as ticks when
# posted; each allreduce bucket as a bar from launch to completion).
#
# **Predict first.** On a CONV worker, where does the first CONV allreduce bar start: after the
# backward bar, or inside it? On the FC worker, in which order are the CONV workers served?

# %%
fig = step_timeline(overlapped)
fig

# %% [markdown]
# **What the figure says.** On every CONV worker the first allreduce bars start *inside* the
# backward bar: buckets leave as soon as their gradients are final. The FC worker's compute lane
# has one red block per CONV worker, each followed at once by a send tick (the activation
# gradient going back): the CONV worker served first starts its backward while the FC worker
# still computes for the others. Long receive bars on the FC worker are its CONV workers'
# forward passes: the FC worker waits for them.

# %% [markdown]
# ## The same run with one big bucket
#
# With `--bucket-mb 25` (larger than all CONV gradients) there is a single bucket: it can only
# leave when the whole backward is done. Compare how long each CONV worker waits after its
# backward for its allreduce to complete.

# %%
one_bucket = run_job(nodes=nodes, bucket_mb=25.0, **common)


def exposed_ms(metrics, step):
    """Per CONV worker: ms from the end of its backward to the end of its last allreduce."""
    out = {}
    for r in metrics["ranks"]:
        if r["role"] != "conv_worker":
            continue
        bars = timeline_intervals(r, step)
        backward_end = max(b["end"] for b in bars if b["what"] == "backward")
        allreduce_end = max(b["end"] for b in bars if b["what"] == "allreduce")
        buckets = sum(1 for b in bars if b["what"] == "allreduce")
        out[r["rank"]] = {"exposed_ms": max(allreduce_end - backward_end, 0.0) * 1e3, "buckets": buckets}
    return out


last = steps - 1
small, big = exposed_ms(overlapped, last), exposed_ms(one_bucket, last)
for rank in small:
    print(f"CONV worker {rank}: {small[rank]['buckets']} buckets -> allreduce ends "
          f"{small[rank]['exposed_ms']:.1f} ms after backward | 1 bucket -> {big[rank]['exposed_ms']:.1f} ms")

# %%
fig_one = step_timeline(one_bucket)
fig_one.update_layout(title="The same step with one bucket (--bucket-mb 25), measured: the allreduce starts after the backward")
fig_one

# %% [markdown]
# On a two-core laptop the difference is small and noisy: four processes share two cores, so
# "overlap" also means "compete for the CPU", and loopback "transfers" are CPU work too. The two
# figures above are *measured* on this machine. On real nodes the network is a separate piece of
# hardware: the buckets' head start is time saved in every step. The next figure shows it with
# the performance model of T5.

# %% [markdown]
# ## Where overlap shows: the model's timeline (modelled, not measured)
#
# `stanza_core.perf.model.bucketed_backward` replays a backward layer by layer (each layer's
# share of the backward time, last layer first) and launches each bucket's ring allreduce once
# its last gradient exists, one bucket at a time on the link. Here: VGG-16's CONV body on 16
# V100-class nodes (15 CONV workers, 32 samples each; compute times from the device table), 25
# MiB buckets against one bucket, over a range of link speeds. The overlap pays most where the
# allreduce takes about as long as the backward.

# %%
from stanza_core import perf
from stanza_core.perf import device_profile
from stanza_core.perf.model import bucketed_backward, layer_shares

vgg = perf.named_profile(model_of_model, batch_size=32)
bwd_s = device_profile("v100", vgg).profile.time_s("conv", "bwd", 32)
units = [(p, share * bwd_s) for _, p, share in layer_shares(vgg, "conv")][::-1]  # backward order
modelled = []
for gbps in model_gbps:
    cl = perf.Cluster(16, gbps, device="v100")
    row = {"gbps": gbps, "backward_ms": bwd_s * 1e3}
    for label, cap in (("buckets", int(25 * 2**20)), ("one_bucket", 2**40)):
        bwd_end, ar_end, _, n_buckets = bucketed_backward(units, cl, 15, cap, False)
        row[label] = {"exposed_ms": (ar_end - bwd_end) * 1e3, "buckets": n_buckets}
    modelled.append(row)
    print(f"{gbps:5g} Gb/s: allreduce ends {row['buckets']['exposed_ms']:6.1f} ms after the backward with "
          f"{row['buckets']['buckets']} buckets, {row['one_bucket']['exposed_ms']:6.1f} ms with one")

# %%
fig_model = go.Figure()
for label, name in (("one_bucket", "one bucket"), ("buckets", "25 MiB buckets")):
    fig_model.add_scatter(x=[r["gbps"] for r in modelled], y=[r[label]["exposed_ms"] for r in modelled],
                          mode="lines+markers", name=name)
fig_model.update_layout(title=f"Modelled: CONV allreduce time left after the backward ({model_of_model}, "
                              "16 V100-class nodes, 32 samples each)", xaxis_type="log",
                        xaxis_title="link bandwidth, Gb/s", yaxis_title="ms after the backward ends", height=420)
fig_model

# %% [markdown]
# **What the figure says** (modelled): with buckets the allreduce ends earlier than with one
# bucket, by about 56 ms at 10 Gb/s (less than half of the backward, whose time the cell above
# prints: the last bucket, holding the first layers' gradients, can only leave when the
# backward ends); at slow links the transfer
# dominates both, at fast ones there is little left to hide. The measured runs above sit far
# from that regime: four processes on two cores, where the "network" is the same CPU.

# %%
results = {"nodes": nodes, "global_batch": global_batch, "model": model, "small_bucket_mb": small_bucket_mb,
           "step": last, "small_buckets": small, "one_bucket": big, "modelled": modelled,
           "intervals": {str(r["rank"]): timeline_intervals(r, last) for r in overlapped["ranks"]}}
nbt.write_results(results, out_dir)
written = nbt.save_figures({"timeline": fig, "timeline_one_bucket": fig_one, "modelled_overlap": fig_model},
                           out_dir, png=png)

# %% [markdown]
# ## Exercises
#
# Graded lab: `reproductions/out/course/release/lab4/lab4.ipynb`, the student release that
# `make course` builds at the repository root (the exercises without their solutions; nbgrader
# grades what you hand in, see `docs/course.md`).
#
# 1. `hidden_fraction(bars)`: the share of a CONV worker's allreduce time that lies inside its
#    backward. What is it with one bucket? (Try it on this notebook's `results.json`.)
# 2. `pipeline_order(metrics, step)`: the order in which the FC worker processed its CONV
#    workers. Is it always rank order?
# 3. `bucket_count(model, bucket_mb)`: how many buckets `GradBuckets` makes for a CONV body.
