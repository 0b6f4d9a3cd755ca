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
# run the test cell below it. The tests you see are a first check; more run when the lab is
# graded, at inputs you do not see, against values taken from the performance model when the
# lab was released. Write each answer yourself: an answer that calls the library function that
# computes the same quantity gets no points. Answer the "why" question in your own words: it is
# graded by hand. Do not change the test cells.
#
# VGG-16's counts (224 x 224): P = 138,357,544 parameters, P_c = 14,714,688 of them in the CONV
# body, A = 25,088 boundary values per sample.
#
# **Expected time for a graduate student: 2 hours (three exercises with the performance model: 1.5 h; the question: 0.5 h).**

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
from stanza_core import perf
from stanza_core.variant import Variant

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
cases = __frozen__([((nbytes, n, perf.Cluster(n, gbps, lat).ring_allreduce_s(nbytes, n), lat), gbps)
                    for nbytes, n, gbps, lat in ((553e6, 16, 37.5, 5e-5), (58.9e6, 2, 10.0, 0.0), (1e9, 64, 100.0, 1e-4),
                                                 (4e6, 8, 2.5, 2e-5), (7.7e7, 3, 0.8, 1e-3),
                                                 (__term__.choice((4e6, 58.9e6, 2.5e8, 5.53e8)), __term__.randint(2, 64),
                                                  __term__.choice((1.0, 10.0, 25.0, 100.0)),  # this term's case
                                                  __term__.choice((0.0, 1e-5, 5e-5))))])
for args, gbps in cases:
    assert abs(bandwidth_for_allreduce(*args) / gbps - 1) < 1e-9, args
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (3 points)
#
# Write `best_stanza_k(profile, cluster, batch_per_worker)`: the number of FC workers k of the
# fastest Stanza configuration, looping over
# `perf.predict(profile, cluster, Variant("stanza", fc_workers=k), batch_per_worker=..., with_ranks=False)` for
# k = 1 .. N // 2 (on a tie, the smaller k). Which k is best for VGG-16 on 16 nodes at 10 Gb/s,
# and at 100 Gb/s?

# %% nbgrader={"grade": false, "grade_id": "best_stanza_k", "locked": false, "schema_version": 3, "solution": true, "task": false}
def best_stanza_k(profile, cluster, batch_per_worker: int = 32) -> int:
    ### BEGIN SOLUTION
    best = None
    for k in range(1, cluster.nodes // 2 + 1):
        p = perf.predict(profile, cluster, Variant("stanza", fc_workers=k), batch_per_worker=batch_per_worker, with_ranks=False)
        if best is None or p.throughput > best.throughput * (1 + 1e-12):
            best = p
    return best.fc_workers
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_best_stanza_k", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
assert 1 <= best_stanza_k(perf.named_profile("vgg16", image_size=32), perf.Cluster(8, 10.0)) <= 4
### BEGIN HIDDEN TESTS
forbid = [perf.best_assignment, perf.Assignment.best_stanza]
specs = __frozen__((("vgg16", 32, 16, 10.0, 32), ("alexnet", 64, 8, 1.0, 32), ("vgg16", 32, 32, 100.0, 32),
                    ("alexnet", 64, 12, 40.0, 8), ("vgg16", 32, 24, 1.0, 4),
                    __term__.choice((("vgg16", 32), ("alexnet", 64)))  # this term's cluster
                    + (__term__.randint(4, 32), __term__.choice((1.0, 10.0, 40.0, 100.0)), __term__.choice((4, 8, 32)))))
want = __frozen__([perf.best_assignment(perf.named_profile(m, image_size=s), perf.Cluster(n, g, device="v100"),
                                        batch_per_worker=b).best_stanza().fc_workers
                   for m, s, n, g, b in specs])
for (model, size, nodes, gbps, b), k in zip(specs, want, strict=True):
    prof, cluster = perf.named_profile(model, image_size=size), perf.Cluster(nodes, gbps, device="v100")
    assert __graded__(best_stanza_k, forbid, prof, cluster, b) == k, (model, nodes, gbps)
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
forbid = [perf.expected_bytes, perf.totals, perf.traffic.rank_bytes]
N = 1024  # the model's ratio is within 1 / (N - 1) of the limit
cases = __frozen__([((P, Pc, A, b), perf.totals(perf.expected_bytes(perf.ModelCounts(Pc, P - Pc, A), Variant("ps"), 1024,
                                                                     global_batch=b * 1024))["bytes_per_step"]
                     / perf.totals(perf.expected_bytes(perf.ModelCounts(Pc, P - Pc, A), Variant("stanza", fc_workers=1), 1024,
                                                       global_batch=b * 1023))["bytes_per_step"])
                    for P, Pc, A in ((138_357_544, 14_714_688, 25_088), (25_557_032, 23_508_032, 2_048),
                                     (61_100_840, 2_469_696, 9_216))
                    for b in (1, 32, 128, __term__.randint(2, 256))])  # and this term's batch
for args, ratio in cases:
    assert abs(__graded__(ps_over_stanza_limit, forbid, *args) / ratio - 1) < 2e-3, args
### END HIDDEN TESTS
# %% [markdown] nbgrader={"grade": true, "grade_id": "why_limit", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### Why (2 points, graded by hand)
#
# Is your limit a ceiling on Stanza's saving over the parameter server, or a floor that the
# ratio approaches as N grows? Answer with the numbers for VGG-16 at b = 32 (the ratio at N = 4,
# 8, 16 and the limit), and say when P / P_c is a good answer.
#
# ### BEGIN SOLUTION
# **Model answer.** A floor: at N nodes Stanza's CONV allreduce moves 2 (N - 2) 4 P_c against the
# parameter server's 2 (N - 1) 4 P, and the boundary grows like N - 1, so the ratio falls towards
# P / (P_c + b (A + 1)) from above as N grows (VGG-16, b = 32: about 13.0 at N = 4, 10.3 at N = 8,
# 9.5 at N = 16, limit 8.92). P / P_c is a good answer only when b (A + 1) << P_c: small batches
# or a small boundary (VGG-16 at b = 1: 9.39 against P / P_c = 9.40; at b = 32 the boundary
# carries 800,000 values per worker against P_c = 14.7 M, and the limit drops to 8.92).
#
# **Rubric.** 1 point: a floor approached from above as N grows, with the numbers. 1 point: P / P_c
# holds when the boundary term b (A + 1) is small next to P_c, with why.
# ### END SOLUTION

