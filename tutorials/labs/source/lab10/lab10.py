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
# Exercises 4 and 5 make it a trainer: a DDP class (initial broadcast, an unused parameter, five
# steps) and ZeRO stage 1 (the optimizer's momentum sharded over the ranks), each exact against
# one process.
#
# **Expected time for a graduate student: 6 hours** (exercises 1-3: 2 h; exercise 4: 2 h;
# exercise 5: 1.5 h; the questions: 0.5 h).
#
# Fill in every region marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`), then
# run the test cell below it. Do not change the test cells.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import stanza_core  # the students' repository (your lecturer's clone), installed with `pip install -e .`: its tutorials/ runs your ranks
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
want = gradekit.one_process("lab10", "try_plain")  # the same steps on the whole batches, one process
print("parameters against one process:", gradekit.compare(ranks[0].value["params"], want, 1e-6) or "equal")
assert all(gradekit.compare(r.value["params"], want, 1e-6) is None for r in ranks)
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
want = gradekit.one_process("lab10", "try_overlap")  # the same steps on the whole batches, one process
print("parameters against one process:", gradekit.compare(ranks[0].value["params"], want, 1e-6) or "equal")
assert all(gradekit.compare(r.value["params"], want, 1e-6) is None for r in ranks)
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
#    This is PyTorch DDP's rule (`bucket_cap_mb`; only with its default cap does DDP give the
#    first bucket a smaller one, 1 MiB: with an explicit cap, as here, the first bucket has that
#    cap too). The engine's `--bucket-mb` (lab 4) is a variant: it starts a new bucket *before*
#    one would exceed the cap.
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
want = gradekit.one_process("lab10", "try_buckets")  # the same steps on the whole batches, one process
print("parameters against one process:", gradekit.compare(ranks[0].value["params"], want, 1e-6) or "equal")
assert all(gradekit.compare(r.value["params"], want, 1e-6) is None for r in ranks)
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

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 4 (5 points): a DDP class
#
# Put exercise 3 into the shape PyTorch's `DistributedDataParallel` has, and handle what a real
# model and a real training loop bring. Write a class `DDP(model, bucket_cap_bytes, timeline)`
# with a method `finish()`; the test runs, on every rank:
#
# ```python
# ddp = DDP(model, bucket_cap_bytes, timeline)    # once
# for step in range(5):
#     model.zero_grad(set_to_none=True); loss = F.cross_entropy(model(x_rank), y_rank); loss.backward()
#     ddp.finish()
#     # one SGD step with the parameters' .grad (a parameter whose .grad is None is left alone)
# ```
#
# * **Initial parameters.** Every rank built its model from a seed of its own: the constructor
#   broadcasts rank 0's parameters (`dist.broadcast(tensor, 0)`, in place) before anything else.
# * **Buckets.** DDP's one rule, exercise 3's: parameters in reverse order, a bucket closes once
#   it holds at least `bucket_cap_bytes` bytes (with an explicit cap, as here, DDP's first bucket
#   has that cap too; DDP re-orders the parameters after the first step in the order their
#   gradients arrived; the engine's `--bucket-mb`, which lecture 3 names as the engine's variant
#   of DDP's "at least" rule, closes a bucket before it would exceed the cap: another rule, not
#   DDP's). Launch a bucket's allreduce from the hooks, as in
#   exercise 3, logging ("start", bucket, time) and ("end", bucket, time).
# * **An unused parameter.** The model has a layer, `model.unused`, that no forward uses: its
#   hook never fires, so its bucket never completes on its own (DDP's `find_unused_parameters`).
#   `finish()` launches every bucket that has not started, with zeros for a gradient that is
#   `None`, before it waits.
# * **State reset.** After `finish()`, every bucket must wait for its gradients again and no
#   handle may be left over: the test trains five steps and compares every one.
#
# The graded tests compare the parameters after five steps with one process (starting from rank
# 0's initial parameters), check the broadcast (the model's bytes, before the first allreduce),
# the buckets' sizes in every step and that one bucket started inside every backward.

# %% nbgrader={"grade": false, "grade_id": "DDP", "locked": false, "schema_version": 3, "solution": true, "task": false}
class DDP:
    ### BEGIN SOLUTION
    def __init__(self, model, bucket_cap_bytes, timeline):
        self.timeline, self.world = timeline, dist.get_world_size()
        with torch.no_grad():
            for p in model.parameters():  # every rank starts from rank 0's parameters
                dist.broadcast(p, 0)
        self.buckets, current, size = [], [], 0
        for p in list(model.parameters())[::-1]:  # DDP's rule: a bucket closes once it holds >= the cap
            current.append(p)
            size += p.numel() * p.element_size()
            if size >= bucket_cap_bytes:
                self.buckets.append(current)
                current, size = [], 0
        if current:
            self.buckets.append(current)
        self.bucket_of = {id(p): i for i, bucket in enumerate(self.buckets) for p in bucket}
        self.reset()
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self.hook)

    def reset(self):
        self.missing = [len(bucket) for bucket in self.buckets]
        self.launched = {}

    def launch(self, i):
        flat = torch.cat([q.grad.reshape(-1) if q.grad is not None else q.new_zeros(q.numel())
                          for q in self.buckets[i]])
        self.timeline.append(("start", i, time.perf_counter()))
        self.launched[i] = (flat, dist.all_reduce(flat, async_op=True))

    def hook(self, p):
        i = self.bucket_of[id(p)]
        self.missing[i] -= 1
        if self.missing[i] == 0:
            self.launch(i)

    def finish(self):
        for i in range(len(self.buckets)):  # a bucket with an unused parameter: launched now, zeros for it
            if i not in self.launched:
                self.launch(i)
        for i, (flat, handle) in sorted(self.launched.items()):
            handle.wait()
            self.timeline.append(("end", i, time.perf_counter()))
            flat /= self.world
            offset = 0
            for q in self.buckets[i]:
                q.grad = flat[offset:offset + q.numel()].view_as(q).clone()
                offset += q.numel()
        self.reset()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_DDP", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
# your DDP(model, 8192, timeline) on 2 ranks, five steps
ranks = gradekit.run_lab("lab10", "try_ddp", DDP=DDP)
want = gradekit.one_process("lab10", "try_ddp")  # the same steps on the whole batches, one process
print("parameters against one process:", gradekit.compare(ranks[0].value["params"], want, 1e-6) or "equal")
assert all(gradekit.compare(r.value["params"], want, 1e-6) is None for r in ranks)
print("rank 0's first operations:", [f"{c['op']}({c['bytes']} B)" for c in ranks[0].calls][:12])
assert all(torch.equal(ranks[0].value["params"][n], ranks[1].value["params"][n]) for n in ranks[0].value["params"])
assert ranks[0].calls[0]["op"] == "broadcast"
assert len([e for e in ranks[0].value["timeline"] if e[0] == "start"]) == 3 * 5  # three buckets, five steps
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab10", "DDP", DDP=DDP)
assert len(verdict) == 5
for check, outcome in verdict.items():
    assert outcome == "ok", f"{check}: {outcome}"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex5_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 5 (5 points): ZeRO stage 1, the optimizer state sharded
#
# SGD with momentum keeps one buffer as large as the model; Adam keeps two. In plain data
# parallelism every rank keeps all of it. ZeRO stage 1 (Rajbhandari et al., 2020) shards it: rank
# r owns one N-th of the flattened parameters, keeps the momentum of that shard only, updates
# that shard only, and the ranks then gather the updated shards. Write `zero1_step(model, state,
# lr, momentum)`, called on every rank after `loss.backward()` (the gradients of this rank's mean
# loss in `.grad`); `state` is a dict the test keeps for you across steps (empty at the first):
#
# 1. Flatten the gradients (in `model.parameters()` order) and pad them to a multiple of N; sum
#    them over the ranks so that each rank gets its own shard (`dist.reduce_scatter_single`),
#    and divide by N.
# 2. Momentum on the shard, as `torch.optim.SGD(momentum=m)` does: the first step `buf = g`,
#    then `buf = m * buf + g`; the shard's parameters become `w - lr * buf`. Keep `buf` in `state`.
# 3. Gather the updated shards from every rank (`dist.all_gather_single`) and copy them
#    into the parameters.
#
# The graded tests compare the parameters after five steps with `torch.optim.SGD(lr, momentum)`
# in one process on the whole batches; they check the collectives your rank ran, as the
# counters logged them (every step a reduce-scatter of your shard and an all-gather of the whole
# parameters; an allreduce of the gradients is data parallelism, not ZeRO, and fails); and they
# count every tensor your rank keeps alive between steps beside the parameters and their
# gradients, wherever it is kept (`state`, attributes of the model, its modules or parameters,
# globals of your code): at most the model's numel / N (plus one per parameter, for rounding).

# %% nbgrader={"grade": false, "grade_id": "zero1_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def zero1_step(model, state, lr, momentum):
    ### BEGIN SOLUTION
    rank, world = dist.get_rank(), dist.get_world_size()
    params = list(model.parameters())
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    n = flat.numel()
    shard = -(-n // world)
    flat = torch.cat([flat, flat.new_zeros(shard * world - n)])
    mine = torch.empty(shard)
    dist.reduce_scatter_single(mine, flat)  # the sum over the ranks of my shard of the gradients
    mine /= world
    lo = rank * shard
    weights = torch.cat([p.detach().reshape(-1) for p in params] + [flat.new_zeros(shard * world - n)])
    if "momentum" not in state:
        state["momentum"] = mine.clone()
    else:
        state["momentum"].mul_(momentum).add_(mine)
    updated = weights[lo:lo + shard] - lr * state["momentum"]
    gathered = torch.empty(shard * world)
    dist.all_gather_single(gathered, updated)
    offset = 0
    with torch.no_grad():
        for p in params:
            p.copy_(gathered[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_zero1_step", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
# your zero1_step on 2 ranks, five steps
ranks = gradekit.run_lab("lab10", "try_zero1", zero1_step=zero1_step)
want = gradekit.one_process("lab10", "try_zero1")  # the same steps on the whole batches, one process
print("parameters against one process:", gradekit.compare(ranks[0].value["params"], want, 1e-6) or "equal")
assert all(gradekit.compare(r.value["params"], want, 1e-6) is None for r in ranks)
print("elements each rank's state held after each step:", [r.value["held"] for r in ranks])
assert all(torch.equal(ranks[0].value["params"][n], ranks[1].value["params"][n]) for n in ranks[0].value["params"])
assert all(0 < h <= 9882 // 2 + 8 for r in ranks for h in r.value["held"])  # 9882 parameters, 8 tensors
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab10", "zero1_step", zero1_step=zero1_step)
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
