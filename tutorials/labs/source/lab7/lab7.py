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
# run the test cell below it. The graded tests check your functions at inputs you do not see.
# Do not change the test cells.

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
### END HIDDEN TESTS
