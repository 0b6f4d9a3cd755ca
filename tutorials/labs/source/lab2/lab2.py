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
# run the test cell below it. The graded tests check your function at several inputs against
# the performance model (`stanza_core.perf`), the topology (`stanza_core.topology`) and autograd;
# more tests run when the lab is graded. Do not change the test cells.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
from fractions import Fraction

import torch
import torch.nn.functional as F

from stanza_core import get_model, perf, profile_model
from stanza_core.topology import make_topology

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 (3 points)
#
# Write `stanza_bytes_per_step(Pc, Pf, A, N, k, G)`: the bytes the whole cluster *sends* per
# Stanza step with N nodes, k FC workers and a global batch of G samples, from the formulas alone
# (fp32 values, int64 labels; a ring allreduce among n ranks makes each member send
# 2 (n - 1) / n of the buffer). The engine rounds each rank's ring share to whole bytes; round
# each member's share the same way. Compare with `perf.totals(perf.expected_bytes(...))` for
# T2's run and for N = 4, k = 2, G = 8.

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
prof = profile_model(get_model("tiny_cnn", 10), (3, 16, 16), batch_size=2)
for N, k, G in ((3, 1, 6), (4, 2, 8), (5, 2, 6), (7, 3, 8), (9, 4, 10)):
    want = perf.totals(perf.expected_bytes(prof, "stanza", N, k, G))["bytes_per_step"]
    assert stanza_bytes_per_step(prof.conv.params, prof.fc.params, prof.boundary_values, N, k, G) == want, (N, k, G)
    counts = perf.ModelCounts(1_000_003, 77_777, 37)
    want = perf.totals(perf.expected_bytes(counts, "stanza", N, k, G))["bytes_per_step"]
    assert stanza_bytes_per_step(1_000_003, 77_777, 37, N, k, G) == want, (N, k, G)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (2 points)
#
# Write `samples_per_fc_worker(N, k, G)`: for each FC rank, how many samples' activations it
# receives per step, as a dict `{fc_rank: samples}`. Use `make_topology("stanza", N, G, k)`
# (its `fc_ranks`, `served_by(j)` and `data_workers`). Rerun tutorial T2 with
# `nodes=4, fc_workers=2, global_batch=8` to see one case.

# %% nbgrader={"grade": false, "grade_id": "samples_per_fc_worker", "locked": false, "schema_version": 3, "solution": true, "task": false}
def samples_per_fc_worker(N: int, k: int, G: int) -> dict[int, int]:
    ### BEGIN SOLUTION
    topo = make_topology("stanza", N, G, k)
    b = G // topo.data_workers
    return {j: b * len(topo.served_by(j)) for j in topo.fc_ranks}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_samples_per_fc_worker", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
assert sum(samples_per_fc_worker(4, 2, 8).values()) == 8
### BEGIN HIDDEN TESTS
for N, k, G in ((4, 2, 8), (5, 2, 6), (7, 3, 8), (8, 3, 20), (3, 1, 6)):
    rows = perf.expected_bytes(perf.ModelCounts(10, 10, 1), "stanza", N, k, G)  # A = 1: bytes / 4 = samples
    assert samples_per_fc_worker(N, k, G) == {r["rank"]: r["recv"]["activations"] // 4
                                              for r in rows if r["role"] == "fc_worker"}, (N, k, G)
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
torch.manual_seed(0)
model = get_model("tiny_cnn", 10).eval()
for G, nc in ((6, 2), (12, 3), (8, 4), (5, 1)):
    x, y = torch.randn(G, 3, 16, 16), torch.randint(10, (G,))
    with torch.no_grad():
        right = sum(F.cross_entropy(model(x[i::nc]), y[i::nc], reduction="sum") / G for i in range(nc))
        wrong = sum(F.cross_entropy(model(x[i::nc]), y[i::nc]) for i in range(nc))
    assert abs(loss_scale_error(G, nc) - float(wrong / right)) < 1e-4 * nc, (G, nc)
### END HIDDEN TESTS
