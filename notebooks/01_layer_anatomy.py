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
# # 01 · Layer anatomy: parameters sit in the FC head, compute in the CONV body
#
# **What it shows.** For each model: the parameters and forward FLOPs of every layer, the totals
# of the CONV body and of the FC head, and the size of the boundary tensor that layer separation
# sends from one to the other. Figures: a table of the key numbers, the CONV/FC shares of
# parameters and FLOPs next to the bytes each part would move, the per-layer profile (log scale,
# boundary dashed) and, with `time_layers`, measured forward/backward time per part.
#
# **Paper claim it backs.** Wu et al., *Stanza: Layer Separation for Distributed Training in
# Deep Learning* (arXiv 1812.10624), motivation: CNNs keep most of their parameters in the fully
# connected layers and spend most of their computation in the convolutional layers, so
# synchronising FC parameters dominates the traffic of data-parallel training while the FC
# layers contribute little compute. Reference numbers (torchvision definitions, 224x224 input,
# 1000 classes): AlexNet 2.47 M CONV / 58.63 M FC parameters (FC 96.0 % of parameters, 8.2 % of
# forward FLOPs, boundary 9216 values); VGG-16 14.71 M / 123.64 M (89.4 %, 0.8 %, 25088 values);
# VGG-19 20.02 M CONV parameters; ResNet-50, the counter-example, 23.51 M / 2.05 M (8.0 %).
# The claims and their tolerances are listed in `reproductions/anatomy.yaml`.
#
# **Deviations from the paper**
# - The paper's own figure and table numbers for this analysis are not available to this
#   project; the reference numbers above are computed from the torchvision model definitions.
# - torchvision's AlexNet is the single-tower variant of Krizhevsky's "one weird trick" paper
#   (61.1 M parameters, 64 filters in the first layer), not the two-GPU network of 2012.
# - FLOPs come from `torch.utils.flop_counter`: a multiply-add is 2 FLOPs and only convolutions
#   and matrix products count; ReLU, pooling, batch norm and residual additions count 0.
# - The CONV|FC boundary is chosen by `stanza_core.split_model`'s rule (the cut that minimises a
#   CONV worker's bytes per step); for AlexNet/VGG it is the paper's features|classifier cut.
#   Below 224 pixels the boundary is the tensor before the adaptive pooling, which is smaller.
# - Weights are randomly initialised (counts and FLOPs do not depend on their values); timings
#   are measured on the device this notebook runs on, not on the paper's V100s.

# %% [markdown]
# ## Layer separation in one picture
#
# ```
#            CONV workers (ranks 0 .. N-k-1)                 FC workers (ranks N-k .. N-1)
#   images -> [CONV body] --activations a_i, labels y_i-->  [FC head]  -> loss
#             (little of the params,                        (most of the params,
#              most of the FLOPs)  <--gradient dL/da_i---    little of the FLOPs)
#   CONV gradients: allreduce among the CONV workers        FC gradients: allreduce among the
#   (small: P_conv values)                                   k FC workers (none if k = 1)
# ```
#
# * **Roles.** A *CONV worker* holds a copy of the CONV body and trains it data-parallel on its
#   slice of the global batch. An *FC worker* holds a copy of the FC head and trains it on the
#   boundary activations its CONV workers send it. FC parameters never cross the network.
# * **k** is the number of FC workers; the other N - k nodes are CONV workers.
# * **Who serves whom.** CONV worker i sends to FC worker `i % k` (counting FC workers from 0),
#   which spreads the CONV workers over the FC workers to within one. The project computes this
#   in one place only, `stanza_core.topology.Topology.fc_worker_of`; notebook 02 draws it.
#
# This notebook measures what makes the design pay off: how parameters and FLOPs divide between
# the two sides of the boundary, and how big the boundary tensor is.
#
# **Predict, then run.** Before running: AlexNet has 61.1 M parameters and its head is three
# fully connected layers (9216 -> 4096 -> 4096 -> 1000). Estimate the head's parameters
# (9216 x 4096 + 4096 x 4096 + 4096 x 1000, plus biases) and its share. Then check the table.

# %% tags=["parameters"]
models: list[str] = ["alexnet", "vgg16", "vgg19", "resnet50"]  # zoo names to profile (stanza_core.MODEL_NAMES)
image_size: int = 224  # square input side in pixels (the paper's ImageNet setting: 224)
num_classes: int = 1000  # outputs of the last FC layer (ImageNet: 1000)
batch_size: int = 32  # samples per CONV worker: sets the automatic boundary and the timing batch
time_layers: bool = False  # also measure forward/backward seconds per sample of each part
device: str = "auto"  # where time_layers measures: auto (cuda if available), cpu or cuda
png: bool = True  # also export PNG figures (needs a Chromium; skipped with a note otherwise)
out_dir: str = "../reproductions/out/anatomy"  # where results.json and the figures are written

# %%
import stanza_core.nbtools as nbt
from stanza_core import viz
from stanza_core.experiments import anatomy

profiles = anatomy.profile_models(models, image_size=image_size, num_classes=num_classes,
                                  batch_size=batch_size, time=time_layers, device=device)

# %%
results = anatomy.anatomy_results(profiles)
nbt.write_results(results, out_dir)
figs = viz.anatomy_figures(profiles)
nbt.save_figures(figs, out_dir, png=png)

# %% [markdown]
# The key numbers. *FC share of params* is large for AlexNet and VGG and small for ResNet-50,
# whose head is a single 2048x1000 layer after global pooling.
#
# **What the table says.** Your estimate for AlexNet's head, 58.6 M of 61.1 M parameters (96 %),
# is in the *FC params* column; ResNet-50 keeps only 8 % of its parameters in its head, so
# layer separation has little to save there.

# %%
figs["table"]

# %% [markdown]
# **Predict, then run.** An fp32 gradient costs 4 bytes per parameter. How many MB is a full
# gradient of AlexNet's FC head? How many kB is one boundary activation (9216 values)?
#
# Left and middle: the FC head holds most parameters but does under 9 % of the FLOPs (AlexNet
# 8.2 %, VGG-16 0.8 %).
# Right: a data-parallel step syncs a full gradient of each part (hundreds of MB for the FC
# head of AlexNet/VGG), while layer separation sends one boundary activation per sample
# (37 kB for AlexNet, 100 kB for VGG-16) to the FC workers and keeps the FC gradient where it is.

# %%
figs["shares"]

# %% [markdown]
# **What the figure says.** 58.6 M x 4 B = 235 MB of FC gradient against 9216 x 4 B = 37 kB of
# activation per sample: even at 32 samples per worker the activations (1.2 MB) are about 200
# times smaller than the head's gradient. A ring allreduce sends about twice the gradient per
# node (2(n-1)/n x 235 MB) while a CONV worker sends its activations once (and receives their
# gradients once), so in bytes sent per CONV worker layer separation saves about 400 times on
# the head in a large cluster (2(n-1)/n x 200: 350 times at n = 8). The FC worker is the
# exception: it sends back the activation gradients of every CONV worker it serves,
# (n - 1) x 1.2 MB with one FC worker, so it saves only about 400 / n times: 50 at n = 8
# (notebook 02 has the exact formulas).
#
# Per layer (log scale). The dashed line is the boundary: blue layers run on the CONV workers,
# red layers on the FC workers. **What it says:** parameters jump up by orders of magnitude
# right after the boundary while FLOPs drop; the boundary sits where the convolutions end
# (`stanza_core.split_model` picks the cut that minimises a CONV worker's bytes per step; tutorial
# T1 recomputes that choice by hand).

# %%
figs["layers"]

# %% [markdown]
# Measured time per sample of each part (empty unless `time_layers` is true).

# %%
figs["times"]
