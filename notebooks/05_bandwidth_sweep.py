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
# # 05 · Bandwidth sweep: where layer separation pays off
#
# **What it shows.** Throughput of ps, ddp and stanza at 10, 25, 40 and 100 Gb/s:
# (a) on the emulated cluster, each target mapped to the link rate that gives this machine the
# target's communication-to-compute ratio: measured where it is measured, and predicted by the
# performance model (with this machine's profile) at every target; (b) at the paper's scale,
# AlexNet and VGG-16 on 16 V100s, stanza's speedups over ps and ddp beside the paper's; (c) the
# model's best assignment over 1-400 Gb/s and 2-1,024 nodes.
#
# **Paper claim it backs.** Wu et al., *Stanza* (arXiv 1812.10624): 1.34x-13.9x over PS at
# 10 Gb/s (EC2 V100, measured); at 100 Gb/s, by numerical simulation, 1.55x for AlexNet and
# 1.72x for VGG-16; bandwidths studied 10, 40 and 100 Gb/s. Claims and tolerances:
# `reproductions/bandwidth_sweep.yaml`.
#
# **Deviations from the paper**
# - The paper-regime runs replay compute from the V100 row of the device table, row v3 (every run
#   this notebook makes or reuses from the store is of the current measurement version; older stored
#   runs, which replayed the V100 row v2, appear only in `docs/results.md`, labelled), with D per configuration
#   from `perf.replay_dilation` (the links: 40 for 4 nodes at 10 Gb/s, 400 at 100 Gb/s; the
#   engine's own seconds raise it where a step is short); quick mode replays
#   AlexNet on 4 nodes at 10 Gb/s only (notebook 03's runs), full mode VGG-16 and every target,
#   and the paper's 16 nodes at 10 and 100 Gb/s (ps, ddp, stanza k = 1 and 2: runs of notebook 03).
# - Measured runs use a small AlexNet-shaped model on CPU processes of one machine; a target
#   bandwidth is emulated by scaling the link rate with the V100/CPU step-time ratio, the V100
#   time coming from the device table (an assumption). Targets whose emulated rate exceeds what
#   one machine can shape (about 1 Gbit/s per link with jumbo frames) are modelled only: a V100 step
#   of this small model is short, so a target maps to a fast link here (the notebook prints each
#   target's emulated rate), and the faster targets are modelled only.
# - Quick runs measure 5 and 10 Gb/s, one run each, 2 steps; 25, 40 and 100 Gb/s are modelled.
# - The paper's simulator, its PS deployment and its batch size are not available. The paper-scale
#   figure uses the workbench's strong baseline (a PS sharded over all nodes, blocking push, 32
#   samples per data worker, line rate, V100 table device); the section "What the paper must have
#   assumed" states the PS the paper's figures are judged under (the paper_ps_* parameters, chosen
#   by the rule in `reproductions/bandwidth_sweep.yaml`) and keeps the sharded one beside it.
# - Above a few hundred nodes the model's flat ring allreduce (2(N-1) latencies per bucket) is
#   pessimistic for ddp; NCCL would switch to tree algorithms (docs/performance-model.md).

# %% tags=["parameters"]
model: str = "cifar_alexnet"  # zoo model run on the emulated cluster
image_size: int = 32  # square input of the measured runs (pixels)
num_classes: int = 10  # outputs of the measured model
nodes: int = 3  # emulated nodes
strategies: list[str] = ["ps", "ddp", "stanza"]  # strategies measured and predicted
fc_workers: int = 1  # FC workers k of stanza, 1 to N/2
global_batch: int = 12  # samples per step, divisible by N and N - k
steps: int = 2  # steps per measured run, warmup included
warmup: int = 1  # steps left out of the measured throughput
target_gbps: list[float] = [5.0, 10.0, 25.0, 40.0, 100.0]  # target bandwidths (Gb/s per node and direction)
measure_gbps: list[float] = [5.0, 10.0]  # targets measured on the emulated cluster (a subset; the rest modelled)
target_device: str = "v100"  # accelerator the targets belong to (perf device table)
repeats: int = 1  # measured runs per configuration and target (interleaved)
paper_models: list[str] = ["alexnet", "vgg16"]  # models at the scale of the paper (224x224, 1000 classes)
paper_nodes: int = 16  # cluster size of the paper-scale comparison
sweep_gbps: list[float] = [1.0, 2.5, 5.0, 10.0, 25.0, 40.0, 100.0, 200.0, 400.0]  # bandwidths of the sweep
sweep_nodes: list[int] = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]  # cluster sizes of the sweep
batch_per_worker: int = 32  # modelled samples per data worker
paper_ps_share: float = 1.0  # the stated PS: servers S as a share of the N workers
paper_ps_placement: str = "colocated"  # the stated PS: colocated (on the workers) or dedicated (beside them)
paper_ps_overlap: bool = False  # the stated PS: overlapped push (False: blocking)
paper_ps_batch: int = 32  # the stated PS: samples per worker (ps and stanza alike)
paper_ps_goodput: float = 1.0  # the stated PS: share of the line rate every transfer gets
paper_ps_range: bool = True  # also the 10 Gb/s range's two ends under the stated PS
paper_ps_replayed: str = ""  # the committed replay of the stated PS, relative to this folder ("": none)
replay_models: list[str] = ["alexnet"]  # paper-regime models, replayed compute (224x224, 1000 classes)
replay_nodes: list[int] = [4]  # emulated cluster sizes of the replayed runs
replay_gbps: list[float] = [10.0]  # target bandwidths of the replayed runs (full mode: all four)
paper_replay_gbps: list[float] = []  # targets replayed on paper_nodes nodes, like replay_nodes (full mode: 10 and 100)
paper_replay_fc_workers: list[int] = []  # stanza's k in those runs (empty: fc_workers; full mode: 1 and 2)
replay_device: str = "v100"  # device profile the replayed compute follows (perf device table)
min_dilation: float = 1.0  # smallest D (perf.replay_dilation picks D so this CPU keeps up); links run at target / D
replay_engine: bool = True  # raise D per configuration so the engine CPU seconds stay within 5 % of a step (measured once, cached)
replay_steps: int = 2  # steps per replayed run, warmup included
replay_image_size: int = 224  # input of the replayed runs (the paper's ImageNet setting)
replay_num_classes: int = 1000  # outputs of the replayed models
measure_runs: bool = True  # run the measured cells (False, or no root/tc here: modelled figures only)
cache_dir: str = "auto"  # measured runs cache: auto (beside out_dir, shared by notebooks), "" (none) or a folder
png: bool = True  # also export PNG figures (needs a Chromium)
out_dir: str = "../reproductions/out/bandwidth_sweep"  # where results.json and the figures go

# %%
import stanza_core.nbtools as nbt
from stanza_core import viz
from stanza_core.runs import cache
from stanza_core.experiments import sweep

params = nbt.experiment_params(sweep.SweepParams, globals())

# %%
bench = sweep.run_measured(params, cache.cache_dir_for(cache_dir, out_dir))
replayed = sweep.run_replayed(params, cache.cache_dir_for(cache_dir, out_dir))

# %%
emulated = sweep.emulated(params, bench)
paper = sweep.paper_scale(params)
swept = sweep.model_sweep(params)
assumed = sweep.paper_ps(params)
results = sweep.sweep_results(params, bench, emulated, paper, swept, replayed, assumed)
nbt.write_results(results, out_dir)
figs = viz.sweep_figures(results)
nbt.save_figures(figs, out_dir, png=png)

# %% [markdown]
# The paper's regime at 224x224: samples/s on the target cluster (measured x D) at each replayed
# target; communication measured for real, compute replayed (the caption says from which
# profile, with which D). Quick mode replays AlexNet at 10 Gb/s only (the runs of notebook 03,
# shared through the cache); full mode AlexNet and VGG-16 at all four targets on 4 and 8 nodes,
# and on 16 nodes at 10 and 100 Gb/s.

# %%
figs["replayed"]

# %% [markdown]
# The fidelity anchor, real compute on the emulated cluster: measured samples/s (markers) and the model with this machine's profile
# (dashed) against the target bandwidth. ddp and ps grow almost in proportion to the bandwidth
# (they are bound by moving the FC head's gradients and parameters); stanza moves only the CONV
# gradients and the boundary activations, so it leads at every target, by less as bandwidth grows.

# %%
figs["emulated"]

# %% [markdown]
# At the paper's scale (16 V100s): stanza's speedup over ps and over ddp shrinks as bandwidth
# grows. The paper's figures are drawn in purple.

# %%
figs["paper_scale"]

# %% [markdown]
# Beyond the paper: the model's best assignment (k = FC workers) and its speedup over ddp from 1
# to 400 Gb/s and 2 to 1,024 nodes. Stanza wins wherever bandwidth is scarce for the FC head's
# gradients; at hundreds of nodes k must grow, as one FC worker's ingress link saturates.

# %%
figs["sweep"]

# %% [markdown]
# ## What the paper must have assumed
#
# The paper compares Stanza with a parameter server it does not describe, and the PS decides its
# 100 Gb/s figures. Everything in this section is **modelled** (the performance model, V100
# table row), 16 workers at 100 Gb/s. An assumption is five things: servers S (as a share of the
# N workers), colocated on the workers or dedicated beside them, blocking or overlapped push,
# samples per worker, and goodput (the share of the line rate every transfer gets, stanza's too).
# The stated set (the `paper_ps_*` parameters) was chosen by the rule written in
# `reproductions/bandwidth_sweep.yaml` (also in `results.json`, `paper_ps.rule`): the first set under
# which both figures lie within their bound (± 0.25), or, where none does, the set whose worse
# figure lies nearest. A figure that chose the set is *explained under a stated assumption* where it
# lies inside its bound and *differs* where it does not, never "agrees". With the V100 row v3 no set
# of the search holds both (`paper_ps.both_hold_anywhere` is 0), so the rule takes its fallback and
# both figures differ (`paper_ps.at_100`). The workbench's own strong baseline (S = N colocated,
# blocking, 32 samples, line rate) stays beside it.
#
# First, one step decomposed: on top, each strategy's step as the step with free communication
# plus the communication it cannot hide; below, each activity's busy time on its busiest node
# (activities overlap, so these do not add up to the step).

# %%
figs["ps_decomposition"]

# %% [markdown]
# Stanza's speedup against the PS assumption: servers S from 16 down to 2 (colocated solid,
# dedicated dashed), samples per worker and goodput, each at the stated set's other values. The
# bands are the paper's figures +- 0.25 (the claims' bound).

# %%
figs["ps_sweep"]

# %% [markdown]
# Every set of the search, each cell AlexNet / VGG-16: shaded (✓) where both figures hold, ★ the
# stated set. With the V100 row v3 no cell is shaded (`paper_ps.region` is empty): the star marks
# the rule's fallback, the set whose worse figure lies nearest. The rule takes only deployments the
# engine runs (dedicated servers, or S = N colocated), so a shaded colocated cell with S < N would
# be shown but not chosen.

# %%
figs["ps_region"]

# %%
sweep.paper_ps_summary(assumed)

# %% [markdown]
# The same PS **replayed**, so the answer is not the model's alone: the real engine on 16 emulated
# nodes (2N ranks for the dedicated servers) with every byte over links shaped to 100 Gb/s / D, the
# compute replayed from the V100 row (`benchmarks/paper_regime_replay.py --configs ps_sN,stanza<k>
# --out FILE`, FILE named by the `paper_ps_replayed` parameter; each run's D, timed steps, commit and
# finish time are in it). Per model: the replayed speedup beside the model's for the same runs, and
# each run's step against the model; a model not replayed yet says so. No such replay is committed
# yet (docs/performance-model.md, "The paper's regime": it needs more memory than 24 GiB), so the
# summary below says so for both models.

# %%
sweep.paper_ps_summary(assumed, "replayed")

# %% [markdown]
# What the search did not use: the 10 Gb/s range (paper: 1.34x-13.9x) under the same PS, its two
# ends chosen before they were computed (`reproductions/bandwidth_sweep.yaml`): the low end the
# smallest of ResNet-50, GoogLeNet and Inception-v3 at 64 samples per worker on 16 nodes, the high
# end AlexNet on 4 nodes at the set's own batch; each is judged within 25 % of the paper's end. The
# low end keeps 64 samples per worker, not the stated set's 16, because the YAML fixed it before any
# end was computed (a small FC head at a large batch is where the PS's share of the step is
# smallest); docs/results.md shows the low end at 16 samples beside it, reported only.

# %%
sweep.paper_ps_summary(assumed, "range_10")
