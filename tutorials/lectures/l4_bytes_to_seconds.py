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


# %% [markdown] slideshow={"slide_type": "slide"}
# # Lecture 4 · From bytes to seconds: choosing k
#
# *Slides of lecture 4 (docs/course.md; tutorial T5, lab 5). Rendered with nbconvert's reveal.js
# slides into the gallery by `make reproduce`. Three figures, all from the performance model
# (`stanza_core.perf`, modelled, not measured): a step's time broken down, the throughput for
# each number of FC workers k, and the PS-over-Stanza byte ratio against the batch.*
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

import stanza_core.nbtools as nbt
from stanza_core import perf
from stanza_core.labels import config_label
from stanza_core.viz.assignment import step_breakdown, throughput_vs_k

profile = perf.named_profile(model)
cluster = perf.Cluster(nodes, gbps, device=device)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. A step in seconds
#
# Bytes become seconds through two formulas: a transfer of S bytes over a link of B bytes/s
# takes S / B + latency; a ring allreduce of S bytes among n ranks takes 2 (n - 1) / n · S / B +
# 2 (n - 1) latency. Add the compute of each part on the device and the model predicts a step.
# VGG-16 on 16 V100-class nodes at 10 Gb/s (modelled):

# %% slideshow={"slide_type": "skip"}
preds = [perf.predict(profile, cluster, "ps", batch_per_worker=batch_per_worker),
         perf.predict(profile, cluster, "ddp", batch_per_worker=batch_per_worker),
         perf.predict(profile, cluster, "stanza", 1, batch_per_worker=batch_per_worker)]
step_ms = {config_label(p.strategy, p.fc_workers): p.iteration_s * 1e3 for p in preds}
print("modelled step, ms:", {k: round(v, 1) for k, v in step_ms.items()})

# %% slideshow={"slide_type": "fragment"}
fig_breakdown = step_breakdown(preds)
fig_breakdown.update_layout(title=f"Modelled step of {model} on {nodes} {device}-class nodes at {gbps:g} Gb/s")
fig_breakdown

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. Choosing k
#
# More FC workers share the head's compute and the boundary traffic, but each one is a CONV
# worker fewer, and with k > 1 the FC gradients must be allreduced among them.
# `perf.best_assignment` evaluates ddp, ps and every k and keeps the fastest (modelled):

# %% slideshow={"slide_type": "skip"}
choice = perf.best_assignment(profile, cluster, batch_per_worker=batch_per_worker)
print("best:", choice.best.strategy, "k =", choice.best.fc_workers)

# %% slideshow={"slide_type": "fragment"}
fig_k = throughput_vs_k(choice)
fig_k

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. How much less than a parameter server?
#
# A PS moves about 2 · 4P bytes per node per step; Stanza with k = 1 moves 2 · 4 P_c for the
# CONV ring plus 2 · 4 (A + 1) per sample at the boundary. With b samples per worker fixed and N
# large the ratio tends to P / (P_c + b (A + 1)), not to P / P_c: the boundary grows with the
# batch. From `perf.expected_bytes` (exact) at N = 4096:

# %% slideshow={"slide_type": "skip"}
counts = perf.ModelCounts(profile.conv.params, profile.fc.params, profile.boundary_values)
P, Pc, A, N = counts.conv_params + counts.fc_params, counts.conv_params, counts.boundary_values, 4096
bs = [1, 4, 16, 32, 64, 128, 256]
ratio = [perf.totals(perf.expected_bytes(counts, "ps", N, None, global_batch=b * N))["bytes_per_step"]
         / perf.totals(perf.expected_bytes(counts, "stanza", N, 1, global_batch=b * (N - 1)))["bytes_per_step"] for b in bs]
limit = [P / (Pc + b * (A + 1)) for b in bs]
assert all(abs(r / lim - 1) < 2e-3 for r, lim in zip(ratio, limit))
print(f"P / P_c = {P / Pc:.2f}; at b = 32 the ratio is {ratio[bs.index(32)]:.2f}")

# %% slideshow={"slide_type": "fragment"}
fig_ratio = go.Figure()
fig_ratio.add_scatter(x=bs, y=ratio, mode="markers", name="perf.expected_bytes, N = 4096")
fig_ratio.add_scatter(x=bs, y=limit, mode="lines", name="P / (P_c + b (A + 1))")
fig_ratio.add_scatter(x=bs, y=[P / Pc] * len(bs), mode="lines", line_dash="dot", name="P / P_c")
fig_ratio.update_layout(title=f"{model}: PS bytes over Stanza (k = 1) bytes per step (exact byte formulas)",
                        xaxis_type="log", xaxis_title="samples per worker b", yaxis_title="ratio", height=400)
fig_ratio

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What to take away
#
# * Two formulas turn bytes into seconds; the model adds compute and overlap and predicts a step.
# * The best k depends on the model, the link and the batch: compute it, do not guess it.
# * The saving over a PS is bounded by P / (P_c + b (A + 1)): the boundary is paid per sample.
# * The model's bytes are exact (the engine's counters equal them); its times are a model, to be
#   judged against measured runs (notebook 07).

# %% slideshow={"slide_type": "skip"}
results = {"step_ms": step_ms, "best": {"strategy": choice.best.strategy, "fc_workers": choice.best.fc_workers},
           "b": bs, "ps_over_stanza": ratio, "limit": limit, "p_over_pc": P / Pc}
nbt.write_results(results, out_dir)
written = nbt.save_figures({"breakdown": fig_breakdown, "throughput_vs_k": fig_k, "ps_over_stanza": fig_ratio},
                           out_dir, png=png)
