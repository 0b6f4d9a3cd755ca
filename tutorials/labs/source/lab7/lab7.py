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
# # Lab 7 · Deadlocks and stragglers (goes with tutorial T7)
#
# Fill in every cell marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`), then
# run the test cell below it. The tests you see are a first check; more run when the lab is
# graded, at inputs you do not see. Answer the "why" question in your own words: it is graded by
# hand. Do not change the test cells.
#
# **Expected time for a graduate student: 1.5 hours (three short exercises: 1 h; the question: 0.5 h).**

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import itertools

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 (4 points)
#
# A *program* is one list per rank of blocking operations, in order: `("send", peer)` or
# `("recv", peer)`. Under gloo (T3, T7) a send and its matching receive complete together: rank
# a's `("send", b)` can complete only when rank b's *current* operation is `("recv", a)`, and
# then both ranks move on to their next operation. Write `deadlocks(program)`: True if the ranks
# get stuck before every rank has finished its list (no matching pair is left to complete),
# False if all complete. T7's swapped exchange, `[[("send", 1), ("recv", 1)], [("send", 0),
# ("recv", 0)]]`, deadlocks.

# %% nbgrader={"grade": false, "grade_id": "deadlocks", "locked": false, "schema_version": 3, "solution": true, "task": false}
def deadlocks(program: list[list[tuple[str, int]]]) -> bool:
    ### BEGIN SOLUTION
    pos = [0] * len(program)
    while True:
        moved = False
        for a, ops in enumerate(program):
            if pos[a] < len(ops) and ops[pos[a]][0] == "send":
                b = ops[pos[a]][1]
                if pos[b] < len(program[b]) and program[b][pos[b]] == ("recv", a):
                    pos[a] += 1
                    pos[b] += 1
                    moved = True
        if all(p == len(ops) for p, ops in zip(pos, program)):
            return False
        if not moved:
            return True
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_deadlocks", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
assert deadlocks([[("send", 1), ("recv", 1)], [("send", 0), ("recv", 0)]]) is True
### BEGIN HIDDEN TESTS
assert deadlocks([[("send", 1), ("recv", 1)], [("recv", 0), ("send", 0)]]) is False
n = 4  # a ring shift: everyone sends right first -> deadlock; even ranks send first, odd receive first -> fine
assert deadlocks([[("send", (r + 1) % n), ("recv", (r - 1) % n)] for r in range(n)]) is True
assert deadlocks([[("send", (r + 1) % n), ("recv", (r - 1) % n)] if r % 2 == 0 else
                  [("recv", (r - 1) % n), ("send", (r + 1) % n)] for r in range(n)]) is False
# T3's FC worker receives from 0 then 1; the CONV workers send, then receive their gradient
fc = [[("send", 2), ("recv", 2)], [("send", 2), ("recv", 2)], [("recv", 0), ("send", 0), ("recv", 1), ("send", 1)]]
assert deadlocks(fc) is False
fc_wrong = [[("recv", 2), ("send", 2)], [("send", 2), ("recv", 2)], [("recv", 0), ("send", 0), ("recv", 1), ("send", 1)]]
assert deadlocks(fc_wrong) is True
assert deadlocks([[("recv", 1)], []]) is True  # waits for a send that never comes
assert deadlocks([[], []]) is False
# stuck only after earlier rounds complete: every rank's first operation has its match
assert deadlocks([[("send", 1), ("send", 1)], [("recv", 0), ("send", 0)]]) is True
assert deadlocks([[("send", 1), ("recv", 1), ("send", 1)], [("recv", 0), ("send", 0), ("recv", 0)]]) is False
assert deadlocks([[("send", 1), ("recv", 1), ("recv", 1)], [("recv", 0), ("send", 0), ("recv", 0)]]) is True
assert deadlocks([[("send", 1), ("send", 2)], [("recv", 0), ("recv", 2)], [("recv", 1), ("send", 1)]]) is True
assert deadlocks([[("send", 1), ("send", 2)], [("recv", 0), ("send", 2)], [("recv", 1), ("recv", 0)]]) is False
steps = 3  # T3's step repeated: fine every round; the FC worker's order swapped in the last round only
fc_ok = [[("send", 2), ("recv", 2)] * steps, [("send", 2), ("recv", 2)] * steps,
         [("recv", 0), ("send", 0), ("recv", 1), ("send", 1)] * steps]
assert deadlocks(fc_ok) is False
fc_late = [fc_ok[0], fc_ok[1], fc_ok[2][:-4] + [("recv", 1), ("send", 0), ("recv", 0), ("send", 1)]]
assert deadlocks(fc_late) is True
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (2 points)
#
# In a BSP step every rank computes, then joins an allreduce that can finish only when the last
# rank has joined; the allreduce itself then takes `allreduce_s`. Write `bsp_waits(compute_s,
# allreduce_s)`: given each rank's compute time (seconds), return each rank's time inside the
# allreduce (its wait for the slowest rank plus `allreduce_s`). T7 measured
# `compute_s = [0.05, 0.05, 0.25]`: what do ranks 0 and 1 wait?

# %% nbgrader={"grade": false, "grade_id": "bsp_waits", "locked": false, "schema_version": 3, "solution": true, "task": false}
def bsp_waits(compute_s: list[float], allreduce_s: float) -> list[float]:
    ### BEGIN SOLUTION
    slowest = max(compute_s)
    return [slowest - c + allreduce_s for c in compute_s]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_bsp_waits", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
assert all(abs(w - e) < 1e-12 for w, e in zip(bsp_waits([1.0, 1.0], 0.0), [0.0, 0.0]))
### BEGIN HIDDEN TESTS
for cs, ar, want in (([0.05, 0.05, 0.25], 0.002, [0.202, 0.202, 0.002]), ([3.0, 1.0, 2.0, 0.5], 0.1, [0.1, 2.1, 1.1, 2.6]),
                     ([0.7], 0.3, [0.3])):
    got = bsp_waits(cs, ar)
    assert len(got) == len(want) and all(abs(g - w) < 1e-12 for g, w in zip(got, want)), (cs, got)
# this term's cases (drawn from the course's secret when the lab is released)
cases = __frozen__([([round(__term__.uniform(0.01, 3.0), 4) for _ in range(__term__.randint(1, 9))],
                     round(__term__.uniform(0.0, 0.5), 4)) for _ in range(4)])
want = __frozen__([[max(cs) - c + ar for c in cs] for cs, ar in cases])
for (cs, ar), w in zip(cases, want, strict=True):
    got = bsp_waits(cs, ar)
    assert len(got) == len(w) and all(abs(g - x) < 1e-12 for g, x in zip(got, w)), (cs, got)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 (2 points)
#
# Write `straggler_loss(compute_s)`: the share of the cluster's rank-seconds spent waiting for
# the slowest rank in one BSP step (leave the allreduce itself out): the ranks' summed waits over
# n x the slowest compute time. One straggler delayed by d among n ranks with compute c: what
# does the share tend to as d grows? Check it with T7's `results.json` (`straggler`).

# %% nbgrader={"grade": false, "grade_id": "straggler_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def straggler_loss(compute_s: list[float]) -> float:
    ### BEGIN SOLUTION
    slowest = max(compute_s)
    return sum(slowest - c for c in compute_s) / (len(compute_s) * slowest) if slowest > 0 else 0.0
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_straggler_loss", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
assert straggler_loss([1.0, 1.0, 1.0]) == 0.0
### BEGIN HIDDEN TESTS
assert abs(straggler_loss([0.05, 0.05, 0.25]) - 0.4 / 0.75) < 1e-12
assert abs(straggler_loss([1.0, 3.0]) - 2.0 / 6.0) < 1e-12
for n, c, d in itertools.product((2, 4, 16), (0.1, 1.0), (0.0, 1.0, 100.0)):
    want = (n - 1) * d / (n * (c + d))
    assert abs(straggler_loss([c] * (n - 1) + [c + d]) - want) < 1e-12, (n, c, d)
cases = __frozen__([[round(__term__.uniform(0.0, 5.0), 4) for _ in range(__term__.randint(2, 12))] for _ in range(4)])
want = __frozen__([sum(max(cs) - c for c in cs) / (len(cs) * max(cs)) for cs in cases])
for cs, w in zip(cases, want, strict=True):
    assert abs(straggler_loss(cs) - w) < 1e-12, cs
### END HIDDEN TESTS
# %% [markdown] nbgrader={"grade": true, "grade_id": "why_deadlock_fix", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### Why (2 points, graded by hand)
#
# T7's swapped exchange deadlocks: both ranks send first. Give two ways to fix it, one that
# changes the order of the operations and one that keeps it, and say for each why the ranks can
# no longer both wait. Why does a check of each rank's first operation not find every deadlock?
#
# ### BEGIN SOLUTION
# **Model answer.** (1) Order: one rank sends then receives, the other receives then sends
# (even/odd ranks in a ring), so each blocking send meets a posted receive. (2) Non-blocking:
# `dist.isend` / `dist.irecv` post both operations and `wait()` on them; neither call blocks, so
# both receives are posted and both sends can complete. A first-operation check misses deadlocks
# that appear only after earlier pairs completed: `[[send 1, send 1], [recv 0, send 0]]` matches
# its first pair, then both ranks send; a detector must replay the program round by round.
#
# **Rubric.** 1 point: two correct fixes (ordering; isend/irecv or a batched exchange), each with
# why neither rank blocks. 1 point: deadlocks that arise after some rounds, with an example or the
# need to simulate to the end.
# ### END SOLUTION

