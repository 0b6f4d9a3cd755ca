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
# # T1 · A CNN's anatomy, and where to cut it
#
# *Course on layer separation, part 1 of 8 (T1 anatomy → T2 one step by hand → T3 the same step
# in plain `torch.distributed` → T4 overlap → T5 from bytes to seconds → T6 convergence → T7
# failure modes → T8 GPU against CPU).*
#
# **The idea of this part.** A CNN is two programs glued together: a *CONV body* (convolutions,
# pooling) that turns an image into a feature tensor, and an *FC head* (fully connected layers)
# that turns that tensor into class scores. The two are very different: the body does almost all
# of the arithmetic, the head holds almost all of the parameters. Layer separation (Stanza, Wu et
# al., arXiv 1812.10624) exploits exactly this difference, so we start by measuring it.
#
# You will: split AlexNet with `stanza_core.split_model`, check that `fc(conv(x)) == model(x)`,
# count the parameters and FLOPs on each side, and see why the cut goes where it goes.
#
# Runs in well under a minute on a laptop CPU; no root, no network.

# %% tags=["parameters"]
model_name: str = "alexnet"  # zoo model to dissect (stanza_core.MODEL_NAMES)
image_size: int = 224  # square input side (224: ImageNet, the paper's setting)
batch_size: int = 32  # samples per CONV worker: the split rule weighs activations by it
png: bool = True  # also export PNG figures (needs a Chromium)
out_dir: str = "../reproductions/out/tutorials/t1_anatomy"  # where results.json and figures go

# %%
import torch
import plotly.graph_objects as go

import stanza_core.nbtools as nbt
from stanza_core import get_model, profile_model, split_model
from stanza_core import viz

torch.manual_seed(0)
model = get_model(model_name, num_classes=1000)
model

# %% [markdown]
# ## 1. The split
#
# `split_model` cuts the model into two `nn.Module`s. Its `boundary` is the name of the first
# module on the FC side; the tensor flowing across it is the *boundary activation*, the only
# thing a CONV worker will ever send to an FC worker.

# %%
split = split_model(model, input_shape=(3, image_size, image_size), batch_size=batch_size)
print("boundary:", split.boundary)
print("CONV side parameters:", split.conv_param_names()[:4], "...")
print("FC side parameters:  ", split.fc_param_names())

# %% [markdown]
# The split is *exact*: running the two halves one after the other is the same function as the
# whole model. (Evaluation mode turns dropout off, so both runs are deterministic.)

# %%
model.eval()
x = torch.randn(2, 3, image_size, image_size)  # (batch, channels, height, width)
with torch.no_grad():
    a = split.conv(x)  # the boundary activation
    logits_split = split.fc(a)
    logits_whole = model(x)
model.train()
print("boundary activation shape per batch:", tuple(a.shape), "->", a[0].numel(), "values per sample")
max_diff = (logits_split - logits_whole).abs().max().item()
print(f"max |fc(conv(x)) - model(x)| = {max_diff:.2e}")
assert torch.allclose(logits_split, logits_whole, rtol=1e-5, atol=1e-6)

# %% [markdown]
# ## 2. Parameters and FLOPs on each side
#
# `profile_model` walks every layer: its parameters, its forward FLOPs per sample (a
# multiply-add counts 2), and the size of its output.
#
# **Predict first.** AlexNet has about 61 M parameters. What share of them do you expect in the
# three FC layers? And what share of the FLOPs?

# %%
profile = profile_model(model, (3, image_size, image_size), batch_size=batch_size, name=model_name)
P, Pc, Pf = profile.params, profile.conv.params, profile.fc.params
print(f"parameters: CONV {Pc/1e6:.2f} M, FC {Pf/1e6:.2f} M -> FC share {profile.fc_param_share():.1%}")
print(f"forward FLOPs per sample: CONV {profile.conv.flops/1e9:.2f} G, FC {profile.fc.flops/1e9:.3f} G "
      f"-> FC share {profile.fc_flop_share():.1%}")
print(f"boundary: {profile.boundary_values} values = {profile.boundary_bytes/1e3:.1f} kB per sample (fp32)")

# %% [markdown]
# The figure below says it in one picture: the head holds most parameters and does a few
# percent of the FLOPs; a full gradient of the head is hundreds of MB, while one boundary
# activation is tens of kB per sample. Figures here are *computed from the model definition*
# (counts), not measured times.

# %%
figs = {k: v for k, v in viz.anatomy_figures(profile).items() if k in ("table", "shares", "layers")}
figs["shares"]

# %% [markdown]
# ## 3. Where the boundary goes, and why
#
# Any cut after which the FC side has parameters and no convolution is a candidate. With the
# cut after layer $i$, a CONV worker computing $b$ samples moves per step
#
# $$\text{bytes}(i) = \underbrace{2 \cdot 4 b A_i}_{\text{activations out, their gradients back}}
#   + \underbrace{2 \cdot 2 \cdot 4 P_{\text{conv},i}}_{\text{CONV gradient allreduce, sent and received}}$$
#
# with $A_i$ the values per sample leaving layer $i$ and $P_{\text{conv},i}$ the parameters
# before the cut. Both terms count both directions: the activations leave and their gradients
# come back ($4bA_i$ bytes each way); in a ring allreduce among $n$ CONV workers each member sends
# $2\frac{n-1}{n} \cdot 4P_{\text{conv},i}$ bytes and receives as much, about $2 \cdot 4P_{\text{conv},i}$
# each way for large n. (The labels, 8 bytes per sample, are the same at every cut.) Cut too early and the activations are huge (early feature maps are big); cut
# too late and FC layers, with their millions of parameters, end up on the CONV side where they
# must be allreduced. `split_model` picks the cut minimising this sum. Let us recompute it.

# %%
rows = profile.layers
candidates = []
params_before = 0
for i, row in enumerate(rows):
    params_before += row.params
    fc_side = rows[i + 1:]
    if not fc_side or not any(r.params for r in fc_side) or any("Conv" in r.kind for r in fc_side):
        continue
    cost = 2 * 4 * batch_size * row.out_values + 2 * 2 * 4 * params_before  # both directions
    if candidates and (candidates[-1]["A"], candidates[-1]["P_conv"]) == (row.out_values, params_before):
        continue  # a parameter-free layer (ReLU, dropout) in between: the same cut, moved one module
    candidates.append({"cut_after": row.name, "next": fc_side[0].name, "A": row.out_values,
                       "P_conv": params_before, "bytes": cost})
for c in candidates:
    print(f"cut before {c['next']:<14} A = {c['A']:>6}  P_conv = {c['P_conv']/1e6:7.2f} M  "
          f"bytes/step = {c['bytes']/1e6:8.1f} MB")
best = min(candidates, key=lambda c: c["bytes"])
print("cheapest cut: before", best["next"], "| split_model chose:", split.boundary)

# %%
fig = go.Figure(go.Bar(x=[c["next"] for c in candidates], y=[c["bytes"] / 1e6 for c in candidates],
                       marker_color=["#d62728" if c is best else "#1f77b4" for c in candidates]))
fig.update_layout(title=f"{model_name}: bytes a CONV worker moves per step for each candidate cut "
                        f"(modelled, b = {batch_size})",
                  xaxis_title="first module on the FC side", yaxis_title="MB per step", height=420)
figs["cuts"] = fig
fig

# %% [markdown]
# **What the figure says.** The cheapest cut (red) sits right where the convolutions end: one
# step earlier and the activations grow, one step later and a 4096-wide FC layer's parameters
# would be allreduced with the CONV gradients. (Cuts that differ only by a parameter-free module
# such as a ReLU or a dropout move the same bytes; the list keeps the earliest of each.)

# %%
results = {"model": model_name, "image_size": image_size, "boundary": split.boundary,
           "max_abs_diff": max_diff, "conv_params": Pc, "fc_params": Pf,
           "fc_param_share": profile.fc_param_share(), "fc_flop_share": profile.fc_flop_share(),
           "boundary_values": profile.boundary_values, "cheapest_cut": best["next"],
           "candidates": candidates}
nbt.write_results(results, out_dir)
written = nbt.save_figures(figs, out_dir, png=png)

# %% [markdown]
# ## Exercises
#
# Graded lab: `reproductions/out/course/release/lab1/lab1.ipynb`, the student release that
# `make course` builds at the repository root (the exercises without their solutions; nbgrader
# grades what you hand in, see `docs/course.md`).
#
# 1. `fc_param_share(model_name, image_size)`: the FC share of a zoo model's parameters from
#    `split_model` alone. What does it give for `vgg16`? For `resnet50`?
# 2. `ddp_over_stanza_bytes(P, Pc, A, N, b)`: DDP's bytes per step over Stanza's (k = 1), from
#    the formulas. Compare VGG-16 and ResNet-50 at N = 8, b = 32, and say in one sentence (not
#    graded) why layer separation gains little on ResNet-50.
# 3. `boundary_bytes_per_step(model_name, image_size, b)`: what one CONV worker sends across the
#    boundary per step (activations and labels) and receives (activation gradients).
