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
# # T2 · One Stanza step by hand, every message in a ledger
#
# *Course on layer separation, part 2 of 8. Before: T1 (the split). Next: T3 (the same step in
# plain `torch.distributed`).*
#
# **The idea of this part.** Layer separation gives nodes two *roles*. With N nodes and k FC
# workers, the first N - k ranks are **CONV workers**: each holds a copy of the CONV body and
# computes it on its own slice of the global batch. The last k ranks are **FC workers**: each
# holds a copy of the FC head and computes it on the boundary activations that its CONV workers
# send it. CONV worker i is served by one FC worker, chosen by `stanza_core.topology`.
#
# Here we run one training step of N = 3 nodes, k = 1 FC worker and a global batch of G = 6
# samples in *one process*: the "network" is a Python function that copies a tensor and writes
# a line into a ledger (source, destination, category, shape, bytes). Then we check the ledger
# against the performance model's formulas (`perf.expected_bytes`), the gradients against a
# single-process step on the whole batch (`local`), and draw who sends what to whom.
#
# Runs in seconds; no root, no network.

# %% tags=["parameters"]
nodes: int = 3  # N: ranks in the cluster
fc_workers: int = 1  # k: ranks that train the FC head
global_batch: int = 6  # G: samples per step over the whole cluster
image_size: int = 16  # square input side of the tiny CNN
seed: int = 0  # model init, data and dropout masks
png: bool = True  # also export PNG figures (needs a Chromium)
out_dir: str = "../reproductions/out/tutorials/t2_one_step"  # where results.json and figures go

# %%
import copy
import dataclasses
from collections import defaultdict
from fractions import Fraction

import torch
import torch.nn.functional as F

import stanza_core.nbtools as nbt
from stanza_core import get_model, perf, profile_model, split_model, viz
from stanza_core.data import batch_indices, open_dataset
from stanza_core.models import sample_keys
from stanza_core.topology import make_topology
from stanza_core.viz.assignment import assignment_diagram
from stanza_core.variant import Variant

topo = make_topology(Variant("stanza", fc_workers=fc_workers), nodes, global_batch)
b = global_batch // topo.data_workers  # samples per CONV worker
for r in range(nodes):
    role = topo.role(r)
    extra = (f"sends to FC worker {topo.fc_worker_of(r)}, samples {topo.batch_slice(r, global_batch)}"
             if role == "conv_worker" else f"serves CONV workers {topo.served_by(r)}")
    print(f"rank {r}: {role:<11} {extra}")

# %% [markdown]
# ## The model, the batch, and one copy of each part per rank
#
# Every rank starts from the same parameters (same seed). CONV workers hold the CONV body, FC
# workers the FC head; the FC parameters will never be sent anywhere.

# %%
torch.manual_seed(seed)
model = get_model("tiny_cnn", 10)
split = split_model(model, input_shape=(3, image_size, image_size), batch_size=b)
part = {r: copy.deepcopy(split.conv if topo.role(r) == "conv_worker" else split.fc) for r in range(nodes)}
data = open_dataset("synthetic", image_size, 10, seed)
x, y = data.get(batch_indices(data, 0, global_batch, seed, slice(0, global_batch)))  # step 0's batch
print("x", tuple(x.shape), "y", y.tolist())

# %% [markdown]
# ## The ledger: a network that writes down every message
#
# `send` is the only way a tensor moves from one rank to another. An allreduce among n ranks is
# written the way the engine counts it: a ring, in which every member sends `2 (n - 1) / n` of
# the buffer to its neighbour and receives as much. That is the least an allreduce can move per
# rank when the ranks do all the adding themselves (the ring reaches the bound: Patarasuk and
# Yuan, 2009). A network that adds in its switches can do with less: with NCCL's CollNet
# (InfiniBand SHARP) or NVLS (NVSwitch), each GPU sends its buffer about once and receives the
# sum about once, S instead of `2 (n - 1) / n` S, about half at large n. A backend need not run a
# ring: gloo (CPU) uses its ring algorithm by default, while NCCL (GPU) chooses between rings,
# trees and, where the hardware has it, in-network reduction, by message size and cluster shape;
# a tree needs only about log n latency steps instead of the ring's 2 (n - 1), and moves no fewer
# bytes per rank than the ring. The byte counters, here and in the engine, count the ring's
# volume whatever the backend picks.

# %%
ledger = []


def send(src, dst, category, tensor):
    """Deliver a copy of `tensor` from rank src to rank dst and write it in the ledger."""
    ledger.append({"src": src, "dst": dst, "category": category, "shape": tuple(tensor.shape),
                   "bytes": tensor.numel() * tensor.element_size()})
    return tensor.detach().clone()


def ring_allreduce(ranks, category, grads_of):
    """Sum each rank's gradient list over `ranks`; ledger: each member -> next, 2(n-1)/n of the buffer."""
    n = len(ranks)
    if n == 1:
        return
    flat = {r: torch.cat([g.reshape(-1) for g in grads_of(r)]) for r in ranks}
    nbytes = flat[ranks[0]].numel() * 4
    for i, r in enumerate(ranks):
        ledger.append({"src": r, "dst": ranks[(i + 1) % n], "category": category, "shape": (nbytes // 4,),
                       "bytes": Fraction(2 * (n - 1) * nbytes, n)})
    total = sum(flat.values())
    for r in ranks:
        offset = 0
        for g in grads_of(r):
            g.copy_(total[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

# %% [markdown]
# ## The step
#
# **Predict first.** How many messages will the ledger hold, and how many bytes will the CONV
# worker 0 send? (The boundary of this tiny CNN is 16 x 4 x 4 = 256 values per sample.)
#
# 1. Each CONV worker computes the CONV body on its b samples and sends the activations (and the
#    labels) to its FC worker.
# 2. Each FC worker, for each CONV worker it serves, computes the head and the loss of those b
#    samples, `sum of cross-entropies / G` (dividing by the *global* batch makes the sum over
#    all slices the mean loss of the whole batch), backpropagates, and sends the gradient of
#    the loss with respect to the activations back. Its FC gradients add up over the CONV
#    workers it serves.
# 3. Each CONV worker backpropagates that gradient through its CONV body.
# 4. CONV gradients are allreduced among the CONV workers; FC gradients among the FC workers
#    (only if k > 1). Every rank then applies SGD to its own part (not shown: it is local).

# %%
acts, inbox = {}, defaultdict(list)
for i in topo.conv_ranks:  # 1. CONV forward, activations and labels out
    pos = topo.batch_slice(i, global_batch)
    acts[i] = part[i](x[pos])  # (b, 16, 4, 4)
    j = topo.fc_worker_of(i)
    inbox[j].append((i, send(i, j, "activations", acts[i]), send(i, j, "labels", y[pos]), pos))

loss, grads_back = 0.0, {}
for j in topo.fc_ranks:  # 2. FC forward + backward per served CONV worker, gradients back at once
    for i, a, labels, pos in inbox[j]:
        a.requires_grad_(True)
        with sample_keys(seed, 0, torch.arange(pos.start, pos.stop)):  # the same dropout mask as local
            share = F.cross_entropy(part[j](a), labels, reduction="sum") / global_batch
        share.backward()
        loss += share.item()
        grads_back[i] = send(j, i, "activation_grads", a.grad)

for i in topo.conv_ranks:  # 3. CONV backward with the gradient that came back
    acts[i].backward(grads_back[i])

# 4. allreduce of CONV gradients among CONV workers, of FC gradients among FC workers
ring_allreduce(topo.conv_ranks, "conv_grads", lambda r: [p.grad for p in part[r].parameters()])
ring_allreduce(topo.fc_ranks, "fc_grads", lambda r: [p.grad for p in part[r].parameters()])
print(f"loss of the global batch: {loss:.6f}; {len(ledger)} messages")

# %% [markdown]
# ## The ledger

# %%
for m in ledger:
    print(f"rank {m['src']} -> rank {m['dst']}  {m['category']:<17} shape {str(m['shape']):<17} "
          f"{float(m['bytes']):>9,.0f} B")

# %% [markdown]
# ## Check 1: the ledger equals the performance model's formulas
#
# `perf.expected_bytes` writes the traffic table of `docs/architecture.md` as code: per rank and
# category, bytes sent and received per step. The engine's byte counters must equal it exactly
# (tested); here the hand-made ledger must too.

# %%
rows = [{"rank": r, "role": topo.role(r), "sent": defaultdict(Fraction), "recv": defaultdict(Fraction)}
        for r in range(nodes)]
for m in ledger:
    rows[m["src"]]["sent"][m["category"]] += m["bytes"]
    rows[m["dst"]]["recv"][m["category"]] += m["bytes"]
ledger_rows = [{**r, "sent": {c: round(v) for c, v in r["sent"].items()},
                "recv": {c: round(v) for c, v in r["recv"].items()}} for r in rows]
profile = profile_model(model, (3, image_size, image_size), batch_size=b, name="tiny_cnn")
expected = perf.expected_bytes(profile, Variant("stanza", fc_workers=fc_workers), nodes, global_batch=global_batch)
for got, want in zip(ledger_rows, expected):
    print(f"rank {got['rank']}: ledger sent {got['sent']}\n        model  sent {want['sent']}")
ledger_equals_model = ledger_rows == expected
print("ledger == perf.expected_bytes:", ledger_equals_model)
assert ledger_equals_model

# %% [markdown]
# ## Check 2: the gradients equal one process's on the whole batch
#
# The `local` oracle: the unsplit model, the whole global batch, the mean loss. Every CONV
# worker must now hold the local CONV gradients, every FC worker the local FC gradients.

# %%
with sample_keys(seed, 0, torch.arange(global_batch)):
    local_loss = F.cross_entropy(model(x), y, reduction="sum") / global_batch
local_loss.backward()
# split_model shares its parameters with `model`: the k-th parameter of a part is the k-th of the
# model's parameters on that side, whose .grad now holds the local gradient.
max_grad_diff = 0.0
for r in range(nodes):
    side = split.conv if topo.role(r) == "conv_worker" else split.fc
    for p_local, p_rank in zip(side.parameters(), part[r].parameters()):
        max_grad_diff = max(max_grad_diff, (p_rank.grad - p_local.grad).abs().max().item())
print(f"loss: split {loss:.6f}  local {local_loss.item():.6f}")
print(f"largest |gradient difference| over every rank and parameter: {max_grad_diff:.2e}")
assert max_grad_diff < 1e-6

# %% [markdown]
# ## The ledger as a picture
#
# The diagram of `stanza_core.viz.assignment.assignment_diagram`, fed with the ledger's per-rank bytes
# instead of the model's (they are equal, as checked above). Circles: CONV workers; squares: FC
# workers; arrows: activations out and their gradients back; dotted ring: the CONV allreduce.

# %%
prediction = perf.predict(profile, perf.Cluster(nodes, 10.0), Variant("stanza", fc_workers=fc_workers), global_batch=global_batch)
diagram = assignment_diagram(dataclasses.replace(prediction, ranks=ledger_rows))
diagram.update_layout(title="One Stanza step, drawn from the ledger (counted in this notebook)")
diagram

# %%
results = {"nodes": nodes, "fc_workers": fc_workers, "global_batch": global_batch, "messages": len(ledger),
           "ledger": [{**m, "bytes": float(m["bytes"])} for m in ledger], "ledger_rows": ledger_rows,
           "ledger_equals_model": ledger_equals_model, "max_grad_diff": max_grad_diff,
           "loss": loss, "local_loss": local_loss.item()}
nbt.write_results(results, out_dir)
written = nbt.save_figures({"ledger_diagram": diagram}, out_dir, png=png)

# %% [markdown]
# ## Exercises
#
# Graded lab: `reproductions/out/course/release/lab2/lab2.ipynb`, the student release that
# `make course` builds at the repository root (the exercises without their solutions; nbgrader
# grades what you hand in, see `docs/course.md`).
#
# 1. `stanza_bytes_per_step(Pc, Pf, A, N, k, G)`: the cluster's bytes sent per step, from the
#    formulas alone; compare with `perf.totals(perf.expected_bytes(...))`.
# 2. Rerun this notebook with `nodes=4, fc_workers=2, global_batch=8` (papermill `-p`). Which FC
#    worker serves CONV worker 1? `samples_per_fc_worker(N, k, G)`: per FC worker, how many
#    samples' activations it receives.
# 3. Why does each FC worker divide its loss by G and not by b? `loss_scale_error(G, nc)`: by
#    what factor the summed gradient would be off if every slice used its own mean.
