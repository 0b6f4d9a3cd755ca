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
# # 07 · Performance-model validation: predicted against measured throughput
#
# **What it shows.** For every measured configuration (strategy, k, cluster size, link rate) on
# the emulated cluster, in two families: *the paper's regime* (AlexNet and VGG-16 at 224x224,
# 1000 classes, 32 samples per data worker) whose **communication is measured for real** while
# its **compute is replayed** from the V100 profile D times slower (links at target / D; the
# model predicts them with that same profile, dilated, plus the engine's own CPU seconds per step
# that replay keeps, measured apart at D = 1: what it is judged on is communication; the error
# without those seconds is recorded too), and *the fidelity anchor*, a small model with real compute. For each: the throughput the performance model predicts and the measured one,
# with the error (median and worst over the configurations, per strategy, and the bias: the mean
# signed error). No parameter of the prediction is fitted to the runs: per-part compute times of
# this machine with as many processes computing at once as the configuration runs (timing
# rounds), the optimizer step, the emulated link rate and, replayed, the engine seconds of the
# same configuration measured apart (so those rows are not independent of the engine); a second
# variant adds a fixed per-step overhead
# fitted on the same strategy's runs at the *other* link rates (out of sample). A last table
# fits, per strategy, how far the model's communication term is off and what fixed time per
# step it lacks: the term that is wrong where the prediction misses.
#
# **Paper claim it backs.** Wu et al., *Stanza* (arXiv 1812.10624): node assignment relies on
# a performance model that predicts the throughput of each split of the cluster. The paper's
# own validation figures are not available; `reproductions/model_validation.yaml` records our
# errors against the project's goal (median within 10 %, worst within 20 %).
#
# **Deviations from the paper**
# - Quick mode replays AlexNet on 4 nodes at 10 Gb/s only (ps, ddp, stanza k=1: 3
#   configurations, the runs of notebook 03 shared through the cache; D per configuration from
#   `perf.replay_dilation`: 40 from the links, more where the engine's own seconds, measured once
#   at D = 1, would exceed 5 % of the dilated step); full mode AlexNet and VGG-16 on 4 and 8 nodes at 10 / 25 / 40 /
#   100 Gb/s (48 replayed configurations; hours on 2 cores).
# - The validation runs on CPU processes of one shared machine with shaped virtual links, not
#   on GPUs: contention for the cores, kernel packet processing and scheduling delays are part
#   of what is measured and are not in the model (they show up as the missing fixed time).
# - Quick runs are single 2-3 step measurements: on a shared 2-core machine repeated timings of
#   the same step differ by tens of percent, which bounds the agreement that can be shown.
# - `bench_json` adds bench results measured elsewhere (e.g. `benchmarks/results/*.json`); their
#   timing rounds, when missing, are measured now, not beside those runs.

# %% tags=["parameters"]
model: str = "cifar_alexnet"  # zoo model run on the emulated cluster
image_size: int = 32  # square input of the measured runs (pixels)
num_classes: int = 10  # outputs of the measured model
nodes: list[int] = [3]  # emulated cluster sizes (empty: only bench_json)
strategies: list[str] = ["ps", "ddp", "stanza"]  # strategies measured
fc_workers: list[int] = [1]  # FC workers k of stanza (those from 1 to N/2 run at each N)
global_batch: int = 12  # samples per step, divisible by the data workers of every configuration
steps: int = 2  # steps per measured run, warmup included
warmup: int = 1  # steps left out of the measured throughput
target_gbps: list[float] = [5.0, 10.0]  # target bandwidths, mapped to emulated link rates
target_device: str = "v100"  # accelerator the targets belong to (perf device table)
repeats: int = 1  # measured runs per configuration and target (interleaved)
latency_us: float = 50.0  # per-message latency the model assumes (plus the links added delay)
bench_json: list[str] = []  # bench results files (python -m stanza_core.bench --out) validated as well
replay_models: list[str] = ["alexnet"]  # paper-regime models, replayed compute (224x224, 1000 classes)
replay_nodes: list[int] = [4]  # emulated cluster sizes of the replayed runs
replay_gbps: list[float] = [10.0]  # target bandwidths of the replayed runs
replay_device: str = "v100"  # device profile the replayed compute follows (perf device table)
min_dilation: float = 1.0  # smallest D (perf.replay_dilation picks D so this CPU keeps up); links run at target / D
replay_engine: bool = True  # raise D per configuration so the engine CPU seconds stay within 5 % of a step (measured once, cached)
replay_steps: int = 2  # steps per replayed run, warmup included
replay_image_size: int = 224  # input of the replayed runs (the paper's ImageNet setting)
replay_num_classes: int = 1000  # outputs of the replayed models
batch_per_worker: int = 32  # samples per data worker of the replayed runs
measure_runs: bool = True  # run the measured cells (False, or no root/tc here: modelled figures only)
cache_dir: str = "auto"  # measured runs cache: auto (beside out_dir, shared by notebooks), "" (none) or a folder
png: bool = True  # also export PNG figures (needs a Chromium)
out_dir: str = "../reproductions/out/model_validation"  # where results.json and the figures go

# %%
import stanza_core.nbtools as nbt
from stanza_core import viz
from stanza_core.runs import cache
from stanza_core.experiments import validation

params = nbt.experiment_params(validation.ValidationParams, globals())

# %%
benches = validation.run_measured(params, cache.cache_dir_for(cache_dir, out_dir)) + validation.load_benches(params)

# %%
results = validation.validate(benches, latency_s=latency_us * 1e-6)
nbt.write_results(results, out_dir)
figs = viz.validation_figures(results)
nbt.save_figures(figs, out_dir, png=png)
results["summary"]

# %% [markdown]
# Predicted against measured samples/s. Filled markers: no parameter fitted; open markers:
# with the per-step overhead fitted at the other link rates. Dotted and dashed lines: +-10 % and
# +-20 %.

# %%
figs["scatter"]

# %% [markdown]
# The replayed runs with the engine held apart. Replay and the model share compute by
# construction (the same device profile), so these errors validate the network and schedule
# model, not compute. The dilation rule lets the engine's own CPU seconds reach 5 % of a
# replayed step, so the error against the model's step alone partly measures that budget;
# here: the runs whose measured engine share is at most 1 %, and every run with its engine
# seconds subtracted from its measured step, each with its median |error| and bias.

# %%
results["replayed_engine_apart"]

# %% [markdown]
# The error of every configuration. Positive errors mean the model is optimistic.

# %%
figs["errors"]

# %% [markdown]
# Which term is wrong: a communication scale near 1 with a positive fixed time says the
# model's link and collective costs are right and a fixed per-step cost is missing (engine
# glue, waking processes on shared cores); a scale well above 1 says the strategy moves its
# bytes slower than the links allow.

# %%
figs["terms"]
