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
# # 02 · Traffic per iteration: parameter server vs DDP vs Stanza
#
# **What it shows.** The bytes every node sends and receives in one training step, by category
# (gradients, parameters, boundary activations and their gradients, labels, CONV and FC
# allreduce), for a parameter server (ps), PyTorch DDP (ring allreduce) and Stanza with k FC
# workers. Each configuration is a real `torchrun` job on this machine whose communication layer
# counts every byte it moves; beside each count stands the performance model's figure
# (`stanza_core.perf.expected_bytes`). The two must be equal, and the notebook records the
# largest difference over every rank and category (0 bytes). Figures: a table of every run, the
# bytes through the busiest node of each role, and the PS/Stanza ratio against cluster size.
#
# **Paper claim it backs.** Wu et al., *Stanza: Layer Separation for Distributed Training in
# Deep Learning* (arXiv 1812.10624): layer separation reduces the data transferred per
# iteration by *up to 10x* for VGG-16 compared with a parameter server, because the FC
# parameters (89 % of VGG-16's, 96 % of AlexNet's) never cross the network. The claims and
# their tolerances are listed in `reproductions/traffic.yaml`.
#
# **Deviations from the paper**
# - The paper's own traffic figures (cluster sizes, batch sizes, its exact counting) are not
#   available to this project; the model is compared with our own measured counters, and the
#   ratio is shown for N = 2..32 at `per_worker` samples per data worker.
# - Jobs run on one machine (gloo over unshaped loopback), not on EC2: bytes do not depend on the
#   network, only times do, and the step times shown are loopback figures on a shared machine.
# - Inputs are 64x64 (AlexNet) and 32x32 (VGG) with the CONV|FC cut placed after the adaptive
#   pooling (`boundary = "flatten"`): the FC head and the boundary (9216 / 25088 values per
#   sample) are then exactly those of 224x224 inputs, so every byte counted is a 224x224 byte.
# - The parameter server is sharded over all N ranks (one shard per rank, colocated with the
#   workers); a rank's own shard never crosses the network. Allreduce bytes are those of the
#   bandwidth-optimal ring, `2(n-1)/n` of the buffer per member (docs/architecture.md).
# - Weights are randomly initialised and the data is synthetic: bytes per step do not depend on
#   either.

# %% tags=["parameters"]
models: list[str] = ["alexnet"]  # zoo names to measure (the paper's: alexnet, vgg16)
nodes: list[int] = [4]  # cluster sizes N (processes on this machine)
fc_workers: list[int] = [1, 2]  # the k values of stanza, FC workers per run; each needs N of at least 2k
per_worker: int = 32  # samples per data worker per step (the global batch is this times N, or N - k)
steps: int = 3  # steps per job; the first is warm-up, bytes are per step
image_size: int = 0  # square input side; 0: each model's smallest that keeps the 224x224 bytes
num_classes: int = 1000  # outputs of the last FC layer (ImageNet: 1000)
boundary: str = "flatten"  # where stanza cuts CONV|FC ("flatten": after the adaptive pool, as at 224)
device: str = "cpu"  # where the jobs compute (bytes do not depend on it)
png: bool = True  # also export PNG figures (needs a Chromium; skipped with a note otherwise)
out_dir: str = "../reproductions/out/traffic"  # where results.json and the figures are written

# %%
import stanza_core.nbtools as nbt
from stanza_core import viz
from stanza_core.experiments import traffic

configs = traffic.plan(models, nodes, fc_workers, per_worker=per_worker, steps=steps, image_size=image_size,
                       num_classes=num_classes, boundary=boundary, device=device)

# %%
runs = traffic.measure(configs)
curves = traffic.paper_model_curves(models, per_worker=per_worker, num_classes=num_classes)
results = traffic.results(runs, curves, dict(models=models, nodes=nodes, fc_workers=fc_workers, per_worker=per_worker,
                                             steps=steps, num_classes=num_classes, boundary=boundary))
nbt.write_results(results, out_dir)
figs = viz.traffic_figures(results)
nbt.save_figures(figs, out_dir, png=png)
print(f"largest |measured - model| over every rank and category: {results['max_abs_diff_bytes']} bytes")

# %% [markdown]
# Every run: the cluster's bytes per step as counted and as modelled, their largest per-rank,
# per-category difference, the busiest node, and how many times more a parameter server moves.

# %%
figs["table"]

# %% [markdown]
# Bytes through the busiest node of each role (bars: counted; diamonds: the model). ps and ddp
# move the whole model's gradients (and ps its parameters) through every node; Stanza's CONV
# workers move only the CONV gradients plus one boundary activation per sample, and its FC
# workers the activations of the CONV workers they serve. With k = 2 the FC workers also
# allreduce the FC gradients between them, which is why more FC workers cost traffic.

# %%
figs["bytes"]

# %% [markdown]
# PS bytes over Stanza bytes per step (k = 1), from the model for N = 2..32 and, as markers, from
# the runs above. The cluster-total ratio falls from very large values at N = 2 (one CONV worker:
# no allreduce at all) towards the ratio of whole-model to CONV-part gradients; the dashed line
# is the paper's "up to 10x" for VGG-16.

# %%
figs["ratio"]
