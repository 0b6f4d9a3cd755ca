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
# # Lecture 4 · From bytes to seconds: choosing k
#
# *Slides of lecture 4 (docs/course.md; tutorial T5, lab 5). Rendered with nbconvert's reveal.js
# slides into the gallery by `make reproduce`. Every number on these slides is computed below
# from the performance model (`stanza_core.perf`: modelled, not measured) or from the engine's
# exact byte formulas (`perf.expected_bytes`).*
#
# Runs in seconds on a laptop CPU; no processes are started.

# %% tags=["parameters"] slideshow={"slide_type": "skip"}
model: str = "vgg16"  # torchvision model at 224 x 224
nodes: int = 16  # N
gbps: float = 10.0  # link bandwidth, Gb/s per direction
device: str = "v100"  # compute device (a perf device name)
batch_per_worker: int = 32  # b
png: bool = True  # also export PNG figures (needs a Chromium)
out_dir: str = "../../reproductions/out/tutorials/l4_bytes_to_seconds"  # where results.json and figures go

# %% slideshow={"slide_type": "skip"}
import plotly.graph_objects as go
from IPython.display import Markdown, display

import stanza_core.nbtools as nbt
from stanza_core import perf
from stanza_core.labels import config_label
from stanza_core.perf import device_profile
from stanza_core.viz.assignment import step_breakdown, throughput_vs_k
from stanza_core.variant import Variant


def show(text: str) -> None:
    """A computed line on the slide (the code that computed it stays hidden)."""
    display(Markdown(text))


profile = perf.named_profile(model)
cluster = perf.Cluster(nodes, gbps, device=device)
counts = perf.ModelCounts(profile.conv.params, profile.fc.params, profile.boundary_values)
P, Pc, A = counts.params, counts.conv_params, counts.boundary_values
b = batch_per_worker

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Today
#
# * Why bytes are not enough: two formulas that turn bytes into seconds.
# * Compute per part on a device, and a whole step predicted.
# * Choosing the number of FC workers k, and how the answer moves with the link.
# * How many fewer bytes than a parameter server, and why that number *falls* to a floor as the
#   cluster grows.
# * What the model can and cannot tell you.
#
# **Before this lecture:** lectures 1-3 (the split, the ring, buckets and overlap).

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Why a model
#
# The bytes per step are exact: the engine's counters equal `perf.expected_bytes` (lecture 2).
# Time is not exact. It depends on the link, the device, what overlaps with what. But the
# decisions (which strategy, how many FC workers, is a faster network worth it) must be taken
# before the cluster exists.
#
# A model gives a prediction per configuration from a handful of numbers: the model's counts
# (P_c, P_f, A, FLOPs per layer), the device's speed, the link's bandwidth B and latency α.
# Its job is to rank configurations correctly, not to match a stopwatch to the millisecond.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Formula 1: a transfer
#
# A message of S bytes over a link of B bytes per second takes
#
# t = α + S / B.
#
# α is a fixed cost per message (software, NIC, switch), B the link's bandwidth per direction.
# One CONV worker's boundary in one direction, b samples of 4A bytes:

# %% slideshow={"slide_type": "fragment"}
act_bytes = 4 * A * b
act_s = cluster.transfer_s(act_bytes)
show(f"{model}: A = {A:,}, b = {b}: {act_bytes / 1e6:.2f} MB; α = {cluster.latency_s * 1e6:g} µs, B = {gbps:g} Gb/s "
     f"= {cluster.bytes_per_s / 1e9:.2f} GB/s: **{act_s * 1e3:.2f} ms**. The FC worker receives {nodes - 1} of "
     f"these over its one link: {(nodes - 1) * act_s * 1e3:.0f} ms.")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Formula 2: a ring allreduce
#
# Lecture 2's ring: 2 (n - 1) steps, each moving S / n bytes over every link at once:
#
# t = 2 (n - 1) α + 2 (n - 1) / n · S / B.
#
# DDP allreduces all 4P bytes among N ranks; Stanza with k FC workers allreduces the 4P_c bytes
# of the CONV gradient among N - k CONV workers (and, with k > 1, the FC gradient among the k).

# %% slideshow={"slide_type": "fragment"}
ddp_ar = cluster.ring_allreduce_s(4 * P, nodes)
conv_ar = cluster.ring_allreduce_s(4 * Pc, nodes - 1)
show(f"DDP: {4 * P / 1e6:.0f} MB among {nodes}: **{ddp_ar * 1e3:.0f} ms**. Stanza k = 1: {4 * Pc / 1e6:.0f} MB among "
     f"{nodes - 1}: **{conv_ar * 1e3:.0f} ms**.")
assert conv_ar < ddp_ar

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Compute per part
#
# The model counts each layer's FLOPs and turns them into seconds with the device's rates
# (a `DeviceProfile` per device: from the device table, or calibrated on real hardware). Per
# part and per direction, for b samples:

# %% slideshow={"slide_type": "fragment"}
dev = device_profile(device, profile)
part_ms = {(part, d): dev.profile.time_s(part, d, b) * 1e3 for part in ("conv", "fc") for d in ("fwd", "bwd")}
show(f"{device}, b = {b}: " + ", ".join(f"{part} {d} **{v:.1f} ms**" for (part, d), v in part_ms.items())
     + f".  \nThe FC worker runs the head for {nodes - 1} CONV workers: about "
     f"{(nodes - 1) * (part_ms[('fc', 'fwd')] + part_ms[('fc', 'bwd')]):.0f} ms per step.")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Predict
#
# On this cluster, which is fastest per step for this model: the parameter server, DDP, or
# Stanza with one FC worker? By roughly how much?
#
# Use the last three slides: the allreduce times, the boundary transfers, the compute.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## A step in seconds
#
# The model adds compute, communication and what overlaps: the PS pushes and pulls after the
# backward, DDP's buckets overlap the backward, Stanza pipelines the boundary through the FC
# worker (lecture 3). Each bar is one activity on its busiest node (activities overlap, so the
# bars need not add up to the step).

# %% slideshow={"slide_type": "fragment"}
preds = [perf.predict(profile, cluster, Variant("ps"), batch_per_worker=b),
         perf.predict(profile, cluster, Variant("ddp"), batch_per_worker=b),
         perf.predict(profile, cluster, Variant("stanza", fc_workers=1), batch_per_worker=b)]
step_ms = {config_label(p.strategy, p.fc_workers): p.iteration_s * 1e3 for p in preds}
fig_breakdown = step_breakdown(preds)
fig_breakdown.update_layout(title=f"Modelled step of {model} on {nodes} {device}-class nodes at {gbps:g} Gb/s")
fig_breakdown

# %% slideshow={"slide_type": "fragment"}
show("Modelled step: " + ", ".join(f"{k} **{v:,.0f} ms**" for k, v in step_ms.items()))

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Choosing k
#
# More FC workers:
#
# * share the head's compute and the boundary traffic (each receives from fewer CONV workers);
# * but each is a CONV worker fewer, so the same b per worker means a smaller global batch;
# * and with k > 1 the FC gradients must be allreduced among the FC workers.
#
# Throughput (samples per second) decides, not step time, because the global batch changes
# with k. Paper-style Stanza (fp32, no extras) for each k on this cluster (modelled):

# %% slideshow={"slide_type": "fragment"}
per_k = {k: perf.predict(profile, cluster, Variant("stanza", fc_workers=k), batch_per_worker=b) for k in range(1, nodes // 2 + 1)}
show(", ".join(f"k = {k}: {p.throughput:,.0f}" for k, p in per_k.items()) + " samples/s")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## The search, drawn
#
# `perf.best_assignment` evaluates DDP, the PS and every k (with the engine's options) and keeps
# the fastest; the figure shows the throughput of each candidate.

# %% slideshow={"slide_type": "fragment"}
choice = perf.best_assignment(profile, cluster, batch_per_worker=b)
fig_k = throughput_vs_k(choice)
fig_k

# %% slideshow={"slide_type": "fragment"}
show(f"Best here: **{choice.best.label}**, {choice.speedup_vs_ddp:.2f}x DDP's throughput, "
     f"{choice.speedup_vs_ps:.2f}x the PS's.")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Predict: a slower and a faster link
#
# Keep the model, the device and N. Change only the link: 1 Gb/s and 100 Gb/s.
#
# 1. Does layer separation win by more or by less on the slow link?
# 2. On the fast link, is it still the best strategy?
# 3. Does the best k grow or shrink?

# %% [markdown] slideshow={"slide_type": "slide"}
# ## The answer depends on the link
#
# The best configuration per link speed (modelled). On a slow link the bytes dominate and the
# method that moves fewest wins by far; on a fast link compute dominates and the extra work
# concentrated on the FC workers can cost more than the bytes it saves.

# %% slideshow={"slide_type": "fragment"}
by_link = {}
for g in (1.0, gbps, 100.0):
    ch = perf.best_assignment(profile, perf.Cluster(nodes, g, device=device), batch_per_worker=b)
    paper = ch.paper_stanza()
    by_link[g] = {"best": ch.best.label, "vs_ddp": ch.speedup_vs_ddp, "paper_k": paper.fc_workers,
                  "paper_vs_ddp": paper.throughput / ch.ddp.throughput}
show("  \n".join(f"{g:g} Gb/s: best **{v['best']}** ({v['vs_ddp']:.2f}x DDP); paper-style Stanza best at "
                 f"k = {v['paper_k']} ({v['paper_vs_ddp']:.2f}x DDP)" for g, v in by_link.items()))

# %% [markdown] slideshow={"slide_type": "slide"}
# ## How much less than a parameter server?
#
# A colocated sharded PS moves 2 (N - 1) · 4P bytes per step over the cluster. Stanza (k = 1)
# moves 8 (A + 1) bytes per sample at the boundary, (N - 1) b samples, plus the CONV ring among
# N - 1 members, 2 (N - 2) · 4P_c. Dividing:
#
# PS / Stanza = P / ( b (A + 1) + (N - 2) / (N - 1) · P_c ).
#
# **Predict:** as N grows with b fixed, does the ratio rise or fall? Towards what?

# %% slideshow={"slide_type": "fragment"}
ns = [4, 8, 16, 64, 4096]
counted = {N: perf.totals(perf.expected_bytes(counts, Variant("ps"), N, global_batch=b * N))["bytes_per_step"]
           / perf.totals(perf.expected_bytes(counts, Variant("stanza", fc_workers=1), N, global_batch=b * (N - 1)))["bytes_per_step"]
           for N in ns}
closed = {N: P / (b * (A + 1) + (N - 2) / (N - 1) * Pc) for N in ns}
floor = P / (Pc + b * (A + 1))
assert all(abs(counted[N] / closed[N] - 1) < 1e-6 for N in ns)
assert all(counted[x] > counted[y] > floor for x, y in zip(ns, ns[1:]))
show(f"{model}, b = {b}, counted with `perf.expected_bytes`: "
     + ", ".join(f"N = {N}: **{v:.2f}**" for N, v in counted.items())
     + f".  \nIt **falls** towards the floor P / (P_c + b (A + 1)) = **{floor:.2f}**, never below it. "
     f"(P / P_c = {P / Pc:.2f}: the boundary keeps the floor under it.)")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Why it falls, and why the floor moves with b
#
# * With few nodes the CONV ring is small: its (N - 2) / (N - 1) share of 4P_c is well under
#   one, so Stanza moves relatively little and the ratio is high. As N grows that share tends
#   to 1 and the ratio falls to its large-N floor.
# * The floor is not P / P_c. The boundary, b (A + 1) per CONV worker, is paid per sample: a
#   larger batch per worker lowers the floor, a smaller one raises it towards P / P_c.
#
# The ratio at N = 4096 over the batch per worker, against the floor and against P / P_c:

# %% slideshow={"slide_type": "skip"}
N_big = 4096
bs = [1, 4, 16, 32, 64, 128, 256]
ratio = [perf.totals(perf.expected_bytes(counts, Variant("ps"), N_big, global_batch=x * N_big))["bytes_per_step"]
         / perf.totals(perf.expected_bytes(counts, Variant("stanza", fc_workers=1), N_big, global_batch=x * (N_big - 1)))["bytes_per_step"]
         for x in bs]
limit = [P / (Pc + x * (A + 1)) for x in bs]
assert all(r >= lim and r / lim - 1 < 2e-3 for r, lim in zip(ratio, limit))

# %% slideshow={"slide_type": "fragment"}
fig_ratio = go.Figure()
fig_ratio.add_scatter(x=bs, y=ratio, mode="markers", name=f"perf.expected_bytes, N = {N_big}")
fig_ratio.add_scatter(x=bs, y=limit, mode="lines", name="floor P / (P_c + b (A + 1))")
fig_ratio.add_scatter(x=bs, y=[P / Pc] * len(bs), mode="lines", line_dash="dot", name="P / P_c")
fig_ratio.update_layout(title=f"{model}: PS bytes over Stanza (k = 1) bytes per step (exact byte formulas)",
                        xaxis_type="log", xaxis_title="samples per worker b", yaxis_title="ratio", height=400)
fig_ratio

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What the model is, and is not
#
# * **Exact:** the bytes. The engine's counters equal `perf.expected_bytes` rank by rank.
# * **Modelled:** the times. Device rates from a table or a calibration; a link with one α and
#   one B; a schedule of what overlaps. Notebook 07 compares it with measured runs.
# * **Good for:** ranking configurations, finding where the answer flips (the link speed at
#   which DDP overtakes Stanza), sizing k.
# * **Not good for:** a promise of milliseconds on a particular cluster, contention from other
#   jobs, stragglers.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Pitfalls
#
# * **Comparing step times across k.** The global batch changes with k; compare throughput.
# * **"Stanza always wins."** Not on fast links against a PS sharded over every node: there a
#   compute-bound model (VGG-16) gains only the communication the PS cannot hide, and the FC
#   worker's turn over every CONV worker's chunk is part of Stanza's own step.
# * **A speedup "over PS" without its PS.** The paper does not say which PS it measured, and the
#   PS decides its 1.55x and 1.72x at 100 Gb/s; in the model no single PS gives both at once
#   (notebook 05, "What the paper must have assumed"). Name the PS.
# * **Reading the PS ratio as a ceiling.** P / (P_c + b (A + 1)) is where the ratio ends for
#   large N; small clusters save more than that.
# * **Forgetting the latency.** Small messages, many ranks, many buckets: α, not B, decides.
# * **Timing on a laptop.** CPU processes share cores and memory bandwidth; their times say
#   little about a GPU cluster (T8). Use the model, or calibrate it on the target.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What to take away
#
# * Two formulas turn bytes into seconds; the model adds compute and overlap and predicts a step.
# * The best k depends on the model, the link and the batch: compute it, do not guess it.
# * Stanza's saving in bytes over a PS falls with N to the floor P / (P_c + b (A + 1)), and the
#   boundary, paid per sample, keeps that floor under P / P_c.
# * The model's bytes are exact (the engine's counters equal them); its times are a model, to be
#   judged against measured runs (notebook 07).

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Read next
#
# * R. Thakur, R. Rabenseifner, W. Gropp, *Optimization of Collective Communication Operations
#   in MPICH*, IJHPCA 2005: the α-β cost of collectives.
# * S. Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training Trillion Parameter
#   Models*, SC 2020: sharding the optimizer state, gradients and parameters (memory, not bytes).
# * X. Wu, H. Xu, B. Li, Y. Xiong, *Stanza: Layer Separation for Distributed Training in Deep
#   Learning*, arXiv 1812.10624 (IEEE Transactions on Services Computing, 2020): its performance
#   model and the choice of the node assignment.
# * Tutorial T5 and lab 5 (the model, and choosing k); notebook 07 (model against measurement).
# * Lecture 5: ZeRO, tensor and pipeline parallelism beside layer separation, and where it
#   stops paying.

# %% slideshow={"slide_type": "skip"}
results = {"step_ms": step_ms, "best": {"strategy": choice.best.strategy, "fc_workers": choice.best.fc_workers},
           "b": bs, "ps_over_stanza": ratio, "limit": limit, "p_over_pc": P / Pc,
           "ratio_by_nodes": {str(N): v for N, v in counted.items()}, "floor": floor, "by_link": by_link,
           "per_k_throughput": {str(k): p.throughput for k, p in per_k.items()}, "part_ms": {f"{p} {d}": v for (p, d), v in part_ms.items()}}
nbt.write_results(results, out_dir)
written = nbt.save_figures({"breakdown": fig_breakdown, "throughput_vs_k": fig_k, "ps_over_stanza": fig_ratio},
                           out_dir, png=png)
