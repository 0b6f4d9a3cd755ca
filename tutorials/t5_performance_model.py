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
# # T5 · From bytes to seconds: predict before you run, then choose k
#
# *Course on layer separation, part 5 of 8. Before: T4 (overlap). Next: T6 (convergence).*
#
# **The idea of this part.** T2 counted the bytes of a step exactly. To turn bytes into
# seconds we need a model of the network and of the devices. `stanza_core.perf` is that model
# (written out in `docs/performance-model.md`):
#
# * a **link** carries a message of m bytes in `latency + m / B` (B: bytes per second, each
#   direction; every node has one link to a non-blocking switch);
# * a **ring allreduce** of S bytes among n ranks takes `2 (n-1)/n * S / B + 2 (n-1) latency`;
# * **compute** of each part takes the time a device profile gives it (here the V100 row of the
#   device table, derived from FLOPs; or times measured on this machine);
# * a **step** combines them with the overlap the engine really has (T4): the FC worker's
#   pipeline, bucketed CONV allreduce during the backward.
#
# Everything in this notebook is *modelled*, except section 4, which runs one small job and says
# which numbers are measured. Runs in well under a minute; no root.

# %% tags=["parameters"]
model: str = "vgg16"  # zoo model the cluster trains (224x224 counts)
nodes: int = 16  # N: nodes of the modelled cluster
gbps: float = 10.0  # link bandwidth per node and direction, Gb/s
device: str = "v100"  # device-table row for the compute times
batch_per_worker: int = 32  # samples per data worker per step
bandwidths: list[float] = [1.0, 10.0, 40.0, 100.0]  # Gb/s values for the choice of k
png: bool = True  # also export PNG figures (needs a Chromium)
out_dir: str = "../reproductions/out/tutorials/t5_performance_model"  # where results.json and figures go

# %%
import plotly.graph_objects as go

import stanza_core.nbtools as nbt
from stanza_core import perf
from stanza_core.launch import run_job
from stanza_core.viz.assignment import step_breakdown, throughput_vs_k
from stanza_core.variant import Variant

profile = perf.named_profile(model)
cluster = perf.Cluster(nodes, gbps, device=device)
P, Pc, Pf, A = profile.params, profile.conv.params, profile.fc.params, profile.boundary_values
print(f"{model}: P = {P/1e6:.2f} M (CONV {Pc/1e6:.2f} M, FC {Pf/1e6:.2f} M), boundary A = {A} values/sample")

# %% [markdown]
# ## 1. The two primitive costs, by hand
#
# **Predict first.** How long does a 10 Gb/s link take to carry one VGG-16 gradient (553 MB)?
# And a ring allreduce of it among 16 nodes?

# %%
grad_bytes = 4 * P
by_hand_transfer = cluster.latency_s + grad_bytes / (gbps * 1e9 / 8)
by_hand_ring = 2 * (nodes - 1) / nodes * grad_bytes / (gbps * 1e9 / 8) + 2 * (nodes - 1) * cluster.latency_s
print(f"one gradient over one link: by hand {by_hand_transfer:.3f} s | model {cluster.transfer_s(grad_bytes):.3f} s")
print(f"ring allreduce among {nodes}: by hand {by_hand_ring:.3f} s | model {cluster.ring_allreduce_s(grad_bytes, nodes):.3f} s")

# %% [markdown]
# ## 2. Three strategies, one step each
#
# **Predict first.** On 16 V100s with 10 Gb/s links, which is fastest for VGG-16: the parameter
# server, DDP, or Stanza with one FC worker? By roughly how much?

# %%
preds = [perf.predict(profile, cluster, Variant("ps"), batch_per_worker=batch_per_worker),
         perf.predict(profile, cluster, Variant("ddp"), batch_per_worker=batch_per_worker),
         perf.predict(profile, cluster, Variant("stanza", fc_workers=1), batch_per_worker=batch_per_worker)]
for p in preds:
    label = p.strategy + (f" k={p.fc_workers}" if p.fc_workers else "")
    print(f"{label:<10} step {p.iteration_s*1e3:8.1f} ms  {p.throughput:8.0f} samples/s  "
          f"busiest node sends {p.max_node_sent/1e6:8.1f} MB  exposed communication {p.exposed_comm_s*1e3:7.1f} ms")
breakdown = step_breakdown(preds)
breakdown

# %% [markdown]
# **What the figure says** (modelled): ps and DDP spend most of the step moving whole-model
# gradients; Stanza's CONV workers move only the CONV gradients, and its FC worker's work (the
# activations of 15 CONV workers in, their gradients out) is what bounds its step.

# %% [markdown]
# ## 3. Choosing k
#
# More FC workers share the activation traffic and the FC compute, but each extra FC worker is
# one node less computing the CONV body, and k > 1 adds an FC allreduce. The optimiser
# (`perf.best_assignment`) evaluates ddp, ps and every k = 1..N/2 and keeps the fastest.
#
# **Predict first.** Does the best k grow or shrink when the network gets faster?

# %%
choice = perf.best_assignment(profile, cluster, batch_per_worker=batch_per_worker)
print(f"best at {gbps:g} Gb/s: {choice.best.strategy} k={choice.best.fc_workers}, "
      f"{choice.speedup_vs_ps:.2f}x over ps, {choice.speedup_vs_ddp:.2f}x over ddp")
best_k = {}
for bw in bandwidths:
    a = perf.best_assignment(profile, perf.Cluster(nodes, bw, device=device), batch_per_worker=batch_per_worker)
    s = a.best_stanza()
    best_k[str(bw)] = {"winner": a.best.strategy, "winner_k": a.best.fc_workers, "best_stanza_k": s.fc_workers,
                       "speedup_vs_ps": a.speedup_vs_ps}
    print(f"{bw:6g} Gb/s: winner {a.best.strategy} k={a.best.fc_workers}; best stanza k = {s.fc_workers}; "
          f"{a.speedup_vs_ps:.2f}x over ps")
k_figure = throughput_vs_k(choice)
k_figure

# %% [markdown]
# ## 4. Predict, then run (on this machine)
#
# Bytes are the part of the model that must be *exact*: predict the traffic of a small job with
# `perf.expected_bytes`, then run the job and compare, rank by rank. (Times on a shared laptop
# CPU are judged in notebook 07, not here.)

# %%
small = perf.named_profile("cifar_alexnet", image_size=32, num_classes=10, batch_size=4)
predicted = perf.expected_bytes(small, Variant("stanza", fc_workers=1), 4, global_batch=12)
print("predicted bytes per step, cluster total:", perf.totals(predicted)["bytes_per_step"])
measured = run_job(nodes=4, strategy="stanza", model="cifar_alexnet", num_classes=10, image_size=32,
                   fc_workers=1, global_batch=12, steps=2, device="cpu")
print("measured bytes per step, cluster total: ", measured["bytes_per_step"])
exact = all(m["sent"] == p["sent"] and m["recv"] == p["recv"] for m, p in zip(measured["ranks"], predicted))
print("every rank and category equal:", exact)
assert exact

# %%
results = {"model": model, "nodes": nodes, "gbps": gbps, "device": device, "batch_per_worker": batch_per_worker,
           "by_hand": {"transfer_s": by_hand_transfer, "ring_s": by_hand_ring},
           "model_costs": {"transfer_s": cluster.transfer_s(grad_bytes), "ring_s": cluster.ring_allreduce_s(grad_bytes, nodes)},
           "predictions": {p.strategy: {"iteration_s": p.iteration_s, "throughput": p.throughput,
                                        "bytes_per_step": p.bytes_per_step} for p in preds},
           "best": {"strategy": choice.best.strategy, "fc_workers": choice.best.fc_workers},
           "best_k_by_bandwidth": best_k, "bytes_exact": exact,
           "measured_bytes_per_step": measured["bytes_per_step"]}
nbt.write_results(results, out_dir)
written = nbt.save_figures({"breakdown": breakdown, "throughput_vs_k": k_figure}, out_dir, png=png)

# %% [markdown]
# ## Exercises
#
# Graded lab: `reproductions/out/course/release/lab5/lab5.ipynb`, the student release that
# `make course` builds at the repository root (the exercises without their solutions; nbgrader
# grades what you hand in, see `docs/course.md`).
#
# 1. `bandwidth_for_allreduce(nbytes, n, seconds, latency_s)`: the link speed at which a ring
#    allreduce takes a given time (section 1's formula, turned around).
# 2. `best_stanza_k(profile, cluster, batch_per_worker)`: section 3's choice of k with your own
#    loop over `perf.predict`.
# 3. `ps_over_stanza_limit(P, Pc, A, b)`: the limit of PS bytes over Stanza bytes per step as N
#    grows with b samples per worker fixed. Check it against the model at N = 4096 for VGG-16
#    at b = 1 and at b = 32: is the parameter ratio $P/P_c$ the limit at both?
