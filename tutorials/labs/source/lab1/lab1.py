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
# # Lab 1 · A CNN's anatomy, and where to cut it (goes with tutorial T1)
#
# Fill in every cell marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`), then
# run the test cell below it. The graded tests check your function at several inputs against
# the engine (`stanza_core.split_model`) and the performance model (`stanza_core.perf`); the
# tests you see are a first check, more run when the lab is graded. Do not change the test cells.
#
# Counts you may need (224 x 224 inputs, fp32):
#
# | model | P (all parameters) | P_c (CONV body) | A (boundary values per sample) |
# |---|---|---|---|
# | VGG-16 | 138,357,544 | 14,714,688 | 25,088 |
# | ResNet-50 | 25,557,032 | 23,508,032 | 2,048 |

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import torch

from stanza_core import get_model, perf, split_model

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 (2 points)
#
# Write `fc_param_share(model_name, image_size=224)`: the FC head's share of a zoo model's
# parameters, using only `split_model(get_model(model_name, 1000), input_shape=...)` and
# `.parameters()` of its two parts (no `profile_model`). Then evaluate it for `vgg16` and
# `resnet50` (`image_size=64` is enough: parameter counts do not depend on the input size).

# %% nbgrader={"grade": false, "grade_id": "fc_param_share", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fc_param_share(model_name: str, image_size: int = 224) -> float:
    ### BEGIN SOLUTION
    split = split_model(get_model(model_name, 1000), input_shape=(3, image_size, image_size))
    fc = sum(p.numel() for p in split.fc.parameters())
    conv = sum(p.numel() for p in split.conv.parameters())
    return fc / (fc + conv)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_fc_param_share", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
share = fc_param_share("cifar_alexnet", image_size=32)
assert 0.0 < share < 1.0
### BEGIN HIDDEN TESTS
for name in ("vgg16", "resnet50", "cifar_alexnet"):
    size = 32
    assert abs(fc_param_share(name, image_size=size)
               - perf.named_profile(name, image_size=size).fc_param_share()) < 1e-12, name
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (3 points)
#
# ResNet-50 is the counter-example of layer separation. Put a number on it: write
# `ddp_over_stanza_bytes(P, Pc, A, N, b)`, the bytes the whole cluster sends per step under DDP
# divided by those under Stanza with one FC worker, on N nodes with b samples per data worker
# (DDP: N data workers; Stanza: N - 1 CONV workers, so a global batch of b (N - 1)). Use the
# formulas of tutorial T2 and notebook 02: a ring allreduce of S bytes among n ranks makes every
# member send 2 (n - 1) / n S; every sample's activation (4 A bytes) goes to the FC worker and its
# gradient comes back, with its int64 label (8 bytes) on the way out.
#
# Evaluate it with the table's counts for VGG-16 and ResNet-50 at N = 8, b = 32. Then, in
# your own words (not graded): why does layer separation gain little on ResNet-50?

# %% nbgrader={"grade": false, "grade_id": "ddp_over_stanza_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def ddp_over_stanza_bytes(P: int, Pc: int, A: int, N: int, b: int) -> float:
    ### BEGIN SOLUTION
    ddp = 2 * (N - 1) * 4 * P
    G = b * (N - 1)
    stanza = 2 * 4 * A * G + 8 * G + 2 * (N - 2) * 4 * Pc
    return ddp / stanza
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ddp_over_stanza_bytes", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
assert ddp_over_stanza_bytes(138_357_544, 14_714_688, 25_088, 8, 32) > ddp_over_stanza_bytes(
    25_557_032, 23_508_032, 2_048, 8, 32)
### BEGIN HIDDEN TESTS
for (P, Pc, A) in ((138_357_544, 14_714_688, 25_088), (25_557_032, 23_508_032, 2_048), (61_100_840, 2_469_696, 9_216)):
    counts = perf.ModelCounts(Pc, P - Pc, A)
    for N, b in ((3, 1), (8, 32), (16, 4), (64, 32)):
        ddp = perf.totals(perf.expected_bytes(counts, "ddp", N, global_batch=b * N))["bytes_per_step"]
        stanza = perf.totals(perf.expected_bytes(counts, "stanza", N, 1, global_batch=b * (N - 1)))["bytes_per_step"]
        assert abs(ddp_over_stanza_bytes(P, Pc, A, N, b) / (ddp / stanza) - 1) < 1e-6, (P, N, b)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 (3 points)
#
# Write `boundary_bytes_per_step(model_name, image_size, b)`: the bytes one CONV worker sends
# across the boundary in one step (fp32 activations and int64 labels) and the bytes it receives
# (fp32 activation gradients), as a pair `(sent, received)`, for b samples. Find A by running the
# CONV body of `split_model(get_model(model_name, 1000), input_shape=..., batch_size=b)` on one
# zero image. Check it yourself against `perf.expected_bytes` for 2 nodes and k = 1.

# %% nbgrader={"grade": false, "grade_id": "boundary_bytes_per_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def boundary_bytes_per_step(model_name: str, image_size: int, b: int) -> tuple[int, int]:
    ### BEGIN SOLUTION
    split = split_model(get_model(model_name, 1000), input_shape=(3, image_size, image_size), batch_size=b)
    with torch.no_grad():
        values = split.conv(torch.zeros(1, 3, image_size, image_size)).numel()  # A, per sample
    return 4 * b * values + 8 * b, 4 * b * values
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_boundary_bytes_per_step", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
sent, received = boundary_bytes_per_step("cifar_alexnet", 32, 4)
assert sent > received > 0
### BEGIN HIDDEN TESTS
for name, size, b in (("alexnet", 64, 7), ("cifar_alexnet", 32, 3), ("tiny_cnn", 16, 5)):
    row = perf.expected_bytes(perf.named_profile(name, image_size=size, batch_size=b), "stanza", 2, 1,
                              global_batch=b)[0]
    want = (row["sent"]["activations"] + row["sent"]["labels"], row["recv"]["activation_grads"])
    assert tuple(boundary_bytes_per_step(name, size, b)) == want, (name, size, b)
### END HIDDEN TESTS
