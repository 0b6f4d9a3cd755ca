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
# # Lab 4 · Reading the engine's timeline (goes with tutorial T4)
#
# Fill in every cell marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`), then
# run the test cell below it. A *bar* is one dict of `stanza_core.viz.timeline_intervals(rank,
# step)`: `{"what": "backward" | "allreduce" | "FC forward + backward" | ..., "start": s,
# "end": s, "peer": rank or None, ...}` (times in seconds). Tutorial T4's `results.json` holds
# real ones under `intervals`. The tests you see are a first check; more run when the lab is
# graded, at inputs you do not see, against values taken from the engine when the lab was
# released. Write each answer yourself: an answer that calls the engine's code that computes the
# same quantity gets no points. Answer the "why" question in your own words: it is graded by hand.
# Do not change the test cells.
#
# **Expected time for a graduate student: 1.5 hours (three short exercises: 1 h; the question: 0.5 h).**

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import torch

from stanza_core import get_model, split_model
from stanza_core.viz import timeline_intervals


def bar(what, start, end, peer=None):  # a hand-made bar, for your own checks
    return {"rank": 0, "lane": "compute", "what": what, "category": "x", "peer": peer, "bytes": 0,
            "start": start, "end": end}


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 (3 points)
#
# Write `hidden_fraction(bars)`: given one CONV worker's bars of one step, the fraction of the
# total allreduce time (summed over its buckets) that lies inside its backward bar; 0.0 if there
# is no backward bar or no allreduce. What is it with one bucket (`--bucket-mb 25`)?

# %% nbgrader={"grade": false, "grade_id": "hidden_fraction", "locked": false, "schema_version": 3, "solution": true, "task": false}
def hidden_fraction(bars: list[dict]) -> float:
    ### BEGIN SOLUTION
    backward = [b for b in bars if b["what"] == "backward"]
    if not backward:
        return 0.0
    b0, b1 = backward[0]["start"], backward[0]["end"]
    total = hidden = 0.0
    for b in bars:
        if b["what"] == "allreduce":
            total += b["end"] - b["start"]
            hidden += max(0.0, min(b["end"], b1) - max(b["start"], b0))
    return hidden / total if total else 0.0
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_hidden_fraction", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
assert hidden_fraction([bar("backward", 0, 1), bar("allreduce", 1, 2)]) == 0.0
### BEGIN HIDDEN TESTS
assert abs(hidden_fraction([bar("backward", 1.0, 3.0), bar("allreduce", 2.0, 4.0), bar("allreduce", 3.5, 4.5)])
           - 1.0 / 3.0) < 1e-12
assert abs(hidden_fraction([bar("forward", 0.0, 1.0), bar("backward", 1.0, 5.0), bar("allreduce", 0.5, 1.5),
                            bar("allreduce", 2.0, 3.0)]) - 1.5 / 2.0) < 1e-12
assert hidden_fraction([bar("backward", 0.0, 1.0)]) == 0.0
assert hidden_fraction([bar("allreduce", 0.0, 1.0)]) == 0.0
assert abs(hidden_fraction([bar("backward", 0.0, 10.0), bar("allreduce", 2.0, 3.0)]) - 1.0) < 1e-12
term_bars = __frozen__([(0.0, round(__term__.uniform(2.0, 6.0), 3))] + [  # this term's backward and allreduces
    (round(s, 3), round(s + __term__.uniform(0.2, 2.0), 3)) for s in [__term__.uniform(0.0, 7.0) for _ in range(3)]])
(b0, b1), *ars = term_bars
want = sum(max(0.0, min(e, b1) - max(s, b0)) for s, e in ars) / sum(e - s for s, e in ars)
assert abs(hidden_fraction([bar("backward", b0, b1)] + [bar("allreduce", s, e) for s, e in ars]) - want) < 1e-12
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (2 points)
#
# Write `pipeline_order(metrics, step)`: the CONV ranks in the order in which the first FC
# worker of a run computed their chunks in `step` (the `peer` of its "FC forward + backward"
# bars, by start time). `metrics` is a run's metrics JSON as `run_job(..., timeline=True)`
# returns it; `timeline_intervals(rank_entry, step)` turns one rank's timeline into bars. Is
# the order always rank order?

# %% nbgrader={"grade": false, "grade_id": "pipeline_order", "locked": false, "schema_version": 3, "solution": true, "task": false}
def pipeline_order(metrics: dict, step: int) -> list[int]:
    ### BEGIN SOLUTION
    fc = next(r for r in metrics["ranks"] if r["role"] == "fc_worker")
    bars = [b for b in timeline_intervals(fc, step) if b["what"] == "FC forward + backward"]
    return [b["peer"] for b in sorted(bars, key=lambda b: b["start"])]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_pipeline_order", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def fake_run(order, step=0):
    events = []
    for n, peer in enumerate(order):
        events += [{"step": step, "t": 0.1 + n, "event": "forward_start", "category": "compute", "peer": peer, "bytes": 0},
                   {"step": step, "t": 0.5 + n, "event": "backward_end", "category": "compute", "peer": peer, "bytes": 0}]
    return {"ranks": [{"rank": 0, "role": "conv_worker", "timeline": []},
                      {"rank": 9, "role": "fc_worker", "timeline": events}]}


assert pipeline_order(fake_run([1, 0]), 0) == [1, 0]
### BEGIN HIDDEN TESTS
assert pipeline_order(fake_run([2, 0, 1], step=3), 3) == [2, 0, 1]
assert pipeline_order(fake_run([0, 2, 1, 3], step=1), 1) == [0, 2, 1, 3]
assert pipeline_order(fake_run([2, 0, 1], step=3), 0) == []
term_run = __frozen__((__term__.sample(range(6), __term__.randint(3, 6)), __term__.randint(1, 5)))  # this term's
term_order, term_step = term_run                                                                    # order, step
assert pipeline_order(fake_run(term_order, step=term_step), term_step) == term_order
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 (3 points)
#
# Write `bucket_count(model, bucket_mb, image_size=32, num_classes=10)`: how many buckets the
# engine makes for a zoo model's CONV body at `--bucket-mb bucket_mb`. The engine's rule (T4):
# parameters in reverse order, as the backward produces their gradients; a new bucket starts
# before one would exceed the cap of `int(bucket_mb * 2**20)` bytes; a parameter larger than the
# cap gets a bucket of its own. (PyTorch DDP's rule, lab 10's, differs: a bucket closes once it
# holds *at least* the cap.) How many for `cifar_alexnet` at 0.5?

# %% nbgrader={"grade": false, "grade_id": "bucket_count", "locked": false, "schema_version": 3, "solution": true, "task": false}
def bucket_count(model: str, bucket_mb: float, image_size: int = 32, num_classes: int = 10) -> int:
    ### BEGIN SOLUTION
    split = split_model(get_model(model, num_classes), input_shape=(3, image_size, image_size))
    cap = int(bucket_mb * 2**20)
    buckets, size = 1, 0
    for p in reversed(list(split.conv.parameters())):
        nbytes = p.numel() * p.element_size()
        if size and size + nbytes > cap:
            buckets, size = buckets + 1, 0
        size += nbytes
    return buckets
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_bucket_count", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
assert bucket_count("cifar_alexnet", 25.0) == 1
### BEGIN HIDDEN TESTS
from stanza_core.strategies.ps import engine as _ps
from stanza_core.strategies.stanza.engine import GradBuckets

forbid = [GradBuckets, _ps.bucket_ranges]
cases = __frozen__([((name, mb, size), len(GradBuckets(list(split_model(get_model(name, 10), input_shape=(3, size, size))
                                                          .conv.parameters()), None, "conv", "conv_grads", mb,
                                                     torch.device("cpu")).buckets))
    for name, size, mb in (("cifar_alexnet", 32, 0.05), ("cifar_alexnet", 32, 0.5), ("cifar_alexnet", 32, 0.3),
                           ("cifar_alexnet", 32, 1.1), ("tiny_cnn", 16, 0.001), ("tiny_cnn", 16, 0.01),
                           ("cifar_alexnet", 32, round(__term__.uniform(0.02, 1.5), 3)),  # this term's caps
                           ("tiny_cnn", 16, round(__term__.uniform(0.0005, 0.02), 4)))])
for (name, mb, size), want in cases:
    assert __graded__(bucket_count, forbid, name, mb, image_size=size) == want, (name, mb)
### END HIDDEN TESTS
# %% [markdown] nbgrader={"grade": true, "grade_id": "why_bucket_size", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### Why (2 points, graded by hand)
#
# Smaller buckets let the allreduce start earlier in the backward. Why, then, does the engine
# not use the smallest buckets possible, one per parameter? Name two costs that grow with the
# number of buckets, and say where on T4's timeline you would see them.
#
# ### BEGIN SOLUTION
# **Model answer.** Each allreduce pays a fixed cost besides its bytes: the ring's 2 (n - 1)
# latency terms per collective, and on the host a launch and the copies into and out of the
# bucket's flat buffer (two operator calls per bucket). With many small buckets these fixed costs
# add up and the link carries short messages at less than its bandwidth; the last bucket (the
# first layers' gradients) still leaves after the backward ends. On the timeline: many thin
# allreduce bars with gaps between them, and an allreduce tail after the backward bar that does
# not shrink.
#
# **Rubric.** 1 point: a per-collective fixed cost (latency per ring step, launch, copies) that
# many buckets multiply. 1 point: a reading of the timeline (gaps between bars, or the tail
# after the backward that stays). Half a point off if only "overhead" is named without what it is.
# ### END SOLUTION

