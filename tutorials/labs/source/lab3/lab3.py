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
# # Lab 3 · The step in plain `torch.distributed` (goes with tutorial T3)
#
# Fill in every cell marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`), then
# run the test cell below it. The answers come from reading `tutorials/t3_stanza_step.py`. The
# tests you see are a first check; more run when the lab is graded, at inputs you do not see,
# against values taken from the engine when the lab was released. Write each answer yourself: an
# answer that calls the library function that computes the same quantity gets no points. Answer
# the "why" question in your own words: it is graded by hand. Do not change the test cells.
#
# **Expected time for a graduate student: 1.5 hours (three short exercises: 1 h; the question: 0.5 h).**

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
from stanza_core import perf
from stanza_core.topology import make_topology
from stanza_core.variant import Variant

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 (3 points)
#
# Count the point-to-point messages of one step of `t3_stanza_step.py`. Write
# `messages_per_step(N, k)`: a dict `{rank: (sends, receives)}` with, for every rank of an
# N-process job with k FC workers, how many `dist.send` and how many `dist.recv` calls it makes
# per step (collectives such as `all_reduce` do not count). Every send must have its receive:
# check that the totals agree.

# %% nbgrader={"grade": false, "grade_id": "messages_per_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def messages_per_step(N: int, k: int) -> dict[int, tuple[int, int]]:
    ### BEGIN SOLUTION
    nc = N - k
    out = {i: (2, 1) for i in range(nc)}  # activations and labels out, their gradient back
    for j in range(nc, N):
        served = len(range(j - nc, nc, k))
        out[j] = (served, 2 * served)
    return out
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_messages_per_step", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
m = messages_per_step(3, 1)
assert sorted(m) == [0, 1, 2]
assert sum(s for s, _ in m.values()) == sum(r for _, r in m.values())
### BEGIN HIDDEN TESTS
cases = __frozen__([((N, k), {**{i: (2, 1) for i in t.conv_ranks},
                              **{j: (len(t.served_by(j)), 2 * len(t.served_by(j))) for j in t.fc_ranks}})
                    for N, k in [(3, 1), (4, 2), (9, 4)] + __term__.sample(  # and this term's
                        [(N, k) for N in range(3, 16) for k in range(1, N // 2 + 1)], 4)
                    for t in (make_topology(Variant("stanza", fc_workers=k), N, 6 * (N - k)),)])
for args, want in cases:
    assert {r: tuple(v) for r, v in messages_per_step(*args).items()} == want, args
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (2 points)
#
# The script sends the labels as a message of their own. Write `label_bytes_per_step(G)`: how
# many bytes all labels of one step cost the whole cluster, for a global batch of G samples
# (does it depend on N or k?).

# %% nbgrader={"grade": false, "grade_id": "label_bytes_per_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def label_bytes_per_step(G: int) -> int:
    ### BEGIN SOLUTION
    return 8 * G  # one int64 per sample, CONV worker -> FC worker, once
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_label_bytes_per_step", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
assert label_bytes_per_step(6) > 0
### BEGIN HIDDEN TESTS
forbid = [perf.expected_bytes, perf.traffic.rank_bytes, perf.totals]
cases = __frozen__([(G, sum(r["sent"].get("labels", 0) for r in perf.expected_bytes(
                     perf.ModelCounts(10, 10, 256), Variant("stanza", fc_workers=k), N, global_batch=G)))
                    for N, k, G in [(3, 1, 6), (9, 2, 7)] + [(N, k, (N - k) * __term__.randint(1, 10)) for N, k in
                                                             __term__.sample([(N, k) for N in range(3, 16)
                                                                              for k in range(1, N // 2 + 1)], 3)]])
for G, want in cases:
    assert __graded__(label_bytes_per_step, forbid, G) == want, G
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 (2 points)
#
# Write `label_share_of_boundary(A)`: the fraction of the bytes that cross the boundary in a
# step (activations out, their gradients back, labels out) that are labels, for a model whose
# boundary carries A fp32 values per sample. What is it for the tiny CNN (A = 256)? For VGG-16
# (A = 25,088)?

# %% nbgrader={"grade": false, "grade_id": "label_share_of_boundary", "locked": false, "schema_version": 3, "solution": true, "task": false}
def label_share_of_boundary(A: int) -> float:
    ### BEGIN SOLUTION
    return 8 / (2 * 4 * A + 8)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_label_share_of_boundary", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
assert 0 < label_share_of_boundary(256) < 1
### BEGIN HIDDEN TESTS
forbid = [perf.expected_bytes, perf.traffic.rank_bytes, perf.totals]
cases = __frozen__([(A, sum(r["sent"].get("labels", 0) for r in rows)
                     / sum(r["sent"].get(c, 0) for r in rows for c in ("activations", "activation_grads", "labels")))
                    for A, (N, k, G) in [(256, (3, 1, 6)), (1, (4, 1, 3))] + [  # and this term's A
                        (__term__.randint(2, 60_000), NkG) for NkG in ((5, 2, 9), (9, 3, 12))]
                    for rows in (perf.expected_bytes(perf.ModelCounts(10, 10, A), Variant("stanza", fc_workers=k), N, global_batch=G),)])
for A, want in cases:
    assert abs(__graded__(label_share_of_boundary, forbid, A) - want) < 1e-12, A
### END HIDDEN TESTS
# %% [markdown] nbgrader={"grade": true, "grade_id": "why_send_order", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### Why (2 points, graded by hand)
#
# In `t3_stanza_step.py` every CONV worker sends its activations and its labels, then waits for
# the activation gradient, while its FC worker receives from the CONV workers it serves one after
# the other. Why does a CONV worker that the FC worker serves last wait longer than the first,
# and why can the order of the FC worker's receives not be changed on one rank alone?
#
# ### BEGIN SOLUTION
# **Model answer.** gloo's send completes only when the peer posts the matching receive, and the
# FC worker handles one CONV worker at a time (receive, forward, backward, send the gradient
# back) before it receives from the next: the last one served waits for all the earlier chunks'
# FC compute. The order is a protocol between two ranks: if the FC worker receives from rank 1
# while rank 1 first waits for its gradient, or the CONV side is changed without the FC side,
# the matching pairs no longer meet and the step deadlocks (lab 7).
#
# **Rubric.** 1 point: blocking send/receive pairs and the FC worker serving in turn explain the
# wait. 1 point: a change of order must be made on both ends of each pair, or the ranks deadlock.
# ### END SOLUTION

