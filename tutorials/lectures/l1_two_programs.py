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
# slides into the gallery by `make reproduce`. Every number on these slides is computed below
# from the models (`stanza_core.perf.named_profile`, `split_model`) or from the engine's exact
# byte formulas (`perf.expected_bytes`, which the engine's counters equal).*
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
from IPython.display import Markdown, display

import stanza_core.nbtools as nbt
from stanza_core import get_model, perf, split_model
from stanza_core.anatomy import LABEL_BYTES
from stanza_core.viz import part_shares
from stanza_core.variant import Variant


def show(text: str) -> None:
    """A computed line on the slide (the code that computed it stays hidden)."""
    display(Markdown(text))


profiles = {p.model: p for p in (perf.named_profile(m) for m in models)}
alex = profiles["alexnet"]

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Today
#
# * Why the gradient of a CNN is expensive to share, and which layers make it so.
# * The two kinds of layer: a convolution reuses each weight at every position, a
#   fully connected (FC) layer uses each weight once per sample.
# * Cutting a model into a CONV body and an FC head that run as two programs, with the same
#   arithmetic.
# * What crosses the cut (activations and their gradients), and what no longer crosses the
#   network (the FC parameters and their gradients).
# * How much this saves per step, and why the saving is not proportional to the head's share.
#
# **Before this lecture:** backpropagation, SGD, a CNN's layers; what data parallelism does.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Why a step of data parallelism costs bytes
#
# In data parallelism every worker holds the whole model, computes a gradient on its own
# samples, and the workers then sum their gradients before anyone updates. The sum is as
# large as the model: 4 bytes per fp32 parameter, every step, whatever the batch.
#
# So the cost of a step has two parts: compute, which shrinks as we add workers (each does a
# smaller share of the batch), and gradient traffic, which does not shrink at all. Adding
# workers makes the second part dominate. The question of this lecture: *which* parameters
# make the gradient large, and do they have to travel?

# %% slideshow={"slide_type": "fragment"}
show("Gradient per step, fp32: " + "; ".join(f"**{m}** {4 * (p.conv.params + p.fc.params) / 1e6:.0f} MB"
                                          for m, p in profiles.items()))

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Two kinds of layer
#
# **Convolution**, k x k kernel, C_in to C_out channels, output H x W:
# parameters k·k·C_in·C_out (+ C_out biases); forward FLOPs 2·k·k·C_in·C_out·H·W per sample.
# Each weight is used at all H·W output positions.
#
# **Fully connected**, n_in to n_out: parameters n_in·n_out (+ n_out biases); forward FLOPs
# 2·n_in·n_out per sample. Each weight is used once.
#
# Same parameter count, very different work: FLOPs per parameter is about 2·H·W for a
# convolution and 2 for an FC layer. Checked on AlexNet's first convolution and first FC layer
# (counted by `named_profile` from the model's own modules):

# %% slideshow={"slide_type": "fragment"}
conv1 = next(r for r in alex.layers if r.kind == "Conv2d")
fc1 = next(r for r in alex.layers if r.kind == "Linear")
alex_net = get_model("alexnet", 1000)
conv1_m, fc1_m = alex_net.get_submodule(conv1.name), alex_net.get_submodule(fc1.name)
conv1_hw = conv1.out_values // conv1_m.out_channels  # output positions
conv1_uses = conv1.flops / (2 * conv1_m.weight.numel())
fc1_uses = fc1.flops / (2 * fc1_m.weight.numel())
assert conv1_uses == conv1_hw and fc1_uses == 1
show(f"AlexNet `{conv1.name}` ({' x '.join(map(str, conv1_m.kernel_size))} conv, {conv1_m.in_channels} to "
     f"{conv1_m.out_channels} channels): {conv1.params:,} parameters, {conv1.flops / 1e6:.0f} MFLOPs per sample: "
     f"each weight used **{conv1_uses:.0f}** times ({conv1_hw ** 0.5:.0f} x {conv1_hw ** 0.5:.0f} positions).  \n"
     f"AlexNet `{fc1.name}` ({fc1_m.in_features} to {fc1_m.out_features}): {fc1.params:,} parameters, "
     f"{fc1.flops / 1e6:.0f} MFLOPs per sample: each weight used **{fc1_uses:.0f}** time.")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Predict, then look
#
# Split AlexNet, VGG-16 and ResNet-50 where their convolutions end.
#
# 1. Which part holds most of the **parameters**?
# 2. Which part does most of the **arithmetic**?
# 3. Is ResNet-50 like the other two?
#
# Write your three answers down before the next slide.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Where the parameters are, where the work is
#
# The CONV body holds the arithmetic: every filter slides over every position. The FC head
# holds most of the parameters of AlexNet and VGG-16: one weight per input-output pair.
# ResNet-50 is the exception: global average pooling leaves 2048 values, and its head is a
# single 2048 x 1000 layer.

# %% slideshow={"slide_type": "fragment"}
shares = {m: {"fc_param_share": p.fc.params / (p.conv.params + p.fc.params),
              "fc_flop_share": p.fc.flops / (p.conv.flops + p.fc.flops)} for m, p in profiles.items()}
show("  \n".join(f"**{m}**: FC head {s['fc_param_share']:.1%} of the parameters, "
                 f"{s['fc_flop_share']:.2%} of the forward FLOPs" for m, s in shares.items()))
assert shares["alexnet"]["fc_param_share"] > 0.95 and shares["resnet50"]["fc_param_share"] < 0.1

# %% [markdown] slideshow={"slide_type": "slide"}
# ## The counts, drawn
#
# Shares of parameters and of forward FLOPs per part, and a full gradient of each part against
# one sample's boundary activation (the bytes each would move).

# %% slideshow={"slide_type": "fragment"}
fig_shares = part_shares(list(profiles.values()))
fig_shares.update_layout(title="CONV body and FC head: shares of parameters and forward FLOPs (counted, 224 x 224)")
fig_shares

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Work per byte of gradient
#
# Divide each part's forward FLOPs per sample by its gradient bytes. A high number means the
# part does a lot of work for every byte it would have to synchronise; a low number means its
# gradient is expensive relative to what it computes.
#
# The two parts differ by orders of magnitude. That is the whole case for treating them
# differently: data parallelism suits the body, whose gradient is small for its work; the head
# computes little for the gradient it would send.

# %% slideshow={"slide_type": "fragment"}
intensity = {m: {part: getattr(p, part).flops / (4 * getattr(p, part).params) for part in ("conv", "fc")}
             for m, p in profiles.items()}
show("Forward FLOPs per sample per gradient byte:  \n" + "  \n".join(
    f"**{m}**: CONV body {v['conv']:.0f}, FC head {v['fc']:.1f} ({v['conv'] / v['fc']:.0f}x apart)"
    for m, v in intensity.items()))
assert all(v["conv"] > 20 * v["fc"] for v in intensity.values())

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Two programs, one model
#
# `split_model` cuts the model into two modules, `conv` and `fc`, such that `fc(conv(x))` is
# `model(x)`: the same arithmetic in two pieces that can run on different machines.
#
# * The **CONV workers** run `conv` on their own samples, data parallel as before, and
#   allreduce only the CONV gradient among themselves.
# * The **FC worker** runs `fc` on every CONV worker's activations and keeps the head's
#   parameters: they never cross the network.
#
# Checked on AlexNet at 64 x 64 (any size works; adaptive pooling fixes the head's input):

# %% slideshow={"slide_type": "fragment"}
torch.manual_seed(0)
net = get_model("alexnet", 1000).eval()
split = split_model(net, input_shape=(3, 64, 64))
x = torch.randn(4, 3, 64, 64)
with torch.no_grad():
    split_diff = (split.fc(split.conv(x)) - net(x)).abs().max().item()
boundary_values = split.conv(x).shape[1:].numel()
assert split_diff < 1e-5
show(f"Cut before `{split.boundary}`; A = {boundary_values:,} values per sample cross it; "
     f"max |fc(conv(x)) - model(x)| = {split_diff:.1e}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Where to cut
#
# Any cut gives an exact split; the cut decides what crosses. Cut early and the activations
# are huge (the first convolution's output is larger than the image). Cut where the
# convolutions end and the activation is at its smallest, while everything after it is the
# parameter-heavy head. Activation values per sample after each of AlexNet's convolutions and
# at the boundary (T1 computes every candidate cut and its bytes):

# %% slideshow={"slide_type": "fragment"}
cuts = [(f"after `{r.name}`", r.out_values, sum(q.params for q in alex.layers[i + 1:]))
        for i, r in enumerate(alex.layers) if r.part == "conv" and r.params]
cuts.append(("at the boundary (end of the body)", alex.boundary_values, alex.fc.params))
show("  \n".join(f"{n}: {a:,} values per sample, {after / 1e6:.1f} M parameters after the cut" for n, a, after in cuts))
assert cuts[0][1] > 10 * alex.boundary_values

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What crosses the cut
#
# Per sample and per step, with A boundary values:
#
# 1. forward: the CONV worker sends its activations, 4A bytes, and the label (an int64);
# 2. the FC worker runs the head, the loss and the head's backward;
# 3. backward: it sends the activation gradient back, 4A bytes;
# 4. the CONV worker finishes the backward and joins the CONV allreduce.
#
# So the boundary costs 4A + 8 + 4A = 8(A + 1) bytes per sample, growing with the batch; the FC
# gradient, 4P_f bytes, no longer moves at all (with one FC worker). Per CONV worker, at b samples:

# %% slideshow={"slide_type": "fragment"}
boundary_mb = {m: (2 * 4 * p.boundary_values + LABEL_BYTES) * batch_per_worker / 1e6 for m, p in profiles.items()}
assert LABEL_BYTES == 8  # the slide's 8(A + 1)
show(f"b = {batch_per_worker}: " + "; ".join(f"**{m}** A = {p.boundary_values:,}, boundary {boundary_mb[m]:.1f} MB, "
                                              f"FC gradient {4 * p.fc.params / 1e6:.0f} MB" for m, p in profiles.items()))

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Predict: bytes per step
#
# N nodes, b samples per data worker. Data parallelism (DDP) ring-allreduces the whole
# gradient among N; layer separation (Stanza, k = 1 FC worker) ring-allreduces the CONV
# gradient among the N - 1 CONV workers and moves the boundary.
#
# For AlexNet, how many times fewer bytes does the cluster move per step with Stanza?
# Roughly 2x, 5x, 20x, or 100x? And for ResNet-50?

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What moves per step: DDP against layer separation
#
# The cluster's bytes per step, from `perf.expected_bytes` (exact; the engine's byte counters
# equal it):

# %% slideshow={"slide_type": "fragment"}
moved = {}
for m, p in profiles.items():
    counts = perf.ModelCounts(p.conv.params, p.fc.params, p.boundary_values)
    moved[m] = {s: perf.totals(perf.expected_bytes(counts, Variant(s, fc_workers=k), nodes,
                                                   global_batch=batch_per_worker * (nodes - (k or 0))))["bytes_per_step"]
                for s, k in (("ddp", None), ("stanza", 1))}
show(f"N = {nodes}, b = {batch_per_worker}:  \n" + "  \n".join(
    f"**{m}**: DDP {v['ddp'] / 1e6:,.0f} MB, Stanza {v['stanza'] / 1e6:,.0f} MB per step "
    f"(**{v['ddp'] / v['stanza']:.1f}x** fewer)" for m, v in moved.items()))
assert moved["alexnet"]["ddp"] > 5 * moved["alexnet"]["stanza"]
assert moved["resnet50"]["ddp"] < 1.3 * moved["resnet50"]["stanza"]

# %% [markdown] slideshow={"slide_type": "slide"}
# ## The bytes, drawn
#
# DDP's bar is almost all FC gradient for AlexNet and VGG-16; Stanza's is the CONV gradient
# plus the boundary. For ResNet-50 the two bars are nearly equal.

# %% slideshow={"slide_type": "fragment"}
fig_bytes = go.Figure()
for s in ("ddp", "stanza"):
    fig_bytes.add_bar(x=list(moved), y=[moved[m][s] / 1e6 for m in moved], name=s if s == "ddp" else "stanza k=1")
fig_bytes.update_layout(title=f"Cluster bytes per step, {nodes} nodes, {batch_per_worker} samples per data worker "
                              "(perf.expected_bytes: exact byte formulas)", yaxis_title="MB per step", height=400)
fig_bytes

# %% [markdown] slideshow={"slide_type": "slide"}
# ## The saving is not proportional to the share
#
# Leave the boundary out and let N be large. DDP moves a gradient of P parameters, Stanza one
# of P_c = P (1 - s), where s is the head's share of the parameters, so the ratio tends to
#
# P / P_c = 1 / (1 - s).
#
# It is not linear in s: it explodes as s nears 1. Going from half to nine tenths of the
# parameters in the head multiplies the saving by five; the last few percent matter most.
# At finite N the CONV ring has one member fewer, which raises the ratio by (N - 1) / (N - 2);
# the boundary, paid per sample, lowers it.

# %% slideshow={"slide_type": "fragment"}
ceiling = {m: 1 / (1 - s["fc_param_share"]) for m, s in shares.items()}
no_boundary = {m: c * (nodes - 1) / (nodes - 2) for m, c in ceiling.items()}  # ring factors (N-1)/N over (N-2)/(N-1)
show("  \n".join(f"**{m}**: s = {shares[m]['fc_param_share']:.1%}, 1 / (1 - s) = **{c:.1f}x**; "
                 f"counted at N = {nodes}, b = {batch_per_worker}: {moved[m]['ddp'] / moved[m]['stanza']:.1f}x"
                 for m, c in ceiling.items())
     + "  \n" + ", ".join(f"s = {s:.0%}: {1 / (1 - s):.0f}x" for s in (0.5, 0.9, 0.99)))
assert all(moved[m]["ddp"] / moved[m]["stanza"] < v for m, v in no_boundary.items())

# %% [markdown] slideshow={"slide_type": "slide"}
# ## The head is not free
#
# One FC worker computes the head for every CONV worker's samples: (N - 1) b samples per step,
# forward and backward. The head is a small share of the FLOPs per sample, but it is done for
# the whole batch on one node. If that exceeds a CONV worker's body for its own b samples, the
# FC worker sets the pace and lecture 4's choice of k (more FC workers) matters.

# %% slideshow={"slide_type": "fragment"}
load = {m: (nodes - 1) * p.fc.flops / p.conv.flops for m, p in profiles.items()}
show(f"FC worker's head FLOPs over one CONV worker's body FLOPs per step, N = {nodes}: "
     + "; ".join(f"**{m}** {v:.2f}" for m, v in load.items()))

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Pitfalls
#
# * **"The head is a small share of the FLOPs, so it is cheap."** Per sample, yes; the FC
#   worker runs it for the whole global batch (previous slide).
# * **"The boundary is small."** It is paid per sample: double the batch and it doubles, while
#   the gradient it replaces does not grow (lecture 4 works out the limit).
# * **Cutting too early.** An exact split anywhere, but the activation after the first
#   convolution is many times the boundary at the end of the body.
# * **Models without a large head.** ResNet-50's head is a single small layer; the method saves
#   little there. Count before choosing.
# * **Counting FLOPs for time.** FLOPs say where the work is, not how long it takes: lecture 4
#   turns bytes and FLOPs into seconds.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What to take away
#
# * A CNN is a compute-heavy CONV body and a parameter-heavy FC head; the cut goes where the
#   convolutions end, where the boundary is small and the head's parameters stay out of the
#   allreduce (T1 computes every candidate cut).
# * The split changes nothing in the arithmetic: `fc(conv(x)) == model(x)`.
# * Without the boundary, the bytes saved go as 1 / (1 - s), with s the head's share of the
#   parameters: large for AlexNet and VGG-16, small for ResNet-50. The boundary, paid per
#   sample, lowers it.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Read next
#
# * A. Krizhevsky, *One weird trick for parallelizing convolutional neural networks*, 2014:
#   data parallelism for the convolutions, model parallelism for the FC layers, the ancestor of
#   layer separation.
# * X. Wu, H. Xu, B. Li, Y. Xiong, *Stanza: Layer Separation for Distributed Training in Deep
#   Learning*, arXiv 1812.10624 (IEEE Transactions on Services Computing, 2020): the method of
#   this course.
# * Tutorial T1 (every candidate cut, counted) and lab 1.
# * Lecture 2: how the gradients that do move are summed (ring allreduce, parameter server).

# %% slideshow={"slide_type": "skip"}
results = {"shares": shares, "split_max_abs_diff": split_diff, "boundary": split.boundary,
           "boundary_values": boundary_values, "nodes": nodes, "batch_per_worker": batch_per_worker, "bytes": moved,
           "ceiling": ceiling, "boundary_by_model": {m: p.boundary_values for m, p in profiles.items()},
           "fc_params": {m: p.fc.params for m, p in profiles.items()}, "intensity": intensity, "conv1_uses": conv1_uses, "fc_load": load}
nbt.write_results(results, out_dir)
written = nbt.save_figures({"part_shares": fig_shares, "bytes_per_step": fig_bytes}, out_dir, png=png)
