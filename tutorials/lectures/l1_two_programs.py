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
# # Lecture 1 · A CNN is two programs
#
# *Slides of lecture 1 (docs/course.md; tutorial T1, lab 1). Rendered with nbconvert's reveal.js
# slides into the gallery by `make reproduce`. Three figures: where a CNN's parameters and
# FLOPs sit (counted from the models), the split checked on a real model, and the bytes per
# step of data parallelism against layer separation (the engine's byte formulas, which its
# counters equal).*
#
# Runs in under a minute on a laptop CPU; no processes are started.

# %% tags=["parameters"] slideshow={"slide_type": "skip"}
models: list[str] = ["alexnet", "vgg16", "resnet50"]  # torchvision models at 224 x 224
nodes: int = 8  # N of the bytes figure
batch_per_worker: int = 32  # b: samples per data worker
png: bool = True  # also export PNG figures (needs a Chromium)
out_dir: str = "../../reproductions/out/tutorials/l1_two_programs"  # where results.json and figures go

# %% slideshow={"slide_type": "skip"}
import plotly.graph_objects as go
import torch

import stanza_core.nbtools as nbt
from stanza_core import get_model, perf, split_model
from stanza_core.viz import part_shares

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. Where the parameters are, where the work is
#
# Split each model where its convolutions end. The CONV body holds the arithmetic: every
# filter slides over every position. The FC head holds most of the parameters: one weight per
# input-output pair, each used once per sample. AlexNet: 96 % of the parameters in the head,
# 8 % of the FLOPs; VGG-16: 89 % and under 1 %. ResNet-50 is the exception: its head is one
# 2048 x 1000 layer, 8 % of its parameters.

# %% slideshow={"slide_type": "skip"}
profiles = [perf.named_profile(m) for m in models]
shares = {p.model: {"fc_param_share": p.fc.params / (p.conv.params + p.fc.params),
                    "fc_flop_share": p.fc.flops / (p.conv.flops + p.fc.flops)} for p in profiles}
for m, s in shares.items():
    print(f"{m}: FC head {s['fc_param_share']:.1%} of the parameters, {s['fc_flop_share']:.2%} of the forward FLOPs")
assert shares["alexnet"]["fc_param_share"] > 0.95 and shares["resnet50"]["fc_param_share"] < 0.1

# %% slideshow={"slide_type": "fragment"}
fig_shares = part_shares(profiles)
fig_shares.update_layout(title="CONV body and FC head: shares of parameters and forward FLOPs (counted, 224 x 224)")
fig_shares

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. Two programs, one model
#
# `split_model` cuts the model into two modules, `conv` and `fc`, such that `fc(conv(x))` is
# `model(x)`: the same arithmetic, in two pieces that can run on different machines. The
# boundary tensor, A values per sample, is all that must cross between them (with its gradient
# on the way back). Checked on AlexNet at 64 x 64 (any size works; the head's input is fixed by
# the adaptive pooling):

# %% slideshow={"slide_type": "skip"}
torch.manual_seed(0)
net = get_model("alexnet", 1000).eval()
split = split_model(net, input_shape=(3, 64, 64))
x = torch.randn(4, 3, 64, 64)
with torch.no_grad():
    split_diff = (split.fc(split.conv(x)) - net(x)).abs().max().item()
boundary_values = split.conv(x).shape[1:].numel()
print(f"boundary: before {split.boundary!r}, A = {boundary_values} values per sample; "
      f"max |fc(conv(x)) - model(x)| = {split_diff:.1e}")
assert split_diff < 1e-5

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. What moves per step: DDP against layer separation
#
# Data parallelism (DDP) allreduces the whole gradient, 4P bytes, every step: for AlexNet and
# VGG-16 mostly FC weights. Layer separation (Stanza, k = 1 FC worker) allreduces only the CONV
# gradient among the N - 1 CONV workers and moves each sample's boundary activation and its
# gradient instead: 2 x 4(A + 1) bytes per sample. The cluster's bytes per step, from
# `perf.expected_bytes` (exact; the engine's byte counters equal it):

# %% slideshow={"slide_type": "skip"}
moved = {}
for p in profiles:
    counts = perf.ModelCounts(p.conv.params, p.fc.params, p.boundary_values)
    moved[p.model] = {s: perf.totals(perf.expected_bytes(counts, s, nodes, k,
                                                         global_batch=batch_per_worker * (nodes - (k or 0))))["bytes_per_step"]
                      for s, k in (("ddp", None), ("stanza", 1))}
    print(f"{p.model}: ddp {moved[p.model]['ddp'] / 1e6:.0f} MB, stanza {moved[p.model]['stanza'] / 1e6:.0f} MB per step "
          f"({moved[p.model]['ddp'] / moved[p.model]['stanza']:.1f}x)")
assert moved["alexnet"]["ddp"] > 5 * moved["alexnet"]["stanza"]
assert moved["resnet50"]["ddp"] < 1.3 * moved["resnet50"]["stanza"]

# %% slideshow={"slide_type": "fragment"}
fig_bytes = go.Figure()
for s in ("ddp", "stanza"):
    fig_bytes.add_bar(x=list(moved), y=[moved[m][s] / 1e6 for m in moved], name=s if s == "ddp" else "stanza k=1")
fig_bytes.update_layout(title=f"Cluster bytes per step, {nodes} nodes, {batch_per_worker} samples per data worker "
                              "(perf.expected_bytes: exact byte formulas)", yaxis_title="MB per step", height=400)
fig_bytes

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What to take away
#
# * A CNN is a compute-heavy CONV body and a parameter-heavy FC head; the cut goes where the
#   convolutions end, where the boundary is small and the head's parameters stay out of the
#   allreduce (T1 computes every candidate cut).
# * The split changes nothing in the arithmetic: `fc(conv(x)) == model(x)`.
# * Layer separation pays in proportion to the head's share of the parameters: a lot for AlexNet
#   and VGG-16, little for ResNet-50, whose head is 8 % of its parameters.

# %% slideshow={"slide_type": "skip"}
results = {"shares": shares, "split_max_abs_diff": split_diff, "boundary": split.boundary,
           "boundary_values": boundary_values, "nodes": nodes, "batch_per_worker": batch_per_worker, "bytes": moved}
nbt.write_results(results, out_dir)
written = nbt.save_figures({"part_shares": fig_shares, "bytes_per_step": fig_bytes}, out_dir, png=png)
