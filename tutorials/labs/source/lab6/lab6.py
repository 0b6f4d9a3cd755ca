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
# run the test cell below it. The graded tests check your functions at several inputs against
# torch and against the engine's traffic formulas (`stanza_core.perf.traffic`). Do not change
# the test cells.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import torch

from stanza_core.perf import traffic

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
for sizes in ((1, 5), (3, 2, 4), (7,)):
    x = torch.randn(sum(sizes), 5, 3, 3, dtype=torch.float64) * 3 + torch.arange(5.0).view(1, 5, 1, 1)
    parts, start = [], 0
    for s in sizes:
        parts.append(_stats(x[start:start + s]))
        start += s
    mean, var = merge_bn_stats(parts)
    assert torch.allclose(mean, x.mean((0, 2, 3)), atol=1e-10)
    assert torch.allclose(var, x.var((0, 2, 3), unbiased=False), atol=1e-9), sizes
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
for channels, n in ((24, 2), (24, 3), (64 + 128, 7), (4224, 15), (1, 2)):
    assert bn_stats_bytes(channels, n) == traffic.report(traffic.bn_stats_share(channels, n)), (channels, n)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 (2 points)
#
# Write `first_parted_step(rel_diff, tol=1e-6)`: `rel_diff[t]` is the relative parameter
# difference of two runs after step t (step numbers start at 0, as in T6's `results.json`,
# `drift.fp32.param_rel_diff`). Return the first step whose difference exceeds `tol`, or `None`
# if the runs never part. At which step do T6's fp32 runs part? Does a 2-step comparison of two
# strategies see it?

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
