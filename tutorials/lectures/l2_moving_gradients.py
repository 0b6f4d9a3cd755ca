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
# # Lecture 2 · Moving gradients: a ring, a sharded PS, a Stanza step
#
# *Slides of lecture 2 (docs/course.md). Rendered with nbconvert's reveal.js slides into the
# gallery by `make reproduce`. Three figures: a ring allreduce step by step (computed, and
# checked against the engine's byte formulas), a sharded parameter server against the ring
# (the performance model), one Stanza step on the engine's own timeline (measured).*
#
# Runs in about a minute on a laptop CPU (one 3-process job); no root.

# %% tags=["parameters"] slideshow={"slide_type": "skip"}
ring_size: int = 4  # n: ranks in the ring of figure 1
nodes: int = 16  # N: nodes of the modelled cluster of figure 2
gbps: float = 10.0  # link bandwidth of figure 2, Gb/s per direction
png: bool = True  # also export PNG figures (needs a Chromium)
out_dir: str = "../../reproductions/out/tutorials/l2_moving_gradients"  # where results.json and figures go

# %% slideshow={"slide_type": "skip"}
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

import stanza_core.nbtools as nbt
from stanza_core import perf
from stanza_core.launch import run_job
from stanza_core.viz import step_timeline

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. Ring allreduce, step by step
#
# n ranks each hold a gradient of S bytes, cut into n chunks. **Reduce-scatter**: in step s,
# rank r sends chunk (r - s) mod n to rank r + 1, which adds it to its own; after n - 1 steps
# rank r holds the full sum of chunk (r + 1) mod n. **All-gather**: n - 1 more steps pass the
# summed chunks round. Every rank sends 2 (n - 1) chunks of S / n bytes: 2 (n - 1) / n S.
# The cell below runs the algorithm on real tensors and checks the sum and the bytes.

# %% slideshow={"slide_type": "skip"}
n = ring_size
torch.manual_seed(0)
grads = [torch.randn(n, 3) for _ in range(n)]  # rank r's gradient: n chunks of 3 values
want = sum(grads)
buf = [g.clone() for g in grads]
moves, sent = [], [0] * n  # (step, phase, src, dst, chunk); bytes each rank sent
for s in range(n - 1):  # reduce-scatter
    msgs = [(r, (r + 1) % n, (r - s) % n, buf[r][(r - s) % n].clone()) for r in range(n)]
    for src, dst, c, data in msgs:
        buf[dst][c] += data
        sent[src] += data.numel() * 4
        moves.append((s, "reduce-scatter", src, dst, c))
for s in range(n - 1):  # all-gather: rank r forwards the summed chunk it received last
    msgs = [(r, (r + 1) % n, (r + 1 - s) % n, buf[r][(r + 1 - s) % n].clone()) for r in range(n)]
    for src, dst, c, data in msgs:
        buf[dst][c] = data
        sent[src] += data.numel() * 4
        moves.append((n - 1 + s, "all-gather", src, dst, c))
ring_exact = all(torch.allclose(b, want) for b in buf)
S = grads[0].numel() * 4
model_sent = [r["sent"]["grads"] for r in perf.expected_bytes(perf.ModelCounts(grads[0].numel(), 0, 1), "ddp", n,
                                                             global_batch=n)]
print(f"every rank holds the sum: {ring_exact}; bytes sent per rank: {sent} = 2(n-1)/n S = "
      f"{2 * (n - 1) * S // n}; perf.expected_bytes (ddp): {model_sent}")
assert ring_exact and sent == model_sent

# %% slideshow={"slide_type": "fragment"}
steps = 2 * (n - 1)
fig_ring = go.Figure(go.Heatmap(
    z=[[0 if m[1] == "reduce-scatter" else 1 for m in moves if m[2] == r] for r in range(n)],
    x=[f"{'RS' if s < n - 1 else 'AG'} {s % (n - 1) + 1}" for s in range(steps)],
    y=[f"rank {r}" for r in range(n)],
    text=[[f"chunk {m[4]} → rank {m[3]}" for m in moves if m[2] == r] for r in range(n)],
    texttemplate="%{text}", colorscale=[[0, "#9ecae1"], [1, "#fdd0a2"]], showscale=False))
fig_ring.update_layout(title=f"Ring allreduce of {n} ranks, step by step (computed; bytes checked against "
                             "perf.expected_bytes)", xaxis_title="step (RS: reduce-scatter, AG: all-gather)",
                       yaxis_autorange="reversed", height=360)
fig_ring

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. A sharded parameter server against the ring
#
# With one shard of P / N parameters on every node, each node pushes the (N - 1) / N of its
# gradient that others own and pulls as much of the parameters back: 2 (N - 1) / N · 4P bytes
# out and in, the ring's volume (to the few bytes by which uneven shards differ) (left, from `perf.expected_bytes`). What differs is the
# pattern: two all-to-all phases in which every link carries N - 1 messages at once, against
# 2 (N - 1) neighbour steps. The right panel is the performance model's step time for VGG-16
# on N V100s (modelled, not measured): same bytes, different schedules and overlap.

# %% slideshow={"slide_type": "skip"}
vgg = perf.named_profile("vgg16")
counts = perf.ModelCounts(vgg.conv.params, vgg.fc.params, vgg.boundary_values)
rows = {s: perf.expected_bytes(counts, s, nodes, None, global_batch=32 * nodes)[0] for s in ("ddp", "ps")}
per_node = {s: (sum(r["sent"].values()), sum(r["recv"].values())) for s, r in rows.items()}
cluster = perf.Cluster(nodes, gbps, device="v100")
preds = {s: perf.predict(vgg, cluster, s, batch_per_worker=32) for s in ("ddp", "ps")}
preds["stanza k=1"] = perf.predict(vgg, cluster, "stanza", 1, batch_per_worker=32)
# equal up to the shards' rounding (P is not a multiple of N: shards differ by one value)
same_bytes = all(abs(a - b) <= 4 * nodes for a, b in zip(per_node["ddp"], per_node["ps"]))
print("bytes per node (sent, received):", per_node, "| equal:", same_bytes)
assert same_bytes

# %% slideshow={"slide_type": "fragment"}
fig_ps = make_subplots(rows=1, cols=2, subplot_titles=(f"bytes per node per step (perf.expected_bytes)",
                                                       f"step time on {nodes} V100s at {gbps:g} Gb/s (modelled)"))
for i, (label, idx) in enumerate((("sent", 0), ("received", 1))):
    fig_ps.add_bar(x=["ring allreduce (ddp)", "sharded PS"], y=[per_node[s][idx] / 1e6 for s in ("ddp", "ps")],
                   name=label, row=1, col=1, marker_color=["#1f77b4", "#ff7f0e"][i])
fig_ps.add_bar(x=list(preds), y=[p.iteration_s * 1e3 for p in preds.values()], name="step (ms)", row=1, col=2,
               marker_color="#7f7f7f")
fig_ps.update_yaxes(title_text="MB", row=1, col=1)
fig_ps.update_yaxes(title_text="ms per step", row=1, col=2)
fig_ps.update_layout(title="VGG-16: a sharded PS moves the ring's bytes; the model times them differently",
                     height=400, barmode="group")
fig_ps

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. One Stanza step on the engine's timeline
#
# Three processes on this machine (2 CONV workers, 1 FC worker, the tiny CNN), recorded by the
# engine with `--timeline` (measured: loopback, shared cores; read the order of events, not the
# milliseconds). CONV forward, activations out; the FC worker computes each CONV worker's chunk
# as it arrives and sends the gradient back at once; CONV backward with the CONV allreduce
# buckets launched inside it.

# %% slideshow={"slide_type": "skip"}
metrics = run_job(nodes=3, strategy="stanza", model="tiny_cnn", fc_workers=1, global_batch=8, steps=2,
                  image_size=16, num_classes=10, device="cpu", timeline=True, bucket_mb=0.001)
roles = [(r["rank"], r["role"]) for r in metrics["ranks"]]
print("ranks:", roles)

# %% slideshow={"slide_type": "fragment"}
fig_step = step_timeline(metrics)
fig_step.update_layout(title="One Stanza step, 3 processes on this machine (measured, engine timeline)")
fig_step

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What to take away
#
# * A ring allreduce moves 2 (n - 1) / n of the buffer per rank, the least any allreduce can.
# * A sharded PS moves the same bytes per node; its cost is in its all-to-all pattern.
# * Stanza changes *what* moves: the CONV gradient among CONV workers, one activation and its
#   gradient per sample, and no FC gradient at all with k = 1.

# %% slideshow={"slide_type": "skip"}
results = {"ring_size": ring_size, "ring_exact": ring_exact, "ring_sent": sent, "ring_model_sent": model_sent,
           "nodes": nodes, "gbps": gbps, "per_node_bytes": per_node, "same_bytes": same_bytes,
           "step_ms": {s: p.iteration_s * 1e3 for s, p in preds.items()}, "timeline_roles": roles}
nbt.write_results(results, out_dir)
written = nbt.save_figures({"ring_steps": fig_ring, "ps_vs_ring": fig_ps, "stanza_step": fig_step}, out_dir, png=png)
