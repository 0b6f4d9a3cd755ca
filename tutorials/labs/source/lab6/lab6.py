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
# # Lab 6 · Convergence and batch norm (goes with tutorial T6)
#
# Fill in every cell marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`), then
# run the test cell below it. The tests you see are a first check; more run when the lab is
# graded, at inputs you do not see, against values taken from torch and the engine when the lab
# was released. Write each answer yourself: an answer that calls the library function that
# computes the same quantity gets no points. Answer the "why" question in your own words: it is
# graded by hand. Do not change the test cells.
#
# **Expected time for a graduate student: 1.5 hours (three short exercises: 1 h; the question: 0.5 h).**

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import torch


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 (3 points)
#
# With `--bn-stats global` a batch-norm layer normalises by the statistics of the whole global
# batch, although each CONV worker holds only its slice. Write `merge_bn_stats(parts)`: `parts`
# is one tuple `(count, total, total_sq)` per worker, where `count` is the number of values per
# channel the worker holds (samples x height x width) and `total`, `total_sq` are per-channel
# tensors of the sum of its values and of their squares. Return `(mean, var)`: the per-channel
# mean and the biased variance (divided by the total count, as batch norm normalises) of all
# workers' values together. Workers may hold different counts.

# %% nbgrader={"grade": false, "grade_id": "merge_bn_stats", "locked": false, "schema_version": 3, "solution": true, "task": false}
def merge_bn_stats(parts: list[tuple[int, torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    ### BEGIN SOLUTION
    n = sum(c for c, _, _ in parts)
    s1 = sum(t for _, t, _ in parts)
    s2 = sum(q for _, _, q in parts)
    mean = s1 / n
    return mean, s2 / n - mean * mean
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_merge_bn_stats", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def _stats(x):  # (count, sum, sum of squares) per channel of a (b, C, H, W) slice
    return x.numel() // x.shape[1], x.sum((0, 2, 3)), (x * x).sum((0, 2, 3))


torch.manual_seed(0)
x = torch.randn(4, 3, 2, 2, dtype=torch.float64)
mean, var = merge_bn_stats([_stats(x[:2]), _stats(x[2:])])
assert torch.allclose(mean, x.mean((0, 2, 3)))
### BEGIN HIDDEN TESTS
def _slices(sizes):  # a deterministic (sum(sizes), 5, 3, 3) batch, channel c around c, cut into slices
    n = sum(sizes)
    x = (torch.arange(n * 45, dtype=torch.float64).reshape(n, 5, 3, 3) * 0.37).sin() * 3
    x = x + torch.arange(5.0, dtype=torch.float64).view(1, 5, 1, 1)
    return x, list(torch.split(x, list(sizes)))


cases = __frozen__([(sizes, _slices(sizes)[0].mean((0, 2, 3)).tolist(),
                     _slices(sizes)[0].var((0, 2, 3), unbiased=False).tolist())
                    for sizes in [(1, 5), (3, 2, 4)] + [  # and this term's slices
                        tuple(__term__.randint(1, 9) for _ in range(__term__.randint(1, 5))) for _ in range(3)]])
for sizes, want_mean, want_var in cases:
    mean, var = merge_bn_stats([_stats(s) for s in _slices(sizes)[1]])
    assert max(abs(float(m) - w) for m, w in zip(mean.tolist(), want_mean, strict=True)) < 1e-10, sizes
    assert max(abs(float(v) - w) for v, w in zip(var.tolist(), want_var, strict=True)) < 1e-9, sizes
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (3 points)
#
# Per batch-norm layer and step, `--bn-stats global` makes 4 allreduces of C fp32 values among
# the n CONV workers (the sum, the centred sum of squares, and in the backward their
# gradients), each a ring allreduce. Write `bn_stats_bytes(channels, n)`: the bytes one CONV
# worker sends per step for a body whose batch-norm layers have `channels` channels in all
# (each layer called once per step), rounded to a whole number of bytes. T6's model has 8 + 16
# channels and 2 CONV workers: check your answer against the engine's counter there.

# %% nbgrader={"grade": false, "grade_id": "bn_stats_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def bn_stats_bytes(channels: int, n: int) -> int:
    ### BEGIN SOLUTION
    return round(2 * (n - 1) * 4 * 4 * channels / n)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_bn_stats_bytes", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
assert bn_stats_bytes(24, 1) == 0
### BEGIN HIDDEN TESTS
from stanza_core.perf import traffic

forbid = [traffic.bn_stats_share, traffic.ring_share]
cases = __frozen__([((channels, n), traffic.report(traffic.bn_stats_share(channels, n)))
                    for channels, n in [(24, 2), (1, 2), (1, 3)] + [  # and this term's
                        (__term__.randint(1, 5000), __term__.randint(2, 16)) for _ in range(4)]])
for args, want in cases:
    assert __graded__(bn_stats_bytes, forbid, *args) == want, args
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 (2 points)
#
# Write `first_parted_step(rel_diff, tol=1e-6)`: `rel_diff` is the list of relative parameter
# differences of two runs, one entry per step, in order (T6's `results.json` holds it as
# `drift.fp32.cmp.param_rel_diff`). Return the index t of the first entry that exceeds `tol`, or
# `None` if the runs never part. The index counts from 0, as T6's
# `drift.fp32.cmp.first_step_params_parted` does (T6's figure numbers the steps from 1, so it draws
# index t at step t + 1); T6 takes `tol = 1e-6` as "parted". Apply it to T6's `results.json`:
# at which index do its fp32 runs part? Does a 2-step comparison of two strategies see it?

# %% nbgrader={"grade": false, "grade_id": "first_parted_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def first_parted_step(rel_diff: list[float], tol: float = 1e-6):
    ### BEGIN SOLUTION
    return next((t for t, d in enumerate(rel_diff) if d > tol), None)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_first_parted_step", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
assert first_parted_step([1e-8, 2e-8, 3e-6, 1e-2]) == 2
### BEGIN HIDDEN TESTS
assert first_parted_step([1e-8] * 50) is None
assert first_parted_step([1e-8, 5e-7, 2e-7, 4e-3], tol=1e-6) == 3
assert first_parted_step([1e-8, 5e-7, 2e-7, 4e-3], tol=1e-7) == 1
assert first_parted_step([2e-6, 1e-9]) == 0
assert first_parted_step([]) is None
### END HIDDEN TESTS
# %% [markdown] nbgrader={"grade": true, "grade_id": "why_parting", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### Why (2 points, graded by hand)
#
# T6's two fp32 runs differ only in the order in which the batch's gradient is summed, yet after
# a while their parameters part far beyond float rounding, while the fp64 runs never part. Why,
# and why does that not make a one-step comparison of two strategies (at 1e-6) unreliable?
#
# ### BEGIN SOLUTION
# **Model answer.** A different summation order changes the fp32 sum by rounding, about 1e-7 to
# 1e-6 relative. Training feeds that difference back: later gradients are computed at slightly
# different parameters, and a discontinuity (a max-pool window whose argmax flips) turns a tiny
# difference into a jump, so the trajectories diverge: chaos, not a bug. Which step it happens at
# is luck (another chunk size parts elsewhere). In fp64 the rounding is ~1e-16 and does not reach
# such a flip within the run. A one-step comparison starts both strategies from the same
# parameters, so there is nothing to amplify: the gradients agree to rounding, about 1e-6, which
# is what an exactness test can demand.
#
# **Rubric.** 1 point: rounding from summation order, amplified over steps by the training dynamics
# (a flip such as a max-pool argmax), with fp64 as the control. 1 point: one step from the same
# state has no time to amplify, so it tests the strategy, not the luck of the trajectory.
# ### END SOLUTION

