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
# # Lab 5 · The performance model by hand (goes with tutorial T5)
#
# Fill in every cell marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`), then
# run the test cell below it. The graded tests check your function at several inputs against
# `stanza_core.perf` (its `Cluster`, `predict`, `best_assignment` and `expected_bytes`). Do not
# change the test cells.
#
# VGG-16's counts (224 x 224): P = 138,357,544 parameters, P_c = 14,714,688 of them in the CONV
# body, A = 25,088 boundary values per sample.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
from stanza_core import perf

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 (3 points)
#
# T5 computed how long a ring allreduce takes on a given link. Turn the question around: write
# `bandwidth_for_allreduce(nbytes, n, seconds, latency_s)`, the link bandwidth in Gb/s at which
# a ring allreduce of `nbytes` among n ranks takes exactly `seconds` under the model
# (`perf.Cluster(n, gbps, latency_s).ring_allreduce_s`). How fast must the links of 16 nodes be
# to allreduce VGG-16's gradient (4 P bytes) in 0.1 s with 50 µs of latency?

# %% nbgrader={"grade": false, "grade_id": "bandwidth_for_allreduce", "locked": false, "schema_version": 3, "solution": true, "task": false}
def bandwidth_for_allreduce(nbytes: float, n: int, seconds: float, latency_s: float) -> float:
    ### BEGIN SOLUTION
    moved = 2 * (n - 1) / n * nbytes  # bytes each link carries
    transfer_s = seconds - 2 * (n - 1) * latency_s
    return moved / transfer_s * 8 / 1e9
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_bandwidth_for_allreduce", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
assert bandwidth_for_allreduce(553e6, 16, 0.1, 5e-5) > 0
### BEGIN HIDDEN TESTS
for nbytes, n, seconds, lat in ((553e6, 16, 0.1, 5e-5), (58.9e6, 2, 0.05, 0.0), (1e9, 64, 2.0, 1e-4),
                                (4e6, 8, 0.01, 2e-5)):
    gbps = bandwidth_for_allreduce(nbytes, n, seconds, lat)
    assert abs(perf.Cluster(n, gbps, lat).ring_allreduce_s(nbytes, n) / seconds - 1) < 1e-9, (nbytes, n)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (3 points)
#
# Write `best_stanza_k(profile, cluster, batch_per_worker)`: the number of FC workers k of the
# fastest Stanza configuration, looping over
# `perf.predict(profile, cluster, "stanza", k, batch_per_worker=..., with_ranks=False)` for
# k = 1 .. N // 2 (on a tie, the smaller k). Check it against
# `perf.best_assignment(...).best_stanza()`.

# %% nbgrader={"grade": false, "grade_id": "best_stanza_k", "locked": false, "schema_version": 3, "solution": true, "task": false}
def best_stanza_k(profile, cluster, batch_per_worker: int = 32) -> int:
    ### BEGIN SOLUTION
    best = None
    for k in range(1, cluster.nodes // 2 + 1):
        p = perf.predict(profile, cluster, "stanza", k, batch_per_worker=batch_per_worker, with_ranks=False)
        if best is None or p.throughput > best.throughput * (1 + 1e-12):
            best = p
    return best.fc_workers
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_best_stanza_k", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
assert 1 <= best_stanza_k(perf.named_profile("vgg16", image_size=32), perf.Cluster(8, 10.0)) <= 4
### BEGIN HIDDEN TESTS
for model, size, nodes, gbps, b in (("vgg16", 32, 16, 10.0, 32), ("alexnet", 64, 8, 1.0, 32),
                                    ("vgg16", 32, 32, 100.0, 32), ("alexnet", 64, 12, 40.0, 8)):
    prof, cluster = perf.named_profile(model, image_size=size), perf.Cluster(nodes, gbps, device="v100")
    want = perf.best_assignment(prof, cluster, batch_per_worker=b).best_stanza().fc_workers
    assert best_stanza_k(prof, cluster, b) == want, (model, nodes, gbps)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 (3 points)
#
# As N grows with b samples per data worker fixed, the bytes per step of the parameter server
# over those of Stanza with k = 1 tend to a limit. Write `ps_over_stanza_limit(P, Pc, A, b)`
# for that limit. Hint: per step ps moves 2 (N - 1) 4P in all; Stanza moves
# (N - 1) b (8 A + 8) across the boundary plus 2 (N - 2) 4 P_c in its CONV allreduce. Compare
# with `P / Pc` for VGG-16 at b = 1 and at b = 32: when is P / P_c a good answer?

# %% nbgrader={"grade": false, "grade_id": "ps_over_stanza_limit", "locked": false, "schema_version": 3, "solution": true, "task": false}
def ps_over_stanza_limit(P: int, Pc: int, A: int, b: int) -> float:
    ### BEGIN SOLUTION
    return P / (Pc + b * (A + 1))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ps_over_stanza_limit", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
assert ps_over_stanza_limit(138_357_544, 14_714_688, 25_088, 1) > 1
### BEGIN HIDDEN TESTS
N = 1024  # the model's ratio is within 1 / (N - 1) of the limit
for P, Pc, A in ((138_357_544, 14_714_688, 25_088), (25_557_032, 23_508_032, 2_048), (61_100_840, 2_469_696, 9_216)):
    for b in (1, 32, 128):
        counts = perf.ModelCounts(Pc, P - Pc, A)
        ps = perf.totals(perf.expected_bytes(counts, "ps", N, global_batch=b * N))["bytes_per_step"]
        stanza = perf.totals(perf.expected_bytes(counts, "stanza", N, 1, global_batch=b * (N - 1)))["bytes_per_step"]
        assert abs(ps_over_stanza_limit(P, Pc, A, b) / (ps / stanza) - 1) < 2e-3, (P, b)
### END HIDDEN TESTS
