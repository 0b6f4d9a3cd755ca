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
# # T3 · The same step in plain `torch.distributed`
#
# *Course on layer separation, part 3 of 8. Before: T2 (one step by hand, one process). Next:
# T4 (overlap).*
#
# **The idea of this part.** T2 moved tensors by copying them. Now three real processes do it
# with `torch.distributed` (the gloo backend, as on any CPU): `dist.send` / `dist.recv` for the
# activations and their gradients, `dist.all_reduce` on a process group for the CONV gradients.
# The whole algorithm fits in one short script, `tutorials/t3_stanza_step.py`, with none of the
# engine's machinery (no byte counters, no buckets, no overlap, no timeouts). We run it, run the
# engine (`python -m stanza_core.train --strategy stanza`) on the same model, data and seed, and
# check that both end with the same parameters and moved the same bytes.
#
# Runs in about a minute (two 3-process jobs); no root: the processes talk over loopback.

# %% tags=["parameters"]
nodes: int = 3  # N: processes (ranks)
fc_workers: int = 1  # k: FC workers
global_batch: int = 6  # G: samples per step over the cluster
steps: int = 2  # training steps of both runs
out_dir: str = "../reproductions/out/tutorials/t3_plain_distributed"  # where results.json and the runs go

# %%
import os
import sys
from pathlib import Path

import torch
from IPython.display import Code

import stanza_core.nbtools as nbt
from stanza_core import procgroup
from stanza_core.launch import job_env, run_job

script = Path("t3_stanza_step.py").resolve()
Code(filename=str(script), language="python")

# %% [markdown]
# Read the script from top to bottom once: `init_process_group` joins the job torchrun started;
# `new_group` makes the CONV group and the FC group (every rank must create every group, in the
# same order); then the loop is T2's step with `dist.send` / `dist.recv` in place of the ledger.
# Note what a CONV worker does *while it waits*: nothing. `dist.recv` blocks. T4 shows what the
# engine does instead.
#
# **Predict first.** Rank 2 (the FC worker) calls `dist.recv(a, 0)` before `dist.recv(a, 1)`. If
# CONV worker 1 finishes its forward first, what happens to its `dist.send`, and when does it
# return? Write your answer down before reading on; the answer is after the run.

# %%
out = Path(out_dir).resolve()
plain_dir = out / "plain"
cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nodes}", str(script),
       "--fc-workers", str(fc_workers), "--global-batch", str(global_batch), "--steps", str(steps),
       "--out", str(plain_dir)]
# procgroup.run is subprocess.run with the job in its own process group: on a timeout it ends
# torchrun and every rank, not only torchrun
proc = procgroup.run(cmd, env=job_env(), capture_output=True, text=True, timeout_s=600)
assert proc.returncode == 0, proc.stderr[-2000:]
plain = [torch.load(plain_dir / f"rank{r}.pt", weights_only=True) for r in range(nodes)]
for p in plain:
    print(f"rank {p['rank']} trained {len(p['params'])} tensors, sent per step: "
          f"{ {c: round(v) for c, v in p['sent_per_step'].items()} }")

# %% [markdown]
# **The answer to the prediction.** Nothing is lost and nothing fails: CONV worker 1's
# `dist.send` waits. Gloo's TCP transport holds every send, of any size, until the receiver has
# posted the matching receive: the receive sends the sender a short notification naming a slot
# (the key both calls share, from their tag) and how many bytes it will take, and only then do
# the bytes leave. So CONV worker 1 blocks until rank 2 has finished with CONV worker 0 and
# calls `dist.recv(a, 1)`. This is not MPI's eager/rendezvous split, where small messages
# complete into a buffer at once: under gloo even a 4-byte send waits (measured by
# `tests/tutorials/test_course_facts.py`; the failure-modes lesson, `t7_failure_modes`, shows a
# 16-byte exchange that waits until the timeout). It is also why a send and a receive posted in
# the wrong order on both sides wait forever, until the timeout fires.
#
# Now the engine, on the same configuration: same seed (same initial parameters), same data
# stream, same learning rate. `run_job` starts one `torchrun` job and returns its metrics JSON;
# `save=` writes the final full model.

# %%
engine_model = out / "engine.pt"
metrics = run_job(nodes=nodes, workdir=str(out / "engine"), strategy="stanza", model="tiny_cnn",
                  fc_workers=fc_workers, global_batch=global_batch, steps=steps, image_size=16,
                  device="cpu", save=str(engine_model))
engine = torch.load(engine_model, weights_only=True)
print("engine loss per step:", [round(s["loss"], 6) for s in metrics["steps"]])

# %% [markdown]
# ## Check: the same parameters, the same bytes

# %%
max_param_diff = 0.0
covered = set()  # every CONV worker holds the same CONV body: each copy is compared
for p in plain:
    for name, value in p["params"].items():
        max_param_diff = max(max_param_diff, (value - engine[name]).abs().max().item())
        covered.add(name)
compared = len(covered)
print(f"{compared} of the model's {len(engine)} tensors compared; largest |plain - engine| = {max_param_diff:.2e}")
assert covered == set(engine)  # tiny_cnn has no buffers: its state_dict is its parameters
assert max_param_diff < 1e-5

bytes_match = True
for p, r in zip(plain, metrics["ranks"]):
    mine = {c: round(v) for c, v in p["sent_per_step"].items()}
    print(f"rank {r['rank']} ({r['role']}): plain {mine} | engine {r['sent']}")
    bytes_match &= mine == r["sent"]
print("bytes per step equal:", bytes_match)
assert bytes_match

# %% [markdown]
# The two agree to float rounding (the engine adds the CONV gradients in buckets, the script one
# tensor at a time; fp32 sums in another order differ in the last bits). The engine's extra
# machinery changes *when* things happen, not *what* is computed: that is T4.

# %%
results = {"nodes": nodes, "fc_workers": fc_workers, "global_batch": global_batch, "steps": steps,
           "tensors_compared": compared, "max_param_diff": max_param_diff, "bytes_match": bytes_match,
           "plain_sent_per_step": [{c: round(v) for c, v in p["sent_per_step"].items()} for p in plain],
           "engine_sent_per_step": [r["sent"] for r in metrics["ranks"]]}
nbt.write_results(results, out_dir)

# %% [markdown]
# ## Exercises
#
# Graded lab: `reproductions/out/course/release/lab3/lab3.ipynb`, the student release that
# `make course` builds at the repository root (the exercises without their solutions; nbgrader
# grades what you hand in, see `docs/course.md`).
#
# 1. `messages_per_step(N, k)`: every rank's `dist.send` and `dist.recv` calls per step of
#    `t3_stanza_step.py`. (Not graded: rerun this notebook with `nodes=4, fc_workers=2,
#    global_batch=8` and check it still matches the engine.)
# 2. `label_bytes_per_step(G)`: what all labels of a step cost the cluster.
# 3. `label_share_of_boundary(A)`: the labels' share of the boundary traffic, for the tiny CNN
#    (A = 256) and for VGG-16 (A = 25,088).
