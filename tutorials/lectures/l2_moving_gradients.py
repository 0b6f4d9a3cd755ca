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
# *Slides of lecture 2 (docs/course.md; tutorials T2 and T3). Rendered with nbconvert's reveal.js
# slides into the gallery by `make reproduce`. Every number on these slides is computed below:
# a ring allreduce run on real tensors, the engine's exact byte formulas
# (`perf.expected_bytes`), the performance model's link times (modelled, not measured), and
# one Stanza job whose byte counters are compared with the formulas.*
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
from IPython.display import Markdown, display
from plotly.subplots import make_subplots

import stanza_core.nbtools as nbt
from stanza_core import perf
from stanza_core.launch import run_job
from stanza_core.viz import step_timeline
from stanza_core.variant import Variant


def show(text: str) -> None:
    """A computed line on the slide (the code that computed it stays hidden)."""
    display(Markdown(text))


vgg = perf.named_profile("vgg16")
counts = perf.ModelCounts(vgg.conv.params, vgg.fc.params, vgg.boundary_values)
cluster = perf.Cluster(nodes, gbps, device="v100")
S_vgg = 4 * counts.params  # VGG-16's fp32 gradient, bytes

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Today
#
# * The problem: n ranks each hold a gradient; every rank needs their sum.
# * Ring allreduce, step by step, and what it costs per rank in bytes and in messages.
# * The parameter server, central and sharded: the same bytes as the ring, a different pattern.
# * A Stanza step: what moves instead, on which links, and the engine's counters against the
#   formulas.
#
# **Before this lecture:** lecture 1 (the CONV body and the FC head, the boundary A).

# %% [markdown] slideshow={"slide_type": "slide"}
# ## The problem, and the naive answer
#
# After the backward, rank r holds g_r, S bytes. SGD needs the sum (or mean) of all n of them,
# on every rank, before the update.
#
# Naive: everyone sends its gradient to rank 0, which adds them and sends the sum back.
# Rank 0 receives (n - 1) S and sends (n - 1) S; all other links idle meanwhile. The time grows
# linearly with n. For VGG-16's gradient on the modelled cluster:

# %% slideshow={"slide_type": "fragment"}
naive_s = cluster.transfer_s((nodes - 1) * S_vgg)
show(f"S = {S_vgg / 1e6:.0f} MB; rank 0 receives {(nodes - 1) * S_vgg / 1e9:.1f} GB from {nodes - 1} ranks: "
     f"**{naive_s:.1f} s** at {gbps:g} Gb/s, then as long again to send the sum back.")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Predict
#
# Every rank sends and receives over its own link, all at once. What is the fewest bytes each
# rank must send so that all n ranks end with the sum?
#
# * S?
# * S / n?
# * (n - 1) S / n?
# * 2 (n - 1) S / n?
#
# Hint: every rank must *receive* information about the other ranks' values, and every rank
# must end up holding all of the sum.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Ring allreduce: reduce-scatter
#
# Cut the gradient into n chunks of S / n bytes. Ranks sit on a ring: r sends to r + 1.
#
# In step s = 0, 1, ..., n - 2, rank r sends chunk (r - s) mod n to rank r + 1, which adds it
# to its own copy of that chunk. A chunk starts at the rank with its number and gains one
# rank's contribution per step. After n - 1 steps rank r holds the complete sum of chunk
# (r + 1) mod n: the sum is scattered, one chunk per rank.
#
# Every node sends one chunk and receives one chunk per step, at once: each link of the ring
# carries one direction of this one-way ring (its other direction idles), no node waits on
# another, and no link is overloaded.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Ring allreduce: all-gather
#
# Now every rank owns one summed chunk. In n - 1 more steps each rank forwards the summed chunk
# it received last, and the receiver overwrites its copy. After them every rank holds every
# summed chunk.
#
# Bytes each rank sends: 2 (n - 1) chunks of S / n, that is **2 (n - 1) / n · S**; it receives
# as much. The cell behind this slide runs both phases on real tensors, checks that every rank
# holds the sum, and counts the bytes against `perf.expected_bytes` for ddp:

# %% slideshow={"slide_type": "fragment"}
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
scattered = all(torch.allclose(buf[r][(r + 1) % n], want[(r + 1) % n]) for r in range(n))  # rank r: chunk r + 1
for s in range(n - 1):  # all-gather: rank r forwards the summed chunk it received last
    msgs = [(r, (r + 1) % n, (r + 1 - s) % n, buf[r][(r + 1 - s) % n].clone()) for r in range(n)]
    for src, dst, c, data in msgs:
        buf[dst][c] = data
        sent[src] += data.numel() * 4
        moves.append((n - 1 + s, "all-gather", src, dst, c))
ring_exact = all(torch.allclose(b, want) for b in buf)
S = grads[0].numel() * 4
model_sent = [r["sent"]["grads"] for r in perf.expected_bytes(perf.ModelCounts(grads[0].numel(), 0, 1), Variant("ddp"), n,
                                                             global_batch=n)]
assert ring_exact and scattered and sent == model_sent and len({m[0] for m in moves}) == 2 * (n - 1)
show(f"n = {n}, S = {S} bytes: every rank holds the sum: **{ring_exact}**; bytes sent per rank {sent}; "
     f"2 (n - 1) / n · S = {2 * (n - 1) * S // n}; `perf.expected_bytes` (ddp): {model_sent}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## The ring, drawn
#
# Each row is a rank, each column a step; the cell says which chunk the rank sends and to whom.

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
# ## Why 2 (n - 1) / n, and when less is possible
#
# When the ranks do the adding themselves, 2 (n - 1) / n · S per rank is the least any
# allreduce can send (Patarasuk and Yuan): (n - 1) / n · S must arrive at each rank for its share
# of the sum to include the other ranks' values, and as much again must leave it so that the
# others receive its summed share. The ring and the good tree algorithms reach it; the naive
# gather does not.
#
# The bound assumes the network only forwards bytes. With **in-network reduction** the switch
# adds (InfiniBand SHARP, used by NCCL's CollNet; NVLink SHARP, NCCL's NVLS): each GPU sends its
# S bytes once and receives the sum once, about S per GPU, half the ring's volume for large n.
# The engine here runs gloo and NCCL's ring, so its formulas and counters use 2 (n - 1) / n · S.

# %% slideshow={"slide_type": "fragment"}
show("Ring share 2 (n - 1) / n of S, per rank: " + ", ".join(
    f"n = {k}: {float(perf.traffic.ring_share(1, k)):.3f}" for k in (2, 4, 8, 16, 64, 1024))
     + "; in-network reduction: about 1.")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Bytes are not time: the ring's messages
#
# The ring takes 2 (n - 1) steps, each a message with a fixed cost (the latency α) plus S / n
# bytes over the link (bandwidth B):
#
# t = 2 (n - 1) α + 2 (n - 1) / n · S / B.
#
# The bandwidth term tends to 2 S / B and stops growing once n exceeds a few ranks; the latency
# term grows linearly. For a large gradient the bandwidth term dominates, for small buckets the
# latency term does: the reason lecture 3 does not make buckets arbitrarily small. VGG-16's
# gradient, and 4 KB, at the modelled bandwidth and latency (`perf.Cluster.ring_allreduce_s`):

# %% slideshow={"slide_type": "fragment"}
ring_ms = {k: perf.Cluster(k, gbps).ring_allreduce_s(S_vgg, k) * 1e3 for k in (2, 4, 16, 64, 256)}
small_ms = {k: perf.Cluster(k, gbps).ring_allreduce_s(4096, k) * 1e6 for k in (2, 16, 256)}
show(f"α = {cluster.latency_s * 1e6:g} µs, B = {gbps:g} Gb/s. VGG-16 ({S_vgg / 1e6:.0f} MB): "
     + ", ".join(f"n = {k}: {v:,.0f} ms" for k, v in ring_ms.items())
     + ".  \n4 KB: " + ", ".join(f"n = {k}: {v:,.0f} µs" for k, v in small_ms.items()))
assert ring_ms[256] < 1.6 * ring_ms[4] and small_ms[256] > 50 * small_ms[2]

# %% [markdown] slideshow={"slide_type": "slide"}
# ## The parameter server
#
# The other classic design: servers hold the parameters; workers **push** gradients to them and
# **pull** the updated parameters back. The servers add and update.
#
# One central server receives n · S and sends n · S per step: the naive gather again. So the
# parameters are **sharded**: with one shard of P / N parameters on every node, each node pushes
# the (N - 1) / N of its gradient that others own and pulls as much back, and serves its own
# shard to the N - 1 others: 2 (N - 1) / N · 4P bytes out and as much in, the ring's volume (to
# the few bytes by which uneven shards differ).

# %% slideshow={"slide_type": "fragment"}
rows = {s: perf.expected_bytes(counts, Variant(s), nodes, global_batch=32 * nodes)[0] for s in ("ddp", "ps")}
central = perf.expected_bytes(counts, Variant("ps", ps_servers=1), nodes, global_batch=32 * (nodes - 1))[-1]
assert central["role"] == "ps_server" and central["recv"]["grads"] == central["sent"]["params"] == (nodes - 1) * S_vgg
per_node = {s: (sum(r["sent"].values()), sum(r["recv"].values())) for s, r in rows.items()}
# equal up to the shards' rounding (P is not a multiple of N: shards differ by one value)
same_bytes = all(abs(a - b) <= 4 * nodes for a, b in zip(per_node["ddp"], per_node["ps"]))
assert same_bytes
show(f"One central server for {nodes - 1} workers: receives {central['recv']['grads'] / 1e9:.1f} GB and sends "
     f"{central['sent']['params'] / 1e9:.1f} GB per step.  \n"
     f"Sharded, VGG-16, N = {nodes}, bytes rank 0 sends / receives per step: ring (ddp) "
     f"{per_node['ddp'][0] / 1e6:,.1f} / {per_node['ddp'][1] / 1e6:,.1f} MB; sharded PS "
     f"{per_node['ps'][0] / 1e6:,.1f} / {per_node['ps'][1] / 1e6:,.1f} MB; equal within {4 * nodes} bytes: **{same_bytes}**")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Predict: same bytes, same time?
#
# The sharded PS and the ring move the same bytes per node. Will the performance model give
# them the same step time for VGG-16 on this cluster?
#
# Think about *when* the bytes move: the ring's buckets leave during the backward; the PS, as
# the engine runs it by default, pushes once the backward is done.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Same bytes, different schedules
#
# Left: bytes per node per step (`perf.expected_bytes`). Right: the performance model's step
# time (modelled, not measured): the PS's push cannot start until the backward is done and its
# pull must finish before the next forward, while the ring's buckets overlap the backward
# (lecture 3). Stanza k = 1 is on the right for comparison.

# %% slideshow={"slide_type": "fragment"}
preds = {s: perf.predict(vgg, cluster, Variant(s), batch_per_worker=32) for s in ("ddp", "ps")}
preds["ps overlapped"] = perf.predict(vgg, cluster, Variant("ps", ps_overlap=True), batch_per_worker=32)
preds["stanza k=1"] = perf.predict(vgg, cluster, Variant("stanza", fc_workers=1), batch_per_worker=32)
step_ms = {s: p.iteration_s * 1e3 for s, p in preds.items()}
fig_ps = make_subplots(rows=1, cols=2, subplot_titles=("bytes per node per step (perf.expected_bytes)",
                                                       f"step time on {nodes} V100s at {gbps:g} Gb/s (modelled)"))
for i, (label, idx) in enumerate((("sent", 0), ("received", 1))):
    fig_ps.add_bar(x=["ring allreduce (ddp)", "sharded PS"], y=[per_node[s][idx] / 1e6 for s in ("ddp", "ps")],
                   name=label, row=1, col=1, marker_color=["#1f77b4", "#ff7f0e"][i])
fig_ps.add_bar(x=list(preds), y=list(step_ms.values()), name="step (ms)", row=1, col=2, marker_color="#7f7f7f")
fig_ps.update_yaxes(title_text="MB", row=1, col=1)
fig_ps.update_yaxes(title_text="ms per step", row=1, col=2)
fig_ps.update_layout(title="VGG-16: a sharded PS moves the ring's bytes; the model times them differently",
                     height=400, barmode="group")
fig_ps

# %% slideshow={"slide_type": "fragment"}
show("Modelled step: " + ", ".join(f"{s} **{v:,.0f} ms**" for s, v in step_ms.items()) + "  \n"
     + "  \n".join(f"{s}: {p.overlap}" for s, p in preds.items()) + "  \n"
     + f"The PS's extra time over DDP is almost all its missing overlap: overlapping its push takes "
       f"{step_ms['ps'] - step_ms['ddp']:,.0f} ms over DDP down to {step_ms['ps overlapped'] - step_ms['ddp']:,.0f} ms.")
assert step_ms["ps overlapped"] - step_ms["ddp"] < 0.25 * (step_ms["ps"] - step_ms["ddp"])  # the claim of the slide

# %% [markdown] slideshow={"slide_type": "slide"}
# ## A Stanza step: what moves instead
#
# With k = 1 FC worker and N - 1 CONV workers, per step:
#
# * each CONV worker sends its b activations (4A bytes each) and labels to the FC worker and gets
#   b activation gradients back;
# * the CONV workers ring-allreduce the CONV gradient, 4 P_c bytes, among themselves;
# * the FC gradient does not move at all: the FC worker is the only holder of the head.
#
# The traffic is no longer symmetric: the FC worker's link carries every CONV worker's
# boundary. Per rank for VGG-16 on the modelled cluster, 32 samples per CONV worker:

# %% slideshow={"slide_type": "fragment"}
st_rows = perf.expected_bytes(counts, Variant("stanza", fc_workers=1), nodes, global_batch=32 * (nodes - 1))
conv_row, fc_row = st_rows[0], st_rows[-1]
show(f"CONV worker sends: " + ", ".join(f"{c} {v / 1e6:,.1f} MB" for c, v in conv_row["sent"].items())
     + f"  \nFC worker receives: " + ", ".join(f"{c} {v / 1e6:,.1f} MB" for c, v in fc_row["recv"].items())
     + f"  \nDDP rank, for comparison: {per_node['ddp'][0] / 1e6:,.0f} MB each way")
assert "fc_grads" not in fc_row["sent"] and fc_row["recv"]["activations"] == (nodes - 1) * conv_row["sent"]["activations"]

# %% [markdown] slideshow={"slide_type": "slide"}
# ## One Stanza step on the engine's timeline
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
# ## The counters equal the formulas
#
# The engine counts every byte it sends and receives, per rank and per category. For the run
# just shown, its counters against `perf.expected_bytes` for the same model, layout and batch:

# %% slideshow={"slide_type": "fragment"}
tiny = perf.named_profile("tiny_cnn", image_size=16, num_classes=10)
want_rows = perf.expected_bytes(tiny, Variant("stanza", fc_workers=1), 3, global_batch=8)
got = [(r["sent"], r["recv"]) for r in sorted(metrics["ranks"], key=lambda r: r["rank"])]
counters_equal = got == [(r["sent"], r["recv"]) for r in want_rows]
assert counters_equal
show("  \n".join(f"rank {r['rank']} ({r['role']}): sent {sum(r['sent'].values()):,} B, "
                 f"received {sum(r['recv'].values()):,} B" for r in want_rows)
     + f"  \ncounters equal the formulas, every rank and category: **{counters_equal}**")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Pitfalls
#
# * **"2 (n - 1) / n · S is a law of nature."** It is the floor when ranks do the adding; switches
#   that reduce in the network move about S per GPU.
# * **Equal bytes, equal time.** The sharded PS matches the ring's bytes, not its schedule.
# * **Counting only one direction.** A ring rank sends and receives 2 (n - 1) / n · S; a link
#   that is full-duplex carries both at once, a shared medium does not.
# * **The FC worker's link.** In Stanza it receives (N - 1) times a CONV worker's boundary: the
#   busiest link of the cluster, and the reason for k > 1 (lecture 4).
# * **Labels are bytes too.** The engine's counters include them; a ledger that forgets them
#   does not match.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What to take away
#
# * A ring allreduce moves 2 (n - 1) / n of the buffer per rank, the least an allreduce can
#   when the ranks do the reduction; in-network reduction (SHARP, NCCL CollNet/NVLS) moves about
#   S per GPU.
# * A sharded PS moves the same bytes per node; what it costs over DDP is its missing overlap
#   (a push after the backward): overlapped, it comes within a few per cent of DDP.
# * Stanza changes *what* moves: the CONV gradient among CONV workers, one activation and its
#   gradient per sample, and no FC gradient at all with k = 1.
# * The engine's byte counters equal the formulas, rank by rank.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Read next
#
# * P. Patarasuk, X. Yuan, *Bandwidth optimal all-reduce algorithms for clusters of
#   workstations*, JPDC 2009.
# * S. Li et al., *PyTorch Distributed: Experiences on Accelerating Data Parallel Training*,
#   VLDB 2020 (DDP's buckets, next lecture).
# * M. Li et al., *Scaling Distributed Machine Learning with the Parameter Server*, OSDI 2014.
# * Tutorials T2 (one step's ledger) and T3 (the sends and receives of a Stanza step).
# * Lecture 3: overlapping these transfers with the backward.

# %% slideshow={"slide_type": "skip"}
results = {"ring_size": ring_size, "ring_exact": ring_exact, "ring_sent": sent, "ring_model_sent": model_sent,
           "nodes": nodes, "gbps": gbps, "per_node_bytes": per_node, "same_bytes": same_bytes,
           "step_ms": step_ms, "timeline_roles": roles, "naive_s": naive_s, "ring_ms": ring_ms,
           "counters_equal": counters_equal}
nbt.write_results(results, out_dir)
written = nbt.save_figures({"ring_steps": fig_ring, "ps_vs_ring": fig_ps, "stanza_step": fig_step}, out_dir, png=png)
