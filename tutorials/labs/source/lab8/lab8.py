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
# run the test cell below it. The graded tests check your functions at inputs you do not see,
# and exercise 3 against the performance model's own bucket schedule
# (`stanza_core.perf.model.bucketed_backward`). Do not change the test cells.
#
# The H200 records are in `stanza_core/perf/records/h200/` (`plain_fwd_bwd_s`, seconds of one
# forward + backward of the whole model at the file's batch, measured).

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import json

from stanza_core import perf
from stanza_core.perf.model import bucketed_backward
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
for t0, c in ((0.001, 5.25e-5), (3.25e-3, 6.9e-4), (7.0, 0.25)):
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
assert abs(exposed_after_backward([0.2, 0.5, 1.0], [0.4, 0.1, 0.2], 1.0) - 0.2) < 1e-12
assert abs(exposed_after_backward([0.1, 0.2, 0.3], [0.5, 0.5, 0.5], 0.3) - 1.3) < 1e-12
assert exposed_after_backward([0.1, 0.2], [0.01, 0.01], 1.0) == 0.0
# against the model's own schedule: one bucket per layer of VGG-16's CONV body, 8 nodes
vgg = perf.named_profile("vgg16", batch_size=32)
for gbps in (1.0, 10.0, 100.0):
    cl = perf.Cluster(8, gbps)
    units = [(r.params, 1e-3 * (i + 1)) for i, r in enumerate(x for x in vgg.layers if x.part == "conv" and x.params)]
    bwd_end, ar_end, _, n = bucketed_backward(units, cl, 8, 1, False)  # a 1-byte cap: a bucket per unit
    ready = [sum(dt for _, dt in units[:i + 1]) for i in range(len(units))]
    comm = [cl.ring_allreduce_s(4 * p, 8) for p, _ in units]
    assert n == len(units) and abs(exposed_after_backward(ready, comm, bwd_end) - max(0.0, ar_end - bwd_end)) < 1e-12
### END HIDDEN TESTS
