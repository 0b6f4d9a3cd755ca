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
# # Lab 2 · The bytes of one Stanza step (goes with tutorial T2)
#
# Fill in every cell marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`), then
# run the test cell below it. The tests you see are a first check; more run when the lab is
# graded, at inputs you do not see, against values taken from the engine and the performance
# model when the lab was released. Write each answer yourself: an answer that calls the library
# function that computes the same quantity gets no points. Answer the "why" question in your own
# words: it is graded by hand. Do not change the test cells.
#
# **Expected time for a graduate student: 1.5 hours (three short exercises: 1 h; the question: 0.5 h).**

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
from fractions import Fraction

import torch
import torch.nn.functional as F

from stanza_core import get_model, perf, profile_model
from stanza_core.topology import make_topology
from stanza_core.variant import Variant

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 (3 points)
#
# Write `stanza_bytes_per_step(Pc, Pf, A, N, k, G)`: the bytes the whole cluster *sends* per
# Stanza step with N nodes, k FC workers and a global batch of G samples, from the formulas alone
# (fp32 values, int64 labels; a ring allreduce among n ranks makes each member send
# 2 (n - 1) / n of the buffer). The engine rounds each rank's ring share to whole bytes; round
# each member's share the same way. Check it against the bytes per step that tutorial T2 printed
# for its run (the engine's counters).

# %% nbgrader={"grade": false, "grade_id": "stanza_bytes_per_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def stanza_bytes_per_step(Pc: int, Pf: int, A: int, N: int, k: int, G: int) -> int:
    ### BEGIN SOLUTION
    def ring(nbytes, n):  # what each member of an n-rank ring sends
        return Fraction(2 * (n - 1) * nbytes, n) if n > 1 else Fraction(0)

    nc = N - k
    return 2 * 4 * A * G + 8 * G + nc * round(ring(4 * Pc, nc)) + k * round(ring(4 * Pf, k))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_stanza_bytes_per_step", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
assert stanza_bytes_per_step(100, 50, 8, 3, 1, 6) > stanza_bytes_per_step(100, 50, 8, 3, 1, 2)
### BEGIN HIDDEN TESTS
forbid = [perf.expected_bytes, perf.totals, perf.traffic.rank_bytes, perf.traffic.summary_bytes]
cases = __frozen__([(c.conv_params, c.fc_params, c.boundary_values, N, k, G,
                     perf.totals(perf.expected_bytes(c, Variant("stanza", fc_workers=k), N, global_batch=G))["bytes_per_step"])
                    for c in (perf.ModelCounts.of(profile_model(get_model("tiny_cnn", 10), (3, 16, 16), batch_size=2)),
                              perf.ModelCounts(1_000_003, 77_777, 37))
                    for N, k, G in [(3, 1, 6), (4, 2, 8)] + __term__.sample(
                        [(N, k, (N - k) * m) for N in range(3, 13) for k in range(1, N // 2 + 1) for m in (1, 2, 3)], 4)])
for *args, want in cases:
    assert __graded__(stanza_bytes_per_step, forbid, *args) == want, args
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (2 points)
#
# Write `samples_per_fc_worker(N, k, G)`: for each FC rank, how many samples' activations it
# receives per step, as a dict `{fc_rank: samples}`. Use `make_topology(Variant("stanza", fc_workers=k), N, G)`
# (its `fc_ranks`, `served_by(j)` and `data_workers`). Rerun tutorial T2 with
# `nodes=4, fc_workers=2, global_batch=8` to see one case.

# %% nbgrader={"grade": false, "grade_id": "samples_per_fc_worker", "locked": false, "schema_version": 3, "solution": true, "task": false}
def samples_per_fc_worker(N: int, k: int, G: int) -> dict[int, int]:
    ### BEGIN SOLUTION
    topo = make_topology(Variant("stanza", fc_workers=k), N, G)
    b = G // topo.data_workers
    return {j: b * len(topo.served_by(j)) for j in topo.fc_ranks}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_samples_per_fc_worker", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
assert sum(samples_per_fc_worker(4, 2, 8).values()) == 8
### BEGIN HIDDEN TESTS
forbid = [perf.expected_bytes, perf.traffic.rank_bytes]
cases = __frozen__([((N, k, G), {r["rank"]: r["recv"]["activations"] // 4  # A = 1: bytes / 4 = samples
                                 for r in perf.expected_bytes(perf.ModelCounts(10, 10, 1), Variant("stanza", fc_workers=k), N, global_batch=G)
                                 if r["role"] == "fc_worker"})
                    for N, k, G in [(4, 2, 8), (3, 1, 6), (5, 2, 6)] + __term__.sample(  # (5, 2): served 2 and 1
                        [(N, k, (N - k) * m) for N in range(3, 13) for k in range(1, N // 2 + 1) for m in (1, 2, 4)], 4)])
for args, want in cases:
    assert dict(__graded__(samples_per_fc_worker, forbid, *args)) == want, args
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 (2 points)
#
# Each FC worker divides its loss by G, the *global* batch, not by b. Write
# `loss_scale_error(G, nc)`: by what factor would the summed gradient be off if each of the nc
# slices used the mean over its own b = G / nc samples instead?

# %% nbgrader={"grade": false, "grade_id": "loss_scale_error", "locked": false, "schema_version": 3, "solution": true, "task": false}
def loss_scale_error(G: int, nc: int) -> float:
    ### BEGIN SOLUTION
    b = G // nc
    return G / b
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_loss_scale_error", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
assert loss_scale_error(6, 2) > 1
### BEGIN HIDDEN TESTS
def _ratio(G, nc):  # the summed gradient's loss with per-slice means over the right one
    torch.manual_seed(0)
    model = get_model("tiny_cnn", 10).eval()
    x, y = torch.randn(G, 3, 16, 16), torch.randint(10, (G,))
    with torch.no_grad():
        right = sum(F.cross_entropy(model(x[i::nc]), y[i::nc], reduction="sum") / G for i in range(nc))
        wrong = sum(F.cross_entropy(model(x[i::nc]), y[i::nc]) for i in range(nc))
    return float(wrong / right)


cases = __frozen__([((G, nc), _ratio(G, nc)) for G, nc in [(6, 2), (5, 1)] + [
    (nc * __term__.randint(1, 6), nc) for nc in __term__.sample(range(1, 7), 3)]])
for (G, nc), want in cases:
    assert abs(loss_scale_error(G, nc) - want) < 1e-4 * nc, (G, nc)
### END HIDDEN TESTS
# %% [markdown] nbgrader={"grade": true, "grade_id": "why_global_batch", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### Why (2 points, graded by hand)
#
# Each FC worker sees only the samples of the CONV workers it serves, yet divides its loss by the
# global batch G. Why is that the right divisor, and what would go wrong on a cluster whose CONV
# workers hold different numbers of samples if each used the mean over its own slice?
#
# ### BEGIN SOLUTION
# **Model answer.** The gradients are summed across workers (the allreduce adds them), so the
# sum equals the gradient of one loss over the whole batch only if every sample enters with the
# same weight 1 / G. With a per-slice mean each sample gets 1 / b: the sum is nc times too large
# with equal slices, and with unequal slices samples of small slices weigh more than others, so
# the step is not the single-node step on the same batch (the training changes, not only its
# scale).
#
# **Rubric.** 1 point: the allreduce sums, so each sample must carry the weight 1 / G. 1 point:
# unequal slices give samples unequal weights (a bias), not only a constant factor. No point for
# "because the tutorial does it".
# ### END SOLUTION

