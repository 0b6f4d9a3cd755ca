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
# # Lab 8 · GPU against CPU (goes with tutorial T8)
#
# Fill in every cell marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`), then
# run the test cell below it. The tests you see are a first check; more run when the lab is
# graded, at inputs you do not see, against values taken from the records and the performance
# model when the lab was released. Write each answer yourself: an answer that calls the library
# function that computes the same quantity gets no points. Answer the "why" question in your own
# words: it is graded by hand. Do not change the test cells.
#
# The H200 records are in `stanza_core/perf/records/h200/` (`plain_fwd_bwd_s`, seconds of one
# forward + backward of the whole model at the file's batch, measured).
#
# **Expected time for a graduate student: 1.5 hours (three short exercises: 1 h; the question: 0.5 h).**

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import json

from stanza_core import perf
from stanza_core.perf.records import RECORDS_DIR


def record(model, batch):  # a measured H200 record, TF32 on
    return json.loads((RECORDS_DIR / "h200" / f"{model}-b{batch}-tf32.json").read_text())

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 (3 points)
#
# A step time T(b) = t0 + b c has a fixed part t0 (per step: kernel launches, host work) and a
# per-sample part c. Write `fixed_and_per_sample(b1, t1, b2, t2)`: the pair `(t0, c)` of the
# line through two measured points (b1, t1) and (b2, t2), b1 != b2. Apply it to AlexNet's and
# VGG-16's H200 records at batches 64 and 128: which has the larger fixed share at batch 32?

# %% nbgrader={"grade": false, "grade_id": "fixed_and_per_sample", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fixed_and_per_sample(b1: float, t1: float, b2: float, t2: float) -> tuple[float, float]:
    ### BEGIN SOLUTION
    c = (t2 - t1) / (b2 - b1)
    return t1 - b1 * c, c
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_fixed_and_per_sample", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
t0, c = fixed_and_per_sample(1, 3.0, 2, 5.0)
assert abs(t0 - 1.0) < 1e-12 and abs(c - 2.0) < 1e-12
### BEGIN HIDDEN TESTS
for b1, b2, t0_, c_ in ((16, 32, 0.004, 1e-5), (128, 64, 0.001, 5.25e-5), (3, 7, 0.0, 2.5), (10, 1, 7.0, -0.5)):
    got = fixed_and_per_sample(b1, t0_ + b1 * c_, b2, t0_ + b2 * c_)
    assert abs(got[0] - t0_) < 1e-9 and abs(got[1] - c_) < 1e-12, (b1, b2, got)
b1, b2, t0_, c_ = __frozen__((__term__.randint(1, 64), __term__.randint(65, 256),  # this term's line
                              round(__term__.uniform(0.0, 0.01), 6), round(__term__.uniform(1e-6, 1e-3), 9)))
got = fixed_and_per_sample(b1, t0_ + b1 * c_, b2, t0_ + b2 * c_)
assert abs(got[0] - t0_) < 1e-9 and abs(got[1] - c_) < 1e-12, (b1, b2, got)
a64, a128 = record("alexnet", 64)["plain_fwd_bwd_s"], record("alexnet", 128)["plain_fwd_bwd_s"]
t0, c = fixed_and_per_sample(64, a64, 128, a128)
assert abs(t0 + 64 * c - a64) < 1e-12 and abs(t0 + 128 * c - a128) < 1e-12
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (2 points)
#
# Write `launch_bound_batch(t0, c)`: the batch below which more than half of a step T(b) = t0 +
# b c is its fixed part (t0 > 0, c > 0; a float, not rounded). Where is it for AlexNet on the
# H200 (exercise 1's fit), and for VGG-16? Which of the two is launch-bound at batch 32?

# %% nbgrader={"grade": false, "grade_id": "launch_bound_batch", "locked": false, "schema_version": 3, "solution": true, "task": false}
def launch_bound_batch(t0: float, c: float) -> float:
    ### BEGIN SOLUTION
    return t0 / c
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_launch_bound_batch", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
assert abs(launch_bound_batch(1.0, 0.5) - 2.0) < 1e-12
### BEGIN HIDDEN TESTS
for t0, c in ((0.001, 5.25e-5), (3.25e-3, 6.9e-4), (7.0, 0.25),
              __frozen__((round(__term__.uniform(1e-4, 1e-2), 7), round(__term__.uniform(1e-6, 1e-3), 9)))):
    b = launch_bound_batch(t0, c)
    assert abs(t0 - b * c) < 1e-9 * max(t0, 1), (t0, c)  # at b the two parts are equal
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 (4 points)
#
# Buckets leave on one link, one at a time, in order: bucket i is ready at `ready_s[i]` (its last
# gradient exists) and its allreduce takes `comm_s[i]`; it starts when it is ready and the link
# is free (the previous bucket's allreduce is done). The backward ends at `backward_s`. Write
# `exposed_after_backward(ready_s, comm_s, backward_s)`: how long after the backward's end the
# last allreduce completes (0.0 if it completes before). This is T4's and T8's "allreduce left
# after the backward": compute it for one bucket and for two equal halves of the same gradient.

# %% nbgrader={"grade": false, "grade_id": "exposed_after_backward", "locked": false, "schema_version": 3, "solution": true, "task": false}
def exposed_after_backward(ready_s: list[float], comm_s: list[float], backward_s: float) -> float:
    ### BEGIN SOLUTION
    link_free = 0.0
    for ready, dur in zip(ready_s, comm_s):
        link_free = max(ready, link_free) + dur
    return max(0.0, link_free - backward_s)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_exposed_after_backward", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
assert abs(exposed_after_backward([1.0], [0.5], 1.0) - 0.5) < 1e-12
### BEGIN HIDDEN TESTS
from stanza_core.perf import model as _model

forbid = [_model.bucketed_backward]
assert abs(exposed_after_backward([0.2, 0.5, 1.0], [0.4, 0.1, 0.2], 1.0) - 0.2) < 1e-12
assert abs(exposed_after_backward([0.1, 0.2, 0.3], [0.5, 0.5, 0.5], 0.3) - 1.3) < 1e-12
assert exposed_after_backward([0.1, 0.2], [0.01, 0.01], 1.0) == 0.0


def _schedule(gbps):  # the model's own schedule: a bucket per layer of VGG-16's CONV body, 8 nodes
    vgg, cl = perf.named_profile("vgg16", batch_size=32), perf.Cluster(8, gbps)
    units = [(r.params, 1e-3 * (i + 1)) for i, r in enumerate(x for x in vgg.layers if x.part == "conv" and x.params)]
    bwd_end, ar_end, _, n = _model.bucketed_backward(units, cl, 8, 1, False)  # a 1-byte cap: a bucket per unit
    assert n == len(units)
    ready = [sum(dt for _, dt in units[:i + 1]) for i in range(len(units))]
    comm = [cl.ring_allreduce_s(4 * p, 8) for p, _ in units]
    return ready, comm, bwd_end, max(0.0, ar_end - bwd_end)


cases = __frozen__([_schedule(gbps) for gbps in (1.0, 10.0, 100.0, 400.0,
                                                round(__term__.uniform(0.5, 200.0), 2))])  # and this term's link
for ready, comm, bwd_end, want in cases:
    assert abs(__graded__(exposed_after_backward, forbid, ready, comm, bwd_end) - want) < 1e-12, bwd_end
### END HIDDEN TESTS
# %% [markdown] nbgrader={"grade": true, "grade_id": "why_fixed_part", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### Why (2 points, graded by hand)
#
# Exercise 1's fit gives AlexNet on the H200 a fixed part t0 of about 1 ms and VGG-16 about
# 3 ms, yet by exercise 2's rule AlexNet's step is dominated by its fixed part up to a batch of
# about 19, VGG-16's only below about 5. What makes up t0 on a GPU, and why does the same kind of
# cost weigh so differently on the two models? Is either launch-bound at batch 32?
#
# ### BEGIN SOLUTION
# **Model answer.** t0 is work per step that does not grow with the batch: launching the kernels
# of every operator (the forward's from Python, the backward's from the C++ autograd engine, the
# optimizer's few foreach kernels on CUDA), host dispatch, and kernels too small to fill the GPU.
# It grows with the number of operations, not samples. What matters is t0 against the per-sample
# part b c: AlexNet's few, cheap layers cost about 53 µs per sample, so 1 ms of fixed cost is as
# large as 19 samples' work; VGG-16's heavy convolutions cost about 0.69 ms per sample, so its
# larger t0 is worth under 5 samples. At batch 32 neither is launch-bound by this rule (AlexNet's
# fixed share is about 37 %).
#
# **Rubric.** 1 point: t0 as per-step, per-operation host and launch cost (not per sample), with
# where the launches come from. 1 point: the comparison is t0 against b c, with the per-sample
# costs, and the batch-32 verdict follows from it.
# ### END SOLUTION

