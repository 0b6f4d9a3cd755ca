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
# # 08 · Node-assignment explorer: how many FC workers, and is Stanza worth it here?
#
# **What it shows.** An interactive view of the performance model (`stanza_core.perf`). Pick a
# model, a cluster (nodes, link bandwidth, latency, device) and a global batch; the explorer
# predicts the throughput of a parameter server, of DDP and of Stanza for every number k of FC
# workers, names the best assignment (the paper's offline optimisation, solved exhaustively),
# breaks one step into its activities, shows the bytes each node moves by category, and draws who
# sends what to whom. Executed headlessly (papermill), it records the model's answer for the
# parameters below and saves the figures.
#
# **Paper claim it backs.** Wu et al., *Stanza: Layer Separation for Distributed Training in
# Deep Learning* (arXiv 1812.10624): a performance model predicts the throughput of each split of
# N nodes into CONV and FC workers, and the best split is chosen offline; Stanza is 1.34x to
# 13.9x faster than a parameter server on 10 Gb/s (EC2, V100). The claims are listed in
# `reproductions/explorer.yaml`.
#
# **Deviations from the paper**
# - The paper's performance model itself (its equations) is not available to this project; the
#   model used here is the project's own, written out in docs/performance-model.md (alpha-beta
#   links, ring allreduce, bucketed overlap of allreduce with backward, pipelined activation
#   exchange).
# - Device speeds come from a table of vendor peaks times assumed efficiencies (FLOPs counted
#   from the torchvision definitions), not from measurements on the paper's machines.
# - k runs over 1..N/2 only: the training engine refuses an FC worker that would serve no CONV
#   worker, so every assignment shown can be run.
# - The recommendation ranks by predicted samples per second only; it does not weigh memory
#   (an FC worker holds the whole FC head and its optimizer state).

# %% tags=["parameters"]
models: list[str] = ["alexnet", "vgg16", "vgg19", "resnet50"]  # models the model menu offers
model: str = "vgg16"  # model selected at start
nodes: int = 8  # N, nodes in the cluster (one accelerator each)
bandwidth_gbps: float = 10.0  # link bandwidth per node and direction, Gb/s (the paper: 10, 40, 100)
latency_us: float = 50.0  # per-message cost, microseconds
global_batch: int = 256  # samples per step over the whole cluster
device: str = "v100"  # device profile, a row of stanza_core.perf.DEVICE_TABLE (v100, a100, h100)
fc_workers: int = 0  # k shown at start; 0: the optimiser's best k
strategy: str = "stanza"  # whose communication the diagram draws: stanza, ddp or ps
image_size: int = 224  # input side the FLOPs are counted at
max_nodes: int = 64  # upper end of the nodes slider
fc_conv_share: float = 0.0  # chosen stanza: each FC worker's share of the global batch on the CONV body (0: the paper)
micro_batches: int = 1  # chosen stanza: micro-batches M of the pipelined exchange (1, 2, 4 or 8)
compression: str = "fp32|none"  # chosen stanza: boundary dtype | CONV gradient compression
search_beyond: bool = False  # the optimiser also searches each FC worker's share and M (not only k)
allow_compression: bool = False  # let the optimiser recommend compressed (not exact) training
png: bool = True  # also export PNG figures (needs a Chromium; skipped with a note otherwise)
out_dir: str = "../reproductions/out/explorer"  # where results.json and the figures are written

# %%
import stanza_core.nbtools as nbt
from stanza_core.widgets import Explorer

explorer = Explorer(models=models, model=model, nodes=nodes, bandwidth_gbps=bandwidth_gbps, latency_us=latency_us,
                    global_batch=global_batch, device=device, fc_workers=fc_workers, strategy=strategy,
                    image_size=image_size, max_nodes=max_nodes, fc_conv_share=fc_conv_share,
                    micro_batches=micro_batches, compression=compression, allow_compression=allow_compression,
                    search_beyond=search_beyond)

# %% [markdown]
# ## How to read it
#
# - **Controls.** *nodes N* is the cluster size; *k FC workers* splits it into N - k CONV workers
#   (data-parallel on the convolutional body) and k FC workers (the fully connected head).
#   *bandwidth* is each node's link to the switch, per direction; *latency* is paid once per
#   message. *global batch* is split over the data workers (N for ps and DDP, N - k for Stanza).
#   *device profile* sets how fast each node computes. *diagram of* picks the strategy drawn.
# - **Beyond the paper.** *FC share of batch*: each FC worker also trains the CONV body on this
#   share of the global batch (snapped to one giving whole samples), so it does not idle;
#   *micro-batches M*: the exchange is pipelined in M chunks; *boundary|grad compr.*: bf16/fp16
#   activations and fp16/bf16/PowerSGD CONV gradients (not exact). They set the chosen Stanza;
#   the optimiser searches k x share x M when *optimiser searches share x M* is ticked, and
#   compression only when *optimiser may compress* is ticked. The status line gives the model's time per redraw.
# - **Recommendation.** The fastest of DDP, the parameter server and Stanza with k = 1..N/2, with
#   its speedups. The k slider follows the recommendation until you move it.
# - **Throughput against k.** Bars: Stanza for each k (outlined: the best; hatched: the k you
#   chose); dashed lines: DDP and the parameter server, which do not depend on k.
# - **Who sends what to whom.** Circles are CONV workers (or, for ps and DDP, workers), squares
#   FC workers. Arrows: boundary activations and labels to the FC worker, activation gradients
#   back. Dotted loops: ring allreduce inside a group. Hover over a node for its bytes per step.
# - **Bytes per node** and **time breakdown** compare ps, DDP and the chosen Stanza k. Activities
#   overlap in time, so the breakdown's rows do not add up to the step.
#
# Things to try: raise the bandwidth from 10 to 100 Gb/s and watch Stanza's lead over DDP
# vanish; switch to resnet50, whose FC head holds 8 % of the parameters, and see how little
# layer separation gains there; raise k and watch the FC allreduce appear and the throughput fall.

# %%
explorer

# %%
results = explorer.results()
nbt.write_results(results, out_dir)
nbt.save_figures(explorer.figures, out_dir, png=png)
