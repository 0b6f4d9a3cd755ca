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
# # Lab 11 · Deadlocks fixed with isend and irecv; a real pipeline and a parameter server (goes with tutorials T3 and T7)
#
# Under gloo a blocking `dist.send` returns only once the receiver has posted the matching
# receive (T3, T7). Programs that look symmetric and harmless therefore hang: every rank sends,
# and nobody receives. Here you get three such programs, see them hang, and fix them with the
# non-blocking `dist.isend` / `dist.irecv`: each returns a handle at once, the transfer proceeds
# in the background, and `handle.wait()` blocks until it is done (the tensor you sent must not
# change, and the one you receive into must not be read, before that).
#
# Your functions run for real: on 2 to 4 processes on this machine, joined by gloo over
# 127.0.0.1. The test cells start them with `gradekit.run_lab`; every run has a time budget of a
# few seconds, and a run that does not finish in time is ended with a message naming the
# operation each rank is blocked in. The graded tests run more ranks and more data than you see,
# and check every value and every byte moved.
#
# Exercises 1-3 are exchanges that hang; exercises 4 and 5 train: GPipe, with its backward and
# its micro-batches, its bubble measured; a sharded parameter server whose push overlaps the
# backward; each exact against one process.
#
# **Expected time for a graduate student: 5.5 hours** (exercises 1-3: 1.5 h; exercise 4: 2 h;
# exercise 5: 1.5 h; the questions: 0.5 h).
#
# Fill in every region marked `YOUR CODE HERE` (delete the `raise NotImplementedError()`), then
# run the test cells below it. Do not change the test cells.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

import stanza_core  # the students' repository (your lecturer's clone), installed with `pip install -e .`: its tutorials/ runs your ranks
sys.path.append(str(Path(stanza_core.__file__).resolve().parents[1]))
sys.path.append(str(Path.cwd().parent))  # or the student bundle's tutorials/, beside the lab folders
from tutorials import gradekit  # noqa: E402

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 (3 points): a ring shift
#
# Every rank r holds a tensor `x` and must pass it to its right neighbour, rank (r + 1) mod N,
# while receiving its left neighbour's, rank (r - 1) mod N. The obvious program hangs on any
# number of ranks (try it: `gradekit.run_ranks` a copy of it on 2 ranks with `budget_s=3`):
#
# ```python
# def ring_shift_blocking(x, rank, world_size):
#     got = torch.empty_like(x)
#     dist.send(x, (rank + 1) % world_size)     # every rank waits here for a receive...
#     dist.recv(got, (rank - 1) % world_size)   # ...that no rank reaches
#     return got
# ```
#
# Write `ring_shift(x, rank, world_size)` with `dist.isend` / `dist.irecv`: it returns the left
# neighbour's tensor and moves exactly one tensor each way per rank.

# %% nbgrader={"grade": false, "grade_id": "ring_shift", "locked": false, "schema_version": 3, "solution": true, "task": false}
def ring_shift(x, rank, world_size):
    ### BEGIN SOLUTION
    got = torch.empty_like(x)
    handles = [dist.isend(x, (rank + 1) % world_size), dist.irecv(got, (rank - 1) % world_size)]
    for h in handles:
        h.wait()
    return got
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ring_shift", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# your ring_shift(x, rank, world_size) on 2 ranks
ranks = gradekit.run_lab("lab11", "try_ring", ring_shift=ring_shift)
for r in ranks:
    print(f"rank {r.rank} received {r.value.tolist()}")
assert ranks[0].value[0] == 100 and ranks[1].value[0] == 0  # the try case: rank r's tensor starts at 100 r
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab11", "ring_shift", ring_shift=ring_shift)
assert len(verdict) == 3
for check, outcome in verdict.items():
    assert outcome == "ok", f"{check}: {outcome}"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 (3 points): everyone to everyone
#
# Every rank holds a list `chunks` of `world_size` tensors: `chunks[p]` is meant for rank p
# (`chunks[rank]` stays where it is). This pattern, every rank sending a different piece to
# every other rank, is a sharded parameter server's push, and a mixture-of-experts layer's
# dispatch. The obvious program hangs as soon as there are two ranks:
#
# ```python
# def exchange_all_blocking(chunks, rank, world_size):
#     got = [torch.empty_like(c) for c in chunks]
#     got[rank] = chunks[rank]
#     for p in range(world_size):
#         if p != rank:
#             dist.send(chunks[p], p)
#     for p in range(world_size):
#         if p != rank:
#             dist.recv(got[p], p)
#     return got
# ```
#
# Write `exchange_all(chunks, rank, world_size)` that finishes: it returns a list whose entry p
# is the chunk rank p held for this rank (entry `rank`: its own chunk), and sends and receives
# each chunk exactly once.

# %% nbgrader={"grade": false, "grade_id": "exchange_all", "locked": false, "schema_version": 3, "solution": true, "task": false}
def exchange_all(chunks, rank, world_size):
    ### BEGIN SOLUTION
    got = [torch.empty_like(c) for c in chunks]
    got[rank] = chunks[rank]
    peers = [p for p in range(world_size) if p != rank]
    handles = [dist.irecv(got[p], p) for p in peers] + [dist.isend(chunks[p], p) for p in peers]
    for h in handles:
        h.wait()
    return got
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_exchange_all", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# your exchange_all(chunks, rank, world_size) on 3 ranks
ranks = gradekit.run_lab("lab11", "try_all", exchange_all=exchange_all)
for r in ranks:
    print(f"rank {r.rank} holds", [int(t[0]) for t in r.value])
assert [[int(t[0]) for t in r.value] for r in ranks] == [[0, 100, 200], [10, 110, 210], [20, 120, 220]]
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab11", "exchange_all", exchange_all=exchange_all)
assert len(verdict) == 2
for check, outcome in verdict.items():
    assert outcome == "ok", f"{check}: {outcome}"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 (4 points): a pipeline that hangs on its second round
#
# Rank 0 holds M micro-batches (a list of tensors). Each goes through stages 1 .. N-1, one stage
# per rank (stage s computes `work(h, s)` and passes the result on), and the last stage sends the
# result back to rank 0, which returns the M outputs in micro-batch order. The other ranks get a
# list of M zero tensors of the same shape (buffers to receive into) and return nothing.
#
# ```python
# def run_pipeline_blocking(rank, world_size, micro_batches, work):
#     last = world_size - 1
#     if rank == 0:
#         for x in micro_batches:
#             dist.send(x, 1)
#         outputs = [torch.empty_like(x) for x in micro_batches]
#         for out in outputs:
#             dist.recv(out, last)
#         return outputs
#     for h in micro_batches:
#         dist.recv(h, rank - 1)
#         dist.send(work(h, rank), rank + 1 if rank < last else 0)
# ```
#
# The first micro-batch goes through. Then, on 2 ranks, rank 0 sends micro-batch 1 while rank 1
# sends output 0 back: both wait for a receive. On 3 ranks it passes with 2 micro-batches and
# hangs with 3. Write `run_pipeline(rank, world_size, micro_batches, work)`, the same
# computation, that finishes for any number of ranks and micro-batches, moves each micro-batch
# and each output exactly once, and keeps the pipeline a pipeline: rank 0 must put micro-batch 1
# on the wire before output 0 has come back (the tests read the times of rank 0's operations:
# sending micro-batch m and waiting for output m before sending m + 1 never hangs, but it runs
# one micro-batch at a time, and no stage ever works while another does).

# %% nbgrader={"grade": false, "grade_id": "run_pipeline", "locked": false, "schema_version": 3, "solution": true, "task": false}
def run_pipeline(rank, world_size, micro_batches, work):
    ### BEGIN SOLUTION
    last = world_size - 1
    if rank == 0:  # post every receive first, then every send: nothing rank 0 does can block the others
        outputs = [torch.empty_like(x) for x in micro_batches]
        handles = [dist.irecv(out, last) for out in outputs] + [dist.isend(x, 1) for x in micro_batches]
        for h in handles:
            h.wait()
        return outputs
    for h in micro_batches:
        dist.recv(h, rank - 1)
        dist.send(work(h, rank), rank + 1 if rank < last else 0)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_run_pipeline", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# your run_pipeline(rank, world_size, micro_batches, work) on 2 ranks, 3 micro-batches
ranks = gradekit.run_lab("lab11", "try_pipeline", run_pipeline=run_pipeline)
print("rank 0's outputs:", [out.tolist() for out in ranks[0].value])
print("rank 0's operations:", [f"{c['op']}({c['peer']})" for c in ranks[0].calls])
assert [out[0].item() for out in ranks[0].value] == [1.0, 21.0, 41.0]  # 2 x micro-batch + 1 (stage 1)
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab11", "run_pipeline", run_pipeline=run_pipeline)
assert len(verdict) == 4
for check, outcome in verdict.items():
    assert outcome == "ok", f"{check}: {outcome}"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 4 (6 points): a real pipeline, GPipe, with its backward
#
# Exercise 3's stages only passed tensors along. Now the stages are a model: an MLP cut into
# S = N stages, rank s holding stage s (`stage`, an `nn.Module`; stage 0 takes the inputs, the
# last stage returns the logits). The global batch of G = M x b samples is cut into M
# micro-batches of b. Write `gpipe_step(stage, rank, world_size, plan)`, one training step's
# forward and backward, GPipe's schedule:
#
# 1. **Forward, every micro-batch in turn.** Stage 0 takes `plan.inputs[m]`; a later stage
#    receives the micro-batch's activations from rank - 1 (`plan.micro_batch` rows of
#    `plan.in_shape`) and makes them require a gradient. Run `out = stage(h)`, send `out` (detached)
#    to rank + 1 unless this is the last stage, and keep `h` and `out` for the backward.
# 2. **Backward, every micro-batch** (GPipe runs them last micro-batch first). The last stage's
#    loss for micro-batch m is `F.cross_entropy(out, plan.targets[m], reduction="sum") /
#    plan.global_batch` (the micro-batches' losses add up to the mean over G); the other stages
#    receive the gradient of their `out` from rank + 1 and call `out.backward(grad)`. Every stage
#    but the first sends `h.grad` back to rank - 1.
#
# Leave the gradients in the parameters' `.grad` (they add up over the micro-batches); the test
# takes the SGD step, three steps in all. The graded tests compare the parameters after three
# steps with the same steps of the whole model on the whole batches in one process (1e-6), count
# the bytes each rank moved (each activation and each gradient crosses once), and read the
# stages' timelines: each forward and backward of one micro-batch takes 20 ms (the stage sleeps,
# standing in for a larger layer), and the bubble fraction, the share of the S stages' time
# spent idle, must be GPipe's (S - 1) / (M + S - 1), both for the order your stages ran their
# work in (replayed with equal times) and, nearer it than to one micro-batch at a time's
# 1 - 1/S, on the clocks. 1F1B (one forward, one backward, after S - s - 1 warm-up forwards) has
# the same bubble with less memory: it is accepted too.

# %% nbgrader={"grade": false, "grade_id": "gpipe_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def gpipe_step(stage, rank, world_size, plan):
    ### BEGIN SOLUTION
    first, last = rank == 0, rank == world_size - 1
    inputs, outputs, pending = [], [], []
    for m in range(plan.micro_batches):
        if first:
            h = plan.inputs[m]
        else:
            h = torch.empty(plan.micro_batch, *plan.in_shape)
            dist.recv(h, rank - 1)
            h.requires_grad_(True)
        out = stage(h)
        if not last:
            pending.append(dist.isend(out.detach(), rank + 1))
        inputs.append(h)
        outputs.append(out)
    for m in reversed(range(plan.micro_batches)):
        if last:
            (F.cross_entropy(outputs[m], plan.targets[m], reduction="sum") / plan.global_batch).backward()
        else:
            grad = torch.empty_like(outputs[m])
            dist.recv(grad, rank + 1)
            outputs[m].backward(grad)
        if not first:
            pending.append(dist.isend(inputs[m].grad, rank - 1))
    for handle in pending:  # a sent tensor must stay alive until its transfer is done
        handle.wait()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_gpipe_step", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
# your gpipe_step on 2 stages, 3 micro-batches of 2 samples, three steps
ranks = gradekit.run_lab("lab11", "try_gpipe", gpipe_step=gpipe_step)
want = gradekit.one_process("lab11", "try_gpipe")  # the same steps on the whole batches, one process
print("parameters against one process:", gradekit.compare(ranks[0].value["params"], want[0], 1e-6) or "equal")
assert all(gradekit.compare(r.value["params"], want[r.rank], 1e-6) is None for r in ranks)
t_start = min(e[2] for r in ranks for e in r.value["timeline"])
for r in ranks:  # the last step: ["F" or "B", micro-batch, start, end]
    print(f"stage {r.rank}:", " ".join(f"{k}{m} {1e3 * (t0 - t_start):.0f}-{1e3 * (t1 - t_start):.0f} ms"
                                       for k, m, t0, t1 in r.value["timeline"][r.value["marks"][-2]:]))
assert [sorted(k for k, m, t0, t1 in r.value["timeline"]) for r in ranks] == [["B"] * 9 + ["F"] * 9] * 2
assert all(len(r.value["params"]) == 2 + 2 * r.rank for r in ranks)  # stage 1 holds two Linear layers
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab11", "gpipe_step", gpipe_step=gpipe_step)
assert len(verdict) == 4
for check, outcome in verdict.items():
    assert outcome == "ok", f"{check}: {outcome}"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex5_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 5 (5 points): a sharded parameter server, its push overlapped with the backward
#
# Exercise 2's everyone-to-everyone exchange is a sharded parameter server's traffic. Here it
# trains: every rank is a worker (the whole MLP, b = G / N samples, the mean loss over them) and
# the server of one shard: parameter j of `list(model.parameters())` lives on rank j mod N. Write
# `attach_sharded_ps(model, lr)`, called once before the first step; it registers hooks and
# returns `finish`, which the test calls after each `loss.backward()` (three steps):
#
# 1. **Push, from inside the backward.** In a `register_post_accumulate_grad_hook` hook, send
#    parameter j's gradient to its owner with `dist.isend(p.grad, owner, tag=j)` (unless this rank
#    owns it): the push crosses the network while the backward computes the earlier layers.
#    Several tensors go between the same two ranks; the tag says which is which.
# 2. **Update, on the owner** (in `finish`): receive the other N - 1 gradients of each parameter
#    it owns (`dist.irecv(..., tag=j)`), wait for them and for this rank's own pushes, and take the
#    SGD step `p -= lr * (sum of the N gradients) / N`.
# 3. **Pull.** Every owner sends each updated parameter to the N - 1 other ranks; every rank
#    receives the parameters it does not own into them (`dist.irecv(p.detach(), owner, tag=j)`).
#
# `finish` must leave the hooks ready for the next step. The graded tests compare the parameters
# after three steps with one process, count the bytes each rank pushed and pulled point to
# point, and read the call log: in every step, a push must start before the backward ends. A
# sharded PS moves what a ring allreduce moves; what it lacks without this overlap is the time
# the backward could have hidden.

# %% nbgrader={"grade": false, "grade_id": "attach_sharded_ps", "locked": false, "schema_version": 3, "solution": true, "task": false}
def attach_sharded_ps(model, lr):
    ### BEGIN SOLUTION
    rank, world = dist.get_rank(), dist.get_world_size()
    params = list(model.parameters())
    number = {id(p): j for j, p in enumerate(params)}
    pushed = []  # this step's push handles

    def hook(p):  # push the gradient to its owner while the backward goes on
        j = number[id(p)]
        if j % world != rank:
            pushed.append(dist.isend(p.grad, j % world, tag=j))

    for p in params:
        p.register_post_accumulate_grad_hook(hook)

    def finish():
        mine = [j for j in range(len(params)) if j % world == rank]
        got = {(j, r): torch.empty_like(params[j]) for j in mine for r in range(world) if r != rank}
        handles = [dist.irecv(t, r, tag=j) for (j, r), t in got.items()]
        for h in handles + pushed:
            h.wait()
        pushed.clear()  # ready for the next step
        with torch.no_grad():
            for j in mine:  # the owner averages the N gradients and updates
                total = params[j].grad.clone()
                for r in range(world):
                    if r != rank:
                        total += got[(j, r)]
                params[j] -= lr * total / world
        pulls = []
        for j, p in enumerate(params):  # every rank pulls the updated parameters from their owners
            if j % world == rank:
                pulls += [dist.isend(p.detach(), r, tag=j) for r in range(world) if r != rank]
            else:
                pulls.append(dist.irecv(p.detach(), j % world, tag=j))
        for h in pulls:
            h.wait()

    return finish
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_attach_sharded_ps", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
# your attach_sharded_ps(model, lr) on 2 ranks, three steps
ranks = gradekit.run_lab("lab11", "try_ps", attach_sharded_ps=attach_sharded_ps)
want = gradekit.one_process("lab11", "try_ps")  # the same steps on the whole batches, one process
print("parameters against one process:", gradekit.compare(ranks[0].value["params"], want[0], 1e-6) or "equal")
assert all(gradekit.compare(r.value["params"], want[0], 1e-6) is None for r in ranks)
for r in ranks:
    t0, t1 = r.value["backward"][0]
    print(f"rank {r.rank}: backward {1e3 * (t1 - t0):.2f} ms;",
          ", ".join(f"{c['op']}({c['peer']}) at {1e3 * (c['t0'] - t0):+.2f} ms" for c in r.calls[:6]))
assert all(torch.equal(ranks[0].value["params"][n], ranks[1].value["params"][n]) for n in ranks[0].value["params"])
### BEGIN HIDDEN TESTS
verdict = gradekit.grade("lab11", "attach_sharded_ps", attach_sharded_ps=attach_sharded_ps)
assert len(verdict) == 4
for check, outcome in verdict.items():
    assert outcome == "ok", f"{check}: {outcome}"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "why_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Question (2 points, graded by hand)
#
# Answer in the cell below, in a few sentences each.
#
# (a) With 3 ranks, the blocking pipeline finishes with 2 micro-batches and hangs with 3. Give
# the cycle of waits it hangs in (which rank waits, in which operation, for which rank), and
# say in general which M hang on N ranks.
#
# (b) A classmate "fixes" `ring_shift` by calling `dist.isend` and `dist.irecv` and returning
# `got` without calling `wait()`. It passed on their laptop once. What can go wrong, and why
# can a test that passes once not show the program is right?

# %% [markdown] nbgrader={"grade": true, "grade_id": "why", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# **Model answer.** (a) Rank 0 sends micro-batches 0 and 1 (rank 1 receives each and passes it to rank 2), then
# blocks in send(micro-batch 2, to rank 1). Rank 1 is blocked in send(micro-batch 1's result,
# to rank 2). Rank 2 has finished micro-batch 0 and is blocked in send(output 0, to rank 0),
# which rank 0 will receive only after its sends: 0 waits for 1, 1 for 2, 2 for 0. The stages
# can hold N - 1 micro-batches between them; the M-th send of rank 0 needs a stage to move on,
# which needs rank 0 to receive: it hangs whenever M >= N (on 2 ranks, from M = 2).
#
# (b) isend/irecv only start the transfers. Without wait, `got` can be read before the data has
# arrived (zeros or half a tensor), the sent tensor can be freed or overwritten while in flight,
# and the rank can return and exit with transfers pending, so a peer hangs or fails. Whether it
# works depends on timing: a race. One passing run shows that one interleaving worked, not that
# every interleaving does; the tests run several sizes, but only reasoning about the waits
# proves the program right.
#
# **Rubric.** (a) 1 point: the cycle: rank 0 blocked in send(micro-batch 2) to rank 1, rank 1 in
# send(its micro-batch 1 result) to rank 2, rank 2 in send(output 0) to rank 0; with M >= N the
# pipeline holds more micro-batches than it has stages, so the last stage sends its first output
# back while rank 0 is still sending (N = 2: M >= 2). (b) 1 point: without wait the receive may
# not have completed when `got` is read (wrong or partial values) and the send buffer may be
# freed or changed, or the process may exit with the transfer pending (the peer then hangs or
# fails); it is a race: timing decides, so one lucky run proves nothing.
# ### END SOLUTION
