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
# run the test cell below it. The tests you see are a first check; more run when the lab is
# graded, at inputs you do not see, against values taken from the engine and the performance
# model when the lab was released. Write each answer yourself: an answer that calls the library
# function that computes the same quantity gets no points. Answer the "why" questions in your own
# words: they are graded by hand. Do not change the test cells.
#
# Counts you may need (224 x 224 inputs, fp32):
#
# | model | P (all parameters) | P_c (CONV body) | A (boundary values per sample) |
# |---|---|---|---|
# | VGG-16 | 138,357,544 | 14,714,688 | 25,088 |
# | ResNet-50 | 25,557,032 | 23,508,032 | 2,048 |
#
# **Expected time for a graduate student: 1.5 hours (three short exercises: 1 h; the question: 0.5 h).**

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import torch

from stanza_core import get_model, perf, split_model
from stanza_core.variant import Variant

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 (2 points)
#
# Write `fc_param_share(model_name, image_size=224)`: the FC head's share of a zoo model's
# parameters, using only `split_model(get_model(model_name, 1000), input_shape=...)` and
# `.parameters()` of its two parts. Then evaluate it for `vgg16` and
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
from stanza_core import anatomy

forbid = [perf.named_profile, anatomy.profile_model, anatomy.Profile.fc_param_share]
want = __frozen__({name: perf.named_profile(name, image_size=64).fc_param_share()
                   for name in ["resnet50", "tiny_cnn"] + __term__.sample(  # and two of this term's
                       ["alexnet", "vgg11", "vgg16", "vgg11_bn", "resnet18", "cifar_alexnet"], 2)})
for name, share in want.items():
    assert abs(__graded__(fc_param_share, forbid, name, image_size=64) - share) < 1e-12, name
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (3 points)
#
# ResNet-50 is the counter-example of layer separation. Put a number on it: write
# `ddp_over_stanza_per_sample(P, Pc, A, N, b)`, the bytes the whole cluster sends per trained
# sample under DDP divided by those under Stanza with one FC worker, on N nodes with b samples
# per data worker. Per sample, because the two do not train the same batch per step: DDP has N
# data workers (a global batch of b N), Stanza N - 1 CONV workers (b (N - 1)). Use the formulas
# of tutorial T2 and notebook 02: a ring allreduce of S bytes among n ranks makes every member
# send 2 (n - 1) / n S; every sample's activation (4 A bytes) goes to the FC worker and its
# gradient comes back, with its int64 label (8 bytes) on the way out.
#
# Evaluate it with the table's counts for VGG-16 and ResNet-50 at N = 8, b = 32, and for AlexNet
# (P = 61,100,840, P_c = 2,469,696, A = 9,216). How much larger would the AlexNet number be per
# step, and why is a per-step ratio the wrong comparison?

# %% nbgrader={"grade": false, "grade_id": "ddp_over_stanza_per_sample", "locked": false, "schema_version": 3, "solution": true, "task": false}
def ddp_over_stanza_per_sample(P: int, Pc: int, A: int, N: int, b: int) -> float:
    ### BEGIN SOLUTION
    ddp = 2 * (N - 1) * 4 * P  # N members of a ring, each sends 2 (N - 1) / N of 4 P
    G = b * (N - 1)
    stanza = 2 * 4 * A * G + 8 * G + 2 * (N - 2) * 4 * Pc
    return (ddp / (b * N)) / (stanza / G)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ddp_over_stanza_per_sample", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
assert ddp_over_stanza_per_sample(138_357_544, 14_714_688, 25_088, 8, 32) > ddp_over_stanza_per_sample(
    25_557_032, 23_508_032, 2_048, 8, 32)
### BEGIN HIDDEN TESTS
forbid = [perf.expected_bytes, perf.totals, perf.traffic.rank_bytes, perf.traffic.summary_bytes]
sizes = __frozen__([(3, 1), (8, 32)] + [(__term__.randint(3, 64), __term__.choice((1, 2, 4, 8, 16, 32, 64)))
                                         for _ in range(3)])  # this term's (N, b)
cases = [(P, Pc, A, N, b) for (P, Pc, A) in ((138_357_544, 14_714_688, 25_088), (25_557_032, 23_508_032, 2_048),
                                             (61_100_840, 2_469_696, 9_216))
         for N, b in sizes]
want = __frozen__([
    (perf.totals(perf.expected_bytes(perf.ModelCounts(Pc, P - Pc, A), Variant("ddp"), N, global_batch=b * N))["bytes_per_step"]
     / (b * N))
    / (perf.totals(perf.expected_bytes(perf.ModelCounts(Pc, P - Pc, A), Variant("stanza", fc_workers=1), N,
                                       global_batch=b * (N - 1)))["bytes_per_step"] / (b * (N - 1)))
    for (P, Pc, A) in ((138_357_544, 14_714_688, 25_088), (25_557_032, 23_508_032, 2_048), (61_100_840, 2_469_696, 9_216))
    for N, b in sizes])
for case, ratio in zip(cases, want, strict=True):
    assert abs(__graded__(ddp_over_stanza_per_sample, forbid, *case) / ratio - 1) < 1e-6, case
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": true, "grade_id": "why_resnet", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### Why (2 points, graded by hand)
#
# In your own words: why does layer separation gain little on ResNet-50, and much on AlexNet?
# Say which of P, P_c and A decides it.
#
# ### BEGIN SOLUTION
# **Model answer.** Stanza saves the allreduce of the FC head's parameters (P - P_c) and pays for
# the boundary instead (about 8 A + 8 bytes per sample). AlexNet's head holds 96 % of its
# parameters and its boundary is small (A = 9,216), so per sample the cluster sends about 22x
# less. ResNet-50's head is a single 2048 x 1000 layer, 8 % of its parameters: almost all of P
# is in the CONV body, which Stanza still allreduces, so there is little to save (about 1.1x per
# sample at N = 8, b = 32). The saving goes like 1 / (1 - share), not like the share.
#
# **Rubric.** 1 point: the saving is the FC head's allreduce, so it depends on the head's share
# of the parameters (P - P_c against P_c), with ResNet-50's head small. 1 point: the boundary's
# cost (A per sample, times the batch) is named as what Stanza pays instead. No point for
# restating the numbers without a reason.
# ### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 (3 points)
#
# Write `boundary_bytes_per_step(model_name, image_size, b)`: the bytes one CONV worker sends
# across the boundary in one step (fp32 activations and int64 labels) and the bytes it receives
# (fp32 activation gradients), as a pair `(sent, received)`, for b samples. Find A by running the
# CONV body of `split_model(get_model(model_name, 1000), input_shape=..., batch_size=b)` on one
# zero image. Check it by hand for `tiny_cnn` at 16 x 16: what is A there?

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
forbid = [perf.expected_bytes, perf.named_profile, perf.traffic.rank_bytes, perf.totals]
cases = __frozen__([(name, size, __term__.randint(1, 9))  # this term's batch sizes
                    for name, size in (("alexnet", 64), ("cifar_alexnet", 32), ("tiny_cnn", 16))])
want = __frozen__([
    (row["sent"]["activations"] + row["sent"]["labels"], row["recv"]["activation_grads"])
    for row in (perf.expected_bytes(perf.named_profile(name, image_size=size, batch_size=b), Variant("stanza", fc_workers=1), 2,
                                    global_batch=b)[0]
                for name, size, b in cases)])
for case, pair in zip(cases, want, strict=True):
    assert tuple(__graded__(boundary_bytes_per_step, forbid, *case)) == pair, case
### END HIDDEN TESTS
