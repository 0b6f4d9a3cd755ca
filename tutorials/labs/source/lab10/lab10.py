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

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lab 10 · Bucketed allreduce, overlapped with the backward (goes with tutorial T4)
#
# T4 showed the engine's CONV allreduce: gradients grouped into buckets, each bucket's
# allreduce launched from inside the backward the moment its last gradient exists, so the network
# works while the CPU still computes. Here you write that mechanism yourself, for plain data
# parallelism (every rank holds the whole model and a slice of the batch), in three steps: after
# the backward, from inside the backward, and in buckets from inside the backward.
#
# Your functions run for real: on 2 or 3 processes on this machine, joined by gloo over
# 127.0.0.1. The test cells start them with `gradekit.run_lab`; every run has a time budget, and
# a rank that hangs, raises or crashes ends the run with a one-line message. The graded tests
# run other rank counts, batches and bucket sizes than you see, compare the parameters after the
# step with the same step taken in one process, count the allreduces, and read your timeline.
#
# Fill in every region marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`), then
# run the test cell below it. Do not change the test cells.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import stanza_core  # the course's repository, installed with `pip install -e .`: its tutorials/ runs your ranks
sys.path.append(str(Path(stanza_core.__file__).resolve().parents[1]))
sys.path.append(str(Path.cwd().parent))  # or the student bundle's tutorials/, beside the lab folders
from tutorials import gradekit  # noqa: E402

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## The step
#
# Every rank holds the same MLP (eight parameter tensors) and b = G / N samples of the global
# batch of G. The step's loss is the **mean cross-entropy over all G samples**; each rank
# computes the mean over its own b, so the gradients must be summed over the ranks and divided
# by N. Each rank trains three steps (the hooks are registered once, before the first step:
# attaching them again every step would register them twice and launch every allreduce twice;
# so `finish()` must leave your hooks' state ready for the next step):
#
# ```python
# finish = attach_...(model, ..., timeline)       # yours (exercises 2 and 3), once
# for step in range(3):                           # a new global batch each step
#     model.zero_grad(set_to_none=True)
#     loss = F.cross_entropy(model(x_rank), y_rank)   # the mean over this rank's b samples
#     loss.backward()
#     finish()                                        # yours (exercise 1: allreduce_gradients(model))
#     # one SGD step with the parameters' .grad
# ```
#
# After each `finish()` every parameter's `.grad` must hold the gradient of the global mean loss,
# the same on every rank. The tests compare the parameters after the three steps with the same
# steps taken in one process on the whole global batches, and count your allreduces and their
# sizes.
#
# ## Exercise 1 (2 points): after the backward
#
# Write `allreduce_gradients(model)`, called after `loss.backward()`: one blocking
# `dist.all_reduce` per parameter's `.grad` (it sums in place), then divide.

# %% nbgrader={"grade": false, "grade_id": "allreduce_gradients", "locked": false, "schema_version": 3, "solution": true, "task": false}
def allreduce_gradients(model):
    ### BEGIN SOLUTION
    world = dist.get_world_size()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world  # the sum of N rank means -> the mean over the global batch
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_allreduce_gradients", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# your allreduce_gradients(model) after the backward on 2 ranks
ranks = gradekit.run_lab("lab10", "try_plain", allreduce_gradients=allreduce_gradients)
assert all(torch.equal(ranks[0].value["params"][n], ranks[1].value["params"][n]) for n in ranks[0].value["params"])
assert len([c for c in ranks[0].calls if c["op"] == "all_reduce"]) == 8 * 3  # eight gradients, three steps
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab10", "allreduce_gradients", allreduce_gradients=allreduce_gradients)
assert len(verdict) == 2
for check, outcome in verdict.items():
    assert outcome == "ok", f"{check}: {outcome}"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (2 points): from inside the backward
#
# The backward produces the gradients last layer first; the allreduce of a gradient that exists
# can start while the backward computes the others. Write
# `attach_overlapped_allreduce(model, timeline)`, called before the forward; it returns `finish`,
# a function of no arguments.
#
# * Number the parameters in *reverse* order of `list(model.parameters())`: 0 is the last one.
# * Register a hook on every parameter with `p.register_post_accumulate_grad_hook(hook)`: the
#   backward calls `hook(p)` once `p.grad` holds the parameter's gradient. In the hook, launch
#   `dist.all_reduce(p.grad, async_op=True)`: it returns a handle at once, and the sum proceeds
#   in the background. Append `("start", i, time.perf_counter())` to `timeline` right then
#   (i: the parameter's number).
# * `finish` waits for every handle (`handle.wait()`), appends `("end", i, time.perf_counter())`,
#   and divides.

# %% nbgrader={"grade": false, "grade_id": "attach_overlapped_allreduce", "locked": false, "schema_version": 3, "solution": true, "task": false}
def attach_overlapped_allreduce(model, timeline):
    ### BEGIN SOLUTION
    params = list(model.parameters())[::-1]
    number = {id(p): i for i, p in enumerate(params)}
    launched = []  # (number, parameter, the allreduce's handle)

    def hook(p):
        timeline.append(("start", number[id(p)], time.perf_counter()))
        launched.append((number[id(p)], p, dist.all_reduce(p.grad, async_op=True)))

    for p in params:
        p.register_post_accumulate_grad_hook(hook)

    def finish():
        world = dist.get_world_size()
        for i, p, handle in launched:
            handle.wait()
            timeline.append(("end", i, time.perf_counter()))
            p.grad /= world
        launched.clear()  # ready for the next step

    return finish
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_attach_overlapped_allreduce", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# your attach_overlapped_allreduce(model, timeline) before the forward, on 2 ranks
ranks = gradekit.run_lab("lab10", "try_overlap", attach_overlapped_allreduce=attach_overlapped_allreduce)
t0, t1 = ranks[0].value["backward"][0]  # the first of the three steps
print("rank 0: backward", f"{1e3 * (t1 - t0):.2f} ms;",
      ", ".join(f"{e} {i} at {1e3 * (t - t0):+.2f} ms" for e, i, t in ranks[0].value["timeline"]))
assert all(torch.equal(ranks[0].value["params"][n], ranks[1].value["params"][n]) for n in ranks[0].value["params"])
assert any(e == "start" and t < t1 for e, _, t in ranks[0].value["timeline"])  # started before the backward ended
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab10", "attach_overlapped_allreduce", attach_overlapped_allreduce=attach_overlapped_allreduce)
assert len(verdict) == 3
for check, outcome in verdict.items():
    assert outcome == "ok", f"{check}: {outcome}"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 (3 points): buckets
#
# One allreduce per gradient pays the allreduce's fixed cost eight times, and the small
# gradients (the biases) move badly. DDP and the engine group the gradients into buckets. Write
# `attach_bucketed_allreduce(model, bucket_cap_bytes, timeline)`, which returns `finish` as in
# exercise 2:
#
# 1. **Buckets.** Walk the parameters in reverse order, as in exercise 2, and put them into
#    buckets in that order: a bucket takes parameters until its gradients hold at least
#    `bucket_cap_bytes` bytes, then the next bucket starts; the last bucket holds what is left.
#    This is PyTorch DDP's rule (`bucket_cap_mb`; DDP also caps its first bucket at 1 MiB). The
#    engine's `--bucket-mb` (lab 4) is a variant: it starts a new bucket *before* one would exceed
#    the cap.
#    Number the buckets 0, 1, ... in that order.
# 2. **Hooks.** When the last gradient of a bucket has arrived (they arrive in any order),
#    flatten the bucket's gradients into one tensor (`torch.cat` of `g.reshape(-1)`), launch its
#    `dist.all_reduce(flat, async_op=True)` and append `("start", bucket, time.perf_counter())`.
# 3. **finish.** Wait for every bucket, append `("end", bucket, time.perf_counter())`, divide,
#    and copy the bucket's values back into its parameters' `.grad`.
#
# The model's eight gradients hold 40, 1920, 192, 12288, 256, 16384, 256 and 8192 bytes (in
# reverse order): with a cap of 8192 bytes there are three buckets.

# %% nbgrader={"grade": false, "grade_id": "attach_bucketed_allreduce", "locked": false, "schema_version": 3, "solution": true, "task": false}
def attach_bucketed_allreduce(model, bucket_cap_bytes, timeline):
    ### BEGIN SOLUTION
    params = list(model.parameters())[::-1]
    buckets, current, size = [], [], 0
    for p in params:
        current.append(p)
        size += p.numel() * p.element_size()
        if size >= bucket_cap_bytes:
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    bucket_of = {id(p): i for i, bucket in enumerate(buckets) for p in bucket}
    missing = [len(bucket) for bucket in buckets]  # gradients each bucket still waits for
    launched = {}  # bucket -> (flat gradients, the allreduce's handle)

    def hook(p):
        i = bucket_of[id(p)]
        missing[i] -= 1
        if missing[i] == 0:
            flat = torch.cat([q.grad.reshape(-1) for q in buckets[i]])
            timeline.append(("start", i, time.perf_counter()))
            launched[i] = (flat, dist.all_reduce(flat, async_op=True))

    for p in params:
        p.register_post_accumulate_grad_hook(hook)

    def finish():
        world = dist.get_world_size()
        for i, (flat, handle) in sorted(launched.items()):
            handle.wait()
            timeline.append(("end", i, time.perf_counter()))
            flat /= world
            offset = 0
            for q in buckets[i]:
                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q))
                offset += q.numel()
        launched.clear()  # ready for the next step: no handle kept, every bucket waiting again
        missing[:] = [len(bucket) for bucket in buckets]

    return finish
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_attach_bucketed_allreduce", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# your attach_bucketed_allreduce(model, 8192, timeline) before the forward, on 2 ranks
ranks = gradekit.run_lab("lab10", "try_buckets", attach_bucketed_allreduce=attach_bucketed_allreduce)
for r in ranks:
    t0, t1 = r.value["backward"][0]
    print(f"rank {r.rank}: backward {1e3 * (t1 - t0):.2f} ms;",
          ", ".join(f"{e} {b} at {1e3 * (t - t0):+.2f} ms" for e, b, t in r.value["timeline"]))
assert sorted(c["bytes"] for c in ranks[0].calls if c["op"] == "all_reduce") == sorted([8448, 14440, 16640] * 3)
assert all(torch.equal(ranks[0].value["params"][n], ranks[1].value["params"][n]) for n in ranks[0].value["params"])
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab10", "attach_bucketed_allreduce", attach_bucketed_allreduce=attach_bucketed_allreduce)
assert len(verdict) == 4
for check, outcome in verdict.items():
    assert outcome == "ok", f"{check}: {outcome}"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "why_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Question (2 points, graded by hand)
#
# Answer in the cell below, in a few sentences each.
#
# (a) Your parameters differ from the one-process step by about 1e-8, not zero. Give two
# distinct reasons the floating-point sums differ from the one-process backward's.
#
# (b) On this model the overlap check passes for a correct solution whatever the machine's speed,
# and fails for every solution that launches its allreduces in `finish`, however fast the
# network. Why? What does the overlap buy on a real cluster, and what does it not change?

# %% [markdown] nbgrader={"grade": true, "grade_id": "why", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# **Model answer.** (a) One process sums the per-sample gradients over all G samples in one order; here each rank
# sums its own b samples, then the allreduce adds the N partial results, in the ring's chunk
# order. And the division: the one-process loss divides by G inside the mean, here each rank
# divides by b and the sum is divided by N afterwards. Each changes the rounding of fp32 sums.
#
# (b) The hooks are called by `loss.backward()` itself: the first bucket (the last layers) is
# complete while the first layers' backward still has to run, so its allreduce starts before
# `backward()` returns, on any machine. Launching from `finish` means starting after the
# backward returned, by construction. On a cluster the early buckets cross the network while
# the backward computes the rest, so less communication time is exposed after the backward. It
# does not change the bytes each rank sends, nor the result beyond rounding.
#
# **Rubric.** (a) 1 point: two of: each rank sums over its own b samples and the allreduce then
# adds the N partial sums (another order than one sum over G); the ring allreduce adds in its
# own chunk order; dividing the sum by N after the allreduce rounds differently from the mean
# over G inside the loss. (b) 1 point: a hook runs inside `loss.backward()`, and the first
# bucket closes after the last layers' gradients while earlier layers still have backward work
# left, so its start precedes the backward's end by construction; an allreduce launched in
# `finish` starts after `backward()` returned. On a cluster the network moves the early buckets
# while the CPU/GPU computes the rest of the backward, hiding communication time; it changes
# neither the bytes moved nor (beyond rounding) the result.
# ### END SOLUTION
