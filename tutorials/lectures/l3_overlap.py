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
# # Lecture 3 · Overlap: buckets during the backward, a pipeline on the FC worker
#
# *Slides of lecture 3 (docs/course.md; tutorials T4 and T8, lab 4). Rendered with nbconvert's
# reveal.js slides into the gallery by `make reproduce`. Three figures: one Stanza step on the
# engine's own timeline with small buckets (measured), the same with one bucket (measured),
# and the allreduce left after the backward over link speeds (the performance model).*
#
# Runs in about a minute on a laptop CPU (two 3-process jobs); no root.

# %% tags=["parameters"] slideshow={"slide_type": "skip"}
nodes: int = 3  # N of the measured runs: N - 1 CONV workers, 1 FC worker
global_batch: int = 16  # G of the measured runs
bucket_mb: float = 0.5  # bucket cap of the overlapped run (MiB)
model_gbps: list[float] = [1.0, 2.5, 5.0, 10.0, 25.0, 100.0]  # link speeds of the modelled figure
png: bool = True  # also export PNG figures (needs a Chromium)
out_dir: str = "../../reproductions/out/tutorials/l3_overlap"  # where results.json and figures go

# %% slideshow={"slide_type": "skip"}
import plotly.graph_objects as go

import stanza_core.nbtools as nbt
from stanza_core import perf
from stanza_core.launch import run_job
from stanza_core.perf import device_profile
from stanza_core.perf.model import bucketed_backward, layer_shares
from stanza_core.viz import step_timeline, timeline_intervals

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. Buckets leave during the backward
#
# Backward produces gradients last layer first. The engine groups the CONV parameters into
# buckets (`--bucket-mb`) and launches a bucket's allreduce as soon as its last gradient exists,
# from inside the backward. On the FC worker, each CONV worker's activations are processed in
# the order they arrive and the gradient goes back at once: a pipeline. One step of
# `cifar_alexnet` on this machine (measured, engine timeline; loopback and shared cores: read the
# order of events, not the milliseconds):

# %% slideshow={"slide_type": "skip"}
common = dict(strategy="stanza", model="cifar_alexnet", fc_workers=1, global_batch=global_batch, steps=3,
              image_size=32, num_classes=10, device="cpu", timeline=True)
small = run_job(nodes=nodes, bucket_mb=bucket_mb, **common)
one = run_job(nodes=nodes, bucket_mb=25.0, **common)


def first_launch(metrics, step=2):
    """Per CONV worker: its buckets, and the share of its backward still to run when its first
    allreduce was launched (near 0: the allreduce waited for the whole backward)."""
    out = {}
    for r in metrics["ranks"]:
        if r["role"] == "conv_worker":
            bars = timeline_intervals(r, step)
            bwd = next(b for b in bars if b["what"] == "backward")
            ars = [b for b in bars if b["what"] == "allreduce"]
            lead = (bwd["end"] - min(b["start"] for b in ars)) / (bwd["end"] - bwd["start"])
            out[r["rank"]] = {"buckets": len(ars), "backward_left": lead}
    return out


seen = {"small": first_launch(small), "one": first_launch(one)}
for label, rows in seen.items():
    for rank, v in rows.items():
        print(f"{label:5s} buckets, CONV worker {rank}: {v['buckets']} buckets, first launched with "
              f"{v['backward_left']:.0%} of the backward still to run")
assert all(v["buckets"] > 1 and v["backward_left"] > 0.3 for v in seen["small"].values())
assert all(v["buckets"] == 1 and v["backward_left"] < 0.1 for v in seen["one"].values())

# %% slideshow={"slide_type": "fragment"}
fig_small = step_timeline(small)
fig_small.update_layout(title=f"{bucket_mb} MiB buckets: allreduces start inside the backward (measured, engine timeline)")
fig_small

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. One bucket: nothing leaves before the backward ends
#
# The same run with `--bucket-mb 25`, larger than all CONV gradients: one bucket, ready only
# when the first layer's gradient is, at the very end of the backward (measured).

# %% slideshow={"slide_type": "fragment"}
fig_one = step_timeline(one)
fig_one.update_layout(title="One bucket: the allreduce starts after the backward (measured, engine timeline)")
fig_one

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. Where it pays: the allreduce left after the backward (modelled)
#
# On two shared CPU cores the difference hardly shows (the backward is long, the loopback
# transfer short, and both use the same cores: T8). The performance model replays VGG-16's
# backward layer by layer on 16 V100-class nodes (15 CONV workers, 32 samples each) and
# launches each 25 MiB bucket's ring allreduce once it is ready, one at a time on the link.

# %% slideshow={"slide_type": "skip"}
vgg = perf.named_profile("vgg16", batch_size=32)
bwd_s = device_profile("v100", vgg).profile.time_s("conv", "bwd", 32)
units = [(p, share * bwd_s) for _, p, share in layer_shares(vgg, "conv")][::-1]  # backward order
modelled = []
for gbps in model_gbps:
    cl = perf.Cluster(16, gbps, device="v100")
    row = {"gbps": gbps}
    for label, cap in (("buckets", int(25 * 2**20)), ("one_bucket", 2**40)):
        bwd_end, ar_end, _, n_buckets = bucketed_backward(units, cl, 15, cap, False)
        row[label] = (ar_end - bwd_end) * 1e3
    modelled.append(row)
assert all(r["buckets"] <= r["one_bucket"] for r in modelled)
saved_at_10 = next(r["one_bucket"] - r["buckets"] for r in modelled if r["gbps"] == 10.0)
print(f"backward {bwd_s * 1e3:.0f} ms; at 10 Gb/s buckets end the allreduce {saved_at_10:.0f} ms earlier")

# %% slideshow={"slide_type": "fragment"}
fig_model = go.Figure()
for label, name in (("one_bucket", "one bucket"), ("buckets", "25 MiB buckets")):
    fig_model.add_scatter(x=model_gbps, y=[r[label] for r in modelled], mode="lines+markers", name=name)
fig_model.update_layout(title="Modelled: CONV allreduce left after the backward (VGG-16, 16 V100-class nodes)",
                        xaxis_type="log", xaxis_title="link bandwidth, Gb/s", yaxis_title="ms", height=400)
fig_model

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What to take away
#
# * Overlap changes *when* bytes move, never *what* is computed (T6: the same parameters).
# * A bucket can hide at most the backward that is still to run when it is ready: the last
#   bucket (the first layers' gradients) is always exposed.
# * It pays where the allreduce and the backward take comparable time: GPU clusters on
#   ordinary links, not four processes on two CPU cores.

# %% slideshow={"slide_type": "skip"}
results = {"measured": seen, "modelled": modelled, "backward_ms": bwd_s * 1e3, "saved_at_10_ms": saved_at_10}
nbt.write_results(results, out_dir)
written = nbt.save_figures({"timeline_buckets": fig_small, "timeline_one_bucket": fig_one,
                            "modelled_overlap": fig_model}, out_dir, png=png)
