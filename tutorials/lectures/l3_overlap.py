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

# %% [markdown] slideshow={"slide_type": "slide"}
# # Lecture 3 · Overlap: buckets during the backward, a pipeline on the FC worker
#
# *Slides of lecture 3 (docs/course.md; tutorials T4 and T8, lab 4). Rendered with nbconvert's
# reveal.js slides into the gallery by `make reproduce`. Every number on these slides is
# computed below: two Stanza jobs on the engine's own timeline (measured), the performance
# model's layer-by-layer backward on V100-class nodes (modelled, not measured), and a ring's
# fp32 sums under two bucket layouts (computed).*
#
# Runs in about a minute on a laptop CPU (two 3-process jobs); no root.

# %% tags=["parameters"] slideshow={"slide_type": "skip"}
nodes: int = 3  # N of the measured runs: N - 1 CONV workers, 1 FC worker
global_batch: int = 16  # G of the measured runs
bucket_mb: float = 0.5  # bucket cap of the overlapped run (MiB)
model_gbps: list[float] = [1.0, 2.5, 5.0, 10.0, 25.0, 100.0]  # link speeds of the modelled figure
png: bool = True  # also export PNG figures (needs a Chromium)
out_dir: str = "../../reproductions/out/tutorials/l3_overlap"  # where results.json and figures go

# %% slideshow={"slide_type": "skip"}
import plotly.graph_objects as go
import torch
from IPython.display import Markdown, display

import stanza_core.nbtools as nbt
from stanza_core import perf
from stanza_core.launch import run_job
from stanza_core.perf import device_profile
from stanza_core.perf.model import bucketed_backward, layer_shares
from stanza_core.viz import step_timeline, timeline_intervals
from stanza_core.variant import Variant


def show(text: str) -> None:
    """A computed line on the slide (the code that computed it stays hidden)."""
    display(Markdown(text))


MODEL_NODES, MODEL_B = 16, 32  # the modelled cluster: 15 CONV workers with 32 samples each, 1 FC worker
vgg = perf.named_profile("vgg16", batch_size=MODEL_B)
bwd_s = device_profile("v100", vgg).profile.time_s("conv", "bwd", MODEL_B)
layers = layer_shares(vgg, "conv")  # (name, params, share of the CONV time), forward order
units = [(p, share * bwd_s) for _, p, share in layers][::-1]  # backward order: last layer first

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Today
#
# * Why communication can hide behind computation, and how much it could save at best.
# * Gradient buckets: which gradients are ready when, and launching allreduces from inside the
#   backward.
# * Measured on the engine's timeline: small buckets against one bucket.
# * The bucket size trade-off, and the part that can never be hidden.
# * The FC worker's pipeline.
# * What overlap does and does not change in the result.
#
# **Before this lecture:** lecture 2 (ring allreduce, its latency and bandwidth terms).

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Motivation: a step done in sequence
#
# Without overlap a CONV worker computes the backward, then allreduces the CONV gradient, then
# updates. The step is the sum of the two. If the allreduce could run *while* the backward
# runs, the step would approach the larger of the two: the most overlap can save is the
# smaller one.
#
# VGG-16's CONV body on the modelled cluster of V100-class nodes:

# %% slideshow={"slide_type": "fragment"}
conv_bytes = 4 * vgg.conv.params
ar_10 = perf.Cluster(MODEL_NODES, 10.0).ring_allreduce_s(conv_bytes, MODEL_NODES - 1)
show(f"{MODEL_NODES - 1} CONV workers, {MODEL_B} samples each: CONV backward **{bwd_s * 1e3:.0f} ms**; CONV gradient {conv_bytes / 1e6:.0f} MB, its ring allreduce among "
     f"{MODEL_NODES - 1} at 10 Gb/s **{ar_10 * 1e3:.0f} ms**: in sequence {(bwd_s + ar_10) * 1e3:.0f} ms, "
     f"perfectly overlapped at best {max(bwd_s, ar_10) * 1e3:.0f} ms.")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## When is each gradient ready?
#
# The backward runs the layers in reverse: the last layer's gradient exists first, the first
# layer's last. A gradient can be sent as soon as it exists and no later layer will add to it.
#
# In VGG-16 the last convolutions are the widest: a few of them hold a large share of the CONV
# parameters and, run on small feature maps, take little of the backward time. So most of the gradient is
# ready early: good news for overlap.

# %% slideshow={"slide_type": "fragment"}
last3 = layers[-3:]
p_last3 = sum(p for _, p, _ in last3) / vgg.conv.params
t_last3 = sum(s for _, _, s in last3)
show(f"VGG-16's last three convolutions ({', '.join(n for n, _, _ in last3)}): **{p_last3:.0%}** of the CONV "
     f"parameters, **{t_last3:.0%}** of the CONV backward time (its share of the FLOPs).")
assert p_last3 > 0.4 and t_last3 < 0.15

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Buckets, step by step
#
# 1. Before training, group the CONV parameters into buckets by the order their gradients
#    arrive in the backward (the reverse of the order they were registered in, for a CNN).
# 2. Register a hook on each parameter that fires when its gradient has been accumulated.
# 3. When a bucket's last gradient arrives, launch its allreduce *asynchronously* and return:
#    the backward continues with the next layers.
# 4. After the backward, wait for every bucket's allreduce, divide by the number of workers,
#    and run the optimizer.
#
# One message per bucket: fewer, larger messages than one per parameter (latency), earlier
# starts than one for the whole gradient (overlap).
#
# **PyTorch DDP's rule** (Li et al. 2020; torch 2.14): take the parameters in the order their
# gradients arrived in the first step, about reverse registration order, and close a bucket once
# it holds *at least* `bucket_cap_mb`, 25 MiB by default; with the default cap the first bucket
# closes at 1 MiB, so the first allreduce leaves early. (Without `find_unused_parameters`, the
# first step reduces everything as one bucket while DDP records that order.) *Variants*, named
# as such: the engine's `--bucket-mb` walks reverse registration order and closes a bucket
# *before* it would exceed the cap (lab 4 counts it); lab 10 asks for DDP's closing rule with one
# cap for every bucket, as DDP does when the cap is given explicitly.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Predict
#
# Run the same Stanza job twice on this machine: once with 0.5 MiB buckets, once with a cap
# larger than the whole CONV gradient (one bucket).
#
# 1. With one bucket, when does the first CONV allreduce start?
# 2. With small buckets, how much of the backward is still to run when the first one starts?
# 3. Will the step be faster with small buckets on two shared CPU cores?

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Small buckets leave during the backward
#
# One step of `cifar_alexnet` on this machine (measured, engine timeline; loopback and shared
# cores: read the order of events, not the milliseconds). On the FC worker, each CONV worker's
# activations are processed in the order they arrive and the gradient goes back at once.

# %% slideshow={"slide_type": "skip"}
common = dict(strategy="stanza", model="cifar_alexnet", fc_workers=1, global_batch=global_batch, steps=3,
              image_size=32, num_classes=10, device="cpu", timeline=True)
small = run_job(nodes=nodes, bucket_mb=bucket_mb, **common)
one = run_job(nodes=nodes, bucket_mb=25.0, **common)


def first_launch(metrics, step=2):
    """Per CONV worker: its buckets, and the share of its backward still to run when its first
    allreduce was launched (near 0: the allreduce waited for the whole backward)."""
    out = {}
    for r in metrics["ranks"]:
        if r["role"] == "conv_worker":
            bars = timeline_intervals(r, step)
            bwd = next(b for b in bars if b["what"] == "backward")
            ars = [b for b in bars if b["what"] == "allreduce"]
            lead = (bwd["end"] - min(b["start"] for b in ars)) / (bwd["end"] - bwd["start"])
            out[r["rank"]] = {"buckets": len(ars), "backward_left": lead}
    return out


seen = {"small": first_launch(small), "one": first_launch(one)}
assert all(v["buckets"] > 1 and v["backward_left"] > 0.2 for v in seen["small"].values())
assert all(v["buckets"] == 1 and v["backward_left"] < 0.1 for v in seen["one"].values())

# %% slideshow={"slide_type": "fragment"}
fig_small = step_timeline(small)
fig_small.update_layout(title=f"{bucket_mb} MiB buckets: allreduces start inside the backward (measured, engine timeline)")
fig_small

# %% [markdown] slideshow={"slide_type": "slide"}
# ## One bucket: nothing leaves before the backward ends
#
# The same run with `--bucket-mb 25`, larger than all CONV gradients: one bucket, ready only
# when the first layer's gradient is, at the very end of the backward (measured).

# %% slideshow={"slide_type": "fragment"}
fig_one = step_timeline(one)
fig_one.update_layout(title="One bucket: the allreduce starts after the backward (measured, engine timeline)")
fig_one

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What the two timelines say
#
# Read off the step-2 timelines of both runs, per CONV worker: how many buckets it launched,
# and what share of its backward was still to run when the first one left.

# %% slideshow={"slide_type": "fragment"}
run_names = {"small": f"{bucket_mb:g} MiB buckets", "one": "one bucket"}
show("  \n".join(f"{run_names[label]}, CONV worker {rank}: **{v['buckets']}** buckets, the first launched with "
                 f"**{v['backward_left']:.0%}** of the backward still to run"
                 for label, rows in seen.items() for rank, v in rows.items()))

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Why the CPU run does not get faster
#
# On two shared CPU cores the step time says little about overlap. The backward and the gloo
# transfer compete for the same cores, and loopback transfers are short next to the backward. Overlap needs the communication to progress *independently* of the computation:
# a NIC and a GPU, not one core doing both (T8 measures this).
#
# So the rest of the lecture uses the performance model: it replays VGG-16's backward layer by
# layer on V100-class nodes and launches each bucket's ring allreduce once the bucket is ready,
# one at a time on the link (modelled, not measured).

# %% slideshow={"slide_type": "fragment"}
show("Measured here, median step: " + ", ".join(f"{run_names[k]} {m['step_time_median_s'] * 1e3:.0f} ms"
                                                for k, m in (("small", small), ("one", one))))

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Where it pays: the allreduce left after the backward
#
# The exposed time is the allreduce still running after the backward ends: all of the
# allreduce with one bucket, much less with 25 MiB buckets, over link speeds from 1 to 100 Gb/s.

# %% slideshow={"slide_type": "skip"}
modelled = []
for gbps in model_gbps:
    cl = perf.Cluster(MODEL_NODES, gbps, device="v100")
    row = {"gbps": gbps}
    for label, cap in (("buckets", int(25 * 2**20)), ("one_bucket", 2**40)):
        bwd_end, ar_end, _, n_buckets = bucketed_backward(units, cl, MODEL_NODES - 1, cap, False)
        row[label] = (ar_end - bwd_end) * 1e3
    modelled.append(row)
assert all(r["buckets"] <= r["one_bucket"] for r in modelled)
saved_at_10 = next(r["one_bucket"] - r["buckets"] for r in modelled if r["gbps"] == 10.0)

# %% slideshow={"slide_type": "fragment"}
fig_model = go.Figure()
for label, name in (("one_bucket", "one bucket"), ("buckets", "25 MiB buckets")):
    fig_model.add_scatter(x=model_gbps, y=[r[label] for r in modelled], mode="lines+markers", name=name)
fig_model.update_layout(title="Modelled: CONV allreduce left after the backward (VGG-16, 16 V100-class nodes)",
                        xaxis_type="log", xaxis_title="link bandwidth, Gb/s", yaxis_title="ms", height=400)
fig_model

# %% slideshow={"slide_type": "fragment"}
show(f"At 10 Gb/s the buckets end the allreduce **{saved_at_10:.0f} ms** earlier "
     f"(the backward is {bwd_s * 1e3:.0f} ms).")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## The bucket size trade-off
#
# Smaller buckets start earlier, but each is a ring of 2 (n - 1) messages, and every message
# pays the latency α. Larger buckets pay less latency but wait longer for their last gradient.
# Where the minimum falls depends on α, the link and how long the backward's layers take: with
# a small α it sits at the smallest caps. A layer's gradient is never split, so there is at most
# one bucket per layer. The modelled exposed time at 10 Gb/s over bucket caps:

# %% slideshow={"slide_type": "fragment"}
cl10 = perf.Cluster(MODEL_NODES, 10.0, device="v100")
caps_mb = [0.25, 1, 5, 25, 100]
by_cap = {}
for cap in caps_mb:
    bwd_end, ar_end, _, nb = bucketed_backward(units, cl10, MODEL_NODES - 1, int(cap * 2**20), False)
    by_cap[cap] = {"exposed_ms": (ar_end - bwd_end) * 1e3, "buckets": nb}
best_cap = min(by_cap, key=lambda c: by_cap[c]["exposed_ms"])
show("  \n".join(f"cap {c:g} MiB: {v['buckets']} buckets, **{v['exposed_ms']:.0f} ms** exposed" for c, v in by_cap.items())
     + f"  \nleast exposed at {best_cap:g} MiB of these caps")
assert by_cap[best_cap]["exposed_ms"] < by_cap[caps_mb[-1]]["exposed_ms"]  # buckets beat (nearly) one bucket

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What can never be hidden
#
# The last bucket to become ready holds the first layers' gradients, and it is ready only when
# the backward ends. Its allreduce is always exposed; so is anything queued behind it on the
# link. A bucket can hide at most the backward still to run when it is ready.
#
# So the first layers' bucket should be small: another reason why the bucket layout follows the
# backward order, and why the lower bound of the exposed time is the last bucket's allreduce.

# %% slideshow={"slide_type": "fragment"}
first_layer_bytes = 4 * layers[0][1]
last_ar = cl10.ring_allreduce_s(first_layer_bytes, MODEL_NODES - 1)
show(f"VGG-16's first convolution alone: {first_layer_bytes / 1e3:.0f} KB, its allreduce among {MODEL_NODES - 1} "
     f"at 10 Gb/s {last_ar * 1e3:.1f} ms: almost all latency, 2 (n - 1) = {2 * (MODEL_NODES - 2)} messages.")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## The FC worker's pipeline
#
# The FC worker does not wait for all CONV workers. It takes each CONV worker's activations in
# the order they arrive, runs the head's forward and backward on them, and sends that worker's
# activation gradients back at once. The next chunk's transfer overlaps this chunk's compute.
#
# What the model assumes for each strategy on the modelled cluster, and Stanza's exchange:

# %% slideshow={"slide_type": "fragment"}
st = perf.predict(vgg, cl10, Variant("stanza", fc_workers=1), batch_per_worker=MODEL_B)
bd = st.breakdown
show(f"stanza k=1: {st.overlap}.  \nFC worker compute **{bd['fc_worker_compute_s'] * 1e3:.0f} ms** for "
     f"{MODEL_NODES - 1} CONV workers' samples, activations in {bd['activation_ingress_s'] * 1e3:.0f} ms, "
     f"gradients out {bd['activation_egress_s'] * 1e3:.0f} ms; the whole exchange spans "
     f"**{bd['exchange_span_s'] * 1e3:.0f} ms**, less than the three in sequence "
     f"({(bd['fc_worker_compute_s'] + bd['activation_ingress_s'] + bd['activation_egress_s']) * 1e3:.0f} ms).")
assert bd["exchange_span_s"] < bd["fc_worker_compute_s"] + bd["activation_ingress_s"] + bd["activation_egress_s"]

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Does overlap change the result?
#
# Overlap changes *when* bytes move. It does not change which values are summed: every rank
# still adds the same gradients. But floating-point addition is not associative, and in a
# ring the order in which a value's n contributions are added depends on which chunk of its
# bucket it falls in. Move the bucket boundaries and some values are summed in another order:
# the fp32 result can differ in the last bits (T3, T6). In fp64 the same experiment differs
# far less.
#
# A ring of 4 ranks over one gradient, with two bucket layouts (computed):

# %% slideshow={"slide_type": "fragment"}
torch.manual_seed(0)
R, L = 4, 100_000
g64 = torch.randn(R, L, dtype=torch.float64)


def ring_sum(g, cap):
    """Each value's sum in the order a ring adds it: starting at the rank whose number is its
    chunk within its bucket (lecture 2's reduce-scatter), then around the ring."""
    start = torch.cat([torch.arange(min(cap, L - lo)) // -(-min(cap, L - lo) // R) for lo in range(0, L, cap)])
    orders = torch.stack([sum_in_order(g, [(c + i) % R for i in range(R)]) for c in range(R)])
    return orders.gather(0, start[None]).squeeze(0)


def sum_in_order(g, order):
    acc = g[order[0]].clone()
    for r in order[1:]:
        acc += g[r]
    return acc


layouts = (25_000, 40_000)  # values per bucket
diff32 = ring_sum(g64.float(), layouts[0]) - ring_sum(g64.float(), layouts[1])
diff64 = ring_sum(g64, layouts[0]) - ring_sum(g64, layouts[1])
order_effect = {"fp32_differ": (diff32 != 0).float().mean().item(), "fp32_max": diff32.abs().max().item(),
                "fp64_max": diff64.abs().max().item()}
show(f"Bucket layouts of {layouts[0]:,} and {layouts[1]:,} values: **{order_effect['fp32_differ']:.0%}** of the fp32 "
     f"sums differ, by at most {order_effect['fp32_max']:.1e}; in fp64 at most {order_effect['fp64_max']:.1e}.")
assert order_effect["fp32_differ"] > 0 and order_effect["fp64_max"] < 1e-6 * order_effect["fp32_max"]

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Pitfalls
#
# * **"Overlap leaves the result bit for bit the same."** The values summed are the same; the order of
#   the fp32 additions follows the bucket layout, so the last bits can change.
# * **Measuring overlap on a CPU.** Communication and computation share the cores; the timeline
#   shows the order, not the saving.
# * **Buckets too small.** Each costs 2 (n - 1) message latencies; with many small layers, tiny
#   buckets lose more to latency than they gain in overlap.
# * **Forgetting the wait.** The optimizer must wait for every bucket; updating with a
#   half-reduced gradient is a silent bug, not a crash.
# * **A parameter without a gradient.** If some parameter gets no gradient in a step, its
#   bucket never becomes ready. A hand-written overlap then waits forever in its `finish()`;
#   PyTorch's DDP (without `find_unused_parameters=True`) notices at the next forward and raises
#   an error ("Expected to have finished reduction in the prior iteration") listing the indices
#   of the parameters that got no gradient.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What to take away
#
# * Overlap changes *when* bytes move. The values summed stay the same, but bucket boundaries
#   set the order of the fp32 additions, so results can differ in the last bits (fp64 shows the
#   difference is rounding).
# * A bucket can hide at most the backward that is still to run when it is ready: the last
#   bucket (the first layers' gradients) is always exposed.
# * Bucket size trades latency against an early start.
# * It pays where the allreduce and the backward take comparable time: GPU clusters on
#   ordinary links, not a few processes on two CPU cores.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Read next
#
# * S. Li et al., *PyTorch Distributed: Experiences on Accelerating Data Parallel Training*,
#   VLDB 2020: gradient buckets and their order.
# * Y. Huang et al., *GPipe: Efficient Training of Giant Neural Networks using Pipeline
#   Parallelism*, NeurIPS 2019: pipelining micro-batches, the idea behind the FC worker's
#   pipeline.
# * Tutorials T4 (buckets on the timeline) and T8 (why a CPU hides so little); lab 4.
# * Lecture 4: turning bytes and FLOPs into seconds, and choosing the number of FC workers.

# %% slideshow={"slide_type": "skip"}
results = {"measured": seen, "modelled": modelled, "backward_ms": bwd_s * 1e3, "saved_at_10_ms": saved_at_10,
           "conv_allreduce_10_ms": ar_10 * 1e3, "last3_param_share": p_last3, "last3_time_share": t_last3,
           "by_cap": by_cap, "bucket_mb": bucket_mb,
           "step_median_ms": {k: m["step_time_median_s"] * 1e3 for k, m in (("small", small), ("one", one))}, "best_cap_mb": best_cap, "order_effect": order_effect}
nbt.write_results(results, out_dir)
written = nbt.save_figures({"timeline_buckets": fig_small, "timeline_one_bucket": fig_one,
                            "modelled_overlap": fig_model}, out_dir, png=png)
