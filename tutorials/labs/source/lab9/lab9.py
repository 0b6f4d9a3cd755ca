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
# # Lab 9 · One Stanza step, written by you (goes with tutorials T3 and T4)
#
# In this lab you write the communication of one layer-separated training step in plain
# `torch.distributed`: the CONV workers send their activations to the FC worker, the FC worker
# sends back the gradients of those activations, and the CONV workers allreduce their gradients.
#
# Your functions run for real: on 2 to 4 processes on this machine, joined by gloo over
# 127.0.0.1, each process one rank. The test cells start them with `gradekit.run_lab`; every run
# has a time budget, and a rank that hangs, raises or crashes ends the run with a one-line
# message saying which rank did what (a hanging rank says which operation it is blocked in).
# The graded tests run more ranks and other batches than you see, and count the bytes each rank
# sends and receives.
#
# Fill in every region marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`), then
# run the test cell below it. Do not change the test cells. To try things on your own ranks,
# `gradekit.run_ranks(f, world_size, ...)` runs any `f(rank, world_size, ...)` the same way.
#
# **Expected time for a graduate student: 4 hours (exercises 1-3 on gloo ranks: 2.5 h; exercise 4, k = 2 FC
# workers: 1 h; the question: 0.5 h).**

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

import stanza_core  # the students' repository (your lecturer's clone), installed with `pip install -e .`: its tutorials/ runs your ranks
sys.path.append(str(Path(stanza_core.__file__).resolve().parents[1]))
sys.path.append(str(Path.cwd().parent))  # or the student bundle's tutorials/, beside the lab folders
from tutorials import gradekit  # noqa: E402

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## The step
#
# The cluster has N ranks: ranks `0 .. N-2` are CONV workers, rank `N-1` is the one FC worker
# (k = 1). Every rank holds the same small CNN, split at its boundary: `conv` (the CONV body,
# image `(3, 8, 8)` in, 32 values per sample out) and `fc` (the FC head, 10 classes). The global
# batch has G samples; CONV worker i holds its b = G / (N-1) of them, `x` (b, 3, 8, 8) and their
# labels `y` (b,), int64. The FC worker holds no data.
#
# The step's loss is the **mean cross-entropy over all G samples**. A step is: every CONV worker
# runs `conv_worker`, the FC worker runs `fc_worker`, then every CONV worker runs
# `allreduce_conv_grads`; then each rank takes one SGD step on its own part with the gradients
# in the parameters' `.grad` (the CONV workers on `conv`, the FC worker on `fc`). You write the
# three functions; each graded test runs your one function with correct versions of the other
# two (the visible runs on your machine use your own other two), on 2 to 4 ranks, and compares the parameters after the step with the same step taken in one
# process on the whole global batch. It also counts the bytes every rank sends and receives.
#
# `plan` tells each rank its place: `plan.rank`, `plan.world_size`, `plan.conv_ranks` (list),
# `plan.fc_rank`, `plan.batch` (b), `plan.boundary` (the shape of one sample's activations,
# `(32,)`), `plan.global_batch` (G) and `plan.conv_group` (a process group of the CONV workers).
#
# Use blocking `dist.send(tensor, dst)` / `dist.recv(tensor, src)`: a receive needs a tensor of
# the right shape and dtype to receive into; send tensors that do not require grad
# (`.detach()`). Only activations, labels, activation gradients and CONV gradients cross
# between the ranks.
#
# ## Exercise 1 (3 points): the CONV worker
#
# Write `conv_worker(conv, x, y, plan)`: the CONV body's forward on `x`; send the activations
# and then the labels to the FC worker; receive the gradient of the loss with respect to those
# activations; run the CONV body's backward with it.

# %% nbgrader={"grade": false, "grade_id": "conv_worker", "locked": false, "schema_version": 3, "solution": true, "task": false}
def conv_worker(conv, x, y, plan):
    ### BEGIN SOLUTION
    a = conv(x)  # (b, 32)
    dist.send(a.detach(), plan.fc_rank)
    dist.send(y, plan.fc_rank)
    grad = torch.empty_like(a)
    dist.recv(grad, plan.fc_rank)
    a.backward(grad)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_conv_worker", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# your conv_worker(conv, x, y, plan) on the CONV worker, a correct FC worker (the kit's; in the student
# bundle yours, once written: the functions defined so far are passed): 2 ranks
conv_rank, fc_rank = gradekit.run_lab("lab9", "try_conv", **{n: f for n, f in globals().items() if n in ("conv_worker", "fc_worker", "allreduce_conv_grads")})
print(f"CONV worker sent {conv_rank.bytes('send', 'isend')} bytes, FC worker sent {fc_rank.bytes('send', 'isend')}")
assert conv_rank.bytes("send", "isend") == fc_rank.bytes("recv", "irecv") > 0  # what one sends the other receives
want_conv, want_fc = gradekit.one_process("lab9", "try_conv")  # one SGD step on the whole batch, one process
print("CONV parameters against one process:", gradekit.compare(conv_rank.value, want_conv, 1e-6) or "equal")
assert gradekit.compare(conv_rank.value, want_conv, 1e-6) is None
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab9", "conv_worker", conv_worker=conv_worker)
assert len(verdict) == 4
for check, outcome in verdict.items():
    assert outcome == "ok", f"{check}: {outcome}"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (3 points): the FC worker
#
# Write `fc_worker(fc, plan)`: for each CONV worker in `plan.conv_ranks`, in that order: receive
# its activations and then its labels, compute that slice's part of the step's loss, backward,
# and send the activations' gradient back to that CONV worker. The FC gradients accumulate over
# the slices. Mind what the loss is a mean over.

# %% nbgrader={"grade": false, "grade_id": "fc_worker", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fc_worker(fc, plan):
    ### BEGIN SOLUTION
    for i in plan.conv_ranks:
        a = torch.empty(plan.batch, *plan.boundary)
        y = torch.empty(plan.batch, dtype=torch.int64)
        dist.recv(a, i)
        dist.recv(y, i)
        a.requires_grad_(True)
        loss = F.cross_entropy(fc(a), y, reduction="sum") / plan.global_batch  # this slice's share of the mean
        loss.backward()
        dist.send(a.grad, i)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_fc_worker", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# your fc_worker(fc, plan) on the FC worker, correct CONV workers (the kit's; in the bundle yours): 3 ranks
*conv_ranks, fc_rank = gradekit.run_lab("lab9", "try_fc", **{n: f for n, f in globals().items() if n in ("conv_worker", "fc_worker", "allreduce_conv_grads")})
print(f"FC worker sent {fc_rank.bytes('send', 'isend')} bytes, received {fc_rank.bytes('recv', 'irecv')}")
assert fc_rank.bytes("send", "isend") == sum(r.bytes("recv", "irecv") for r in conv_ranks) > 0
want_conv, want_fc = gradekit.one_process("lab9", "try_fc")  # one SGD step on the whole batch, one process
print("FC parameters against one process:", gradekit.compare(fc_rank.value, want_fc, 1e-6) or "equal")
assert gradekit.compare(fc_rank.value, want_fc, 1e-6) is None  # a loss scaled by the wrong batch fails here
assert all(gradekit.compare(r.value, want_conv, 1e-6) is None for r in conv_ranks)
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab9", "fc_worker", fc_worker=fc_worker)
assert len(verdict) == 4
for check, outcome in verdict.items():
    assert outcome == "ok", f"{check}: {outcome}"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 (2 points): the CONV gradients
#
# With several CONV workers each one's `conv` gradients cover only its own slice of the global
# batch. Write `allreduce_conv_grads(conv, plan)`: after `conv_worker` returned, leave in every
# CONV worker's `conv` parameters the gradient of the step's loss, the same on every CONV worker.
# Only the CONV workers call it; use `plan.conv_group` (the FC worker is not in it). Look at what
# the FC worker's loss already divides by before you decide whether anything needs dividing here.

# %% nbgrader={"grade": false, "grade_id": "allreduce_conv_grads", "locked": false, "schema_version": 3, "solution": true, "task": false}
def allreduce_conv_grads(conv, plan):
    ### BEGIN SOLUTION
    for p in conv.parameters():  # the slices' losses are already divided by G: their sum is the mean's gradient
        dist.all_reduce(p.grad, group=plan.conv_group)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_allreduce_conv_grads", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# your allreduce_conv_grads(conv, plan) on 2 CONV workers, the rest correct: 3 ranks
ranks = gradekit.run_lab("lab9", "try_allreduce", **{n: f for n, f in globals().items() if n in ("conv_worker", "fc_worker", "allreduce_conv_grads")})
assert all(torch.equal(ranks[0].value[n], ranks[1].value[n]) for n in ranks[0].value)  # the CONV workers agree
want_conv, want_fc = gradekit.one_process("lab9", "try_allreduce")
print("CONV parameters against one process:", gradekit.compare(ranks[0].value, want_conv, 1e-6) or "equal")
assert gradekit.compare(ranks[0].value, want_conv, 1e-6) is None  # summed, not averaged, fails here
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab9", "allreduce_conv_grads", allreduce_conv_grads=allreduce_conv_grads)
assert len(verdict) == 4
for check, outcome in verdict.items():
    assert outcome == "ok", f"{check}: {outcome}"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 4 (4 points): k = 2 FC workers
#
# One FC worker serializes every CONV worker's slice. With k FC workers the engine's layout
# (`stanza_core.topology`) sends CONV worker i's activations to FC worker Nc + (i mod k) (Nc = N - k
# CONV workers), so each FC worker serves `plan.served` (a list of CONV ranks), holds the whole
# FC layers, and computes the gradient of its own slices only. Write `fc_worker_k(fc, plan)`:
#
# * receive the activations and labels of every CONV worker in `plan.served` and, for each slice,
#   take the loss `F.cross_entropy(fc(a), y, reduction="sum") / plan.global_batch`, backward, and
#   send the activations' gradient back. The slices do not arrive in rank order: in the tests the
#   CONV workers send last rank first, 50 ms apart. Serve them in the order they arrive
#   (`src = dist.recv(a)`, without a source, receives from whichever rank sends first and returns
#   its rank; then receive that rank's labels), or in any order that cannot hang;
# * then sum the FC gradients over the k FC workers: `plan.fc_group` is their process group
#   (the CONV workers are not in it; `plan.fc_ranks` lists them).
#
# The CONV workers run the kit's own `conv_worker` and `allreduce_conv_grads` (yours, exercises 1
# and 3, do the same). The graded tests run 4 ranks (2 CONV, 2 FC) and 5 ranks (3 CONV, 2 FC: FC
# worker 3 serves CONV workers 0 and 2), compare every rank's parameters after the step with one
# process, and count each rank's bytes, the FC allreduce's included, against the engine's model.

# %% nbgrader={"grade": false, "grade_id": "fc_worker_k", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fc_worker_k(fc, plan):
    ### BEGIN SOLUTION
    for _ in plan.served:  # in the order the slices arrive: a receive without a source takes the first
        a, y = torch.empty(plan.batch, *plan.boundary), torch.empty(plan.batch, dtype=torch.int64)
        i = dist.recv(a)  # returns the sender's rank
        dist.recv(y, i)
        a.requires_grad_(True)
        (F.cross_entropy(fc(a), y, reduction="sum") / plan.global_batch).backward()
        dist.send(a.grad, i)
    for p in fc.parameters():  # each FC worker's losses are already over G: the sum is the gradient
        dist.all_reduce(p.grad, group=plan.fc_group)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_fc_worker_k", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# your fc_worker_k(fc, plan) on 4 ranks: CONV workers 0 and 1, FC workers 2 and 3
ranks = gradekit.run_lab("lab9", "try_fc_k", fc_worker_k=fc_worker_k)
for r in ranks[2:]:
    print(f"FC worker {r.rank}: (operation, peer, bytes)", [(c["op"], c["peer"], c["bytes"]) for c in r.calls])
assert all(torch.equal(ranks[2].value[n], ranks[3].value[n]) for n in ranks[2].value)  # the FC workers agree
want_conv, want_fc = gradekit.one_process("lab9", "try_fc_k")
print("FC parameters against one process:", gradekit.compare(ranks[2].value, want_fc, 1e-6) or "equal")
assert gradekit.compare(ranks[2].value, want_fc, 1e-6) is None
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab9", "fc_worker_k", fc_worker_k=fc_worker_k)
assert len(verdict) == 4
for check, outcome in verdict.items():
    assert outcome == "ok", f"{check}: {outcome}"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "why_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Question (2 points, graded by hand)
#
# Answer in the cell below, in a few sentences each.
#
# (a) Your FC worker serves the CONV workers one at a time, in rank order, with blocking
# operations, while all CONV workers send at about the same moment. Why can this not deadlock?
# What do the CONV workers other than the first spend their time on?
#
# (b) Suppose the FC worker used the mean over its b samples (`F.cross_entropy(fc(a), y)`)
# instead of your loss. Which gradients would be wrong, on which ranks, and by what factor?

# %% [markdown] nbgrader={"grade": true, "grade_id": "why", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# **Model answer.** (a) Each CONV worker's operations are send(a), send(y), recv(grad) to and from the FC worker
# only; the FC worker's are recv(a), recv(y), send(grad) with CONV worker 0, then with 1, and so
# on. A CONV worker's send waits until the FC worker posts the matching receive, which it does
# once it has served the workers before it; the FC worker never waits for anything but the CONV
# worker it is serving, which is ready. The waits form a chain ending at the FC worker, never a
# cycle. CONV workers 1..N-2 sit blocked in their first send while the FC worker serves the
# earlier ones: idle time that an FC worker taking activations in order of arrival would overlap.
#
# (b) The loss would be the sum of N-1 slice means, N-1 times the global mean. Every gradient
# is then N-1 times too large: the FC gradients on the FC worker, the activation gradients it
# sends, and therefore the CONV gradients (after the allreduce) on every CONV worker. The
# parameters after the step equal a step with an (N-1) times larger learning rate.
#
# **Rubric.** (a) 1 point: every CONV worker does send, send, receive, and the FC worker does
# receive, receive, send for one CONV worker at a time, so each wait is for the FC worker to
# reach that CONV worker, which it does after finishing the earlier ones: no cycle of waits. The
# later CONV workers wait, blocked in their first `send`, for their turn (their time is lost,
# which is what T4's pipeline fixes). (b) 1 point: every gradient is N-1 times too large: the FC
# gradients (on the FC worker, a sum of N-1 slice means instead of their mean) and the
# activation gradients, hence the CONV gradients on every CONV worker; the step equals a step
# with N-1 times the learning rate.
# ### END SOLUTION
