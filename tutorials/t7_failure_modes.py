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

# %% [markdown]
# # T7 · Failure modes: a deadlock, a dead FC worker, a straggler
#
# *Course on layer separation, part 7 of 8. Before: T3 (the step in plain `torch.distributed`: gloo
# holds a send until its receive is posted), T6 (convergence). Next: T8 (GPU against CPU).*
#
# **Learning goals.** After this part a student can:
# 1. predict a deadlock from the order of sends and receives on each rank, recognise it by its
#    one-line error (`Timed out waiting ...ms for send operation to complete`) and fix it;
# 2. say what the surviving ranks do when an FC worker dies, and within how long (the
#    collective timeout, `--timeout-s`), and read their error line;
# 3. measure what a straggler costs under bulk-synchronous steps (BSP): every rank waits for the
#    slowest, so one rank's delay is everyone's.
#
# Runs in a few minutes on a laptop CPU (61 CPU seconds on the shared 2-core development
# machine, plus deliberate waits: a 3 s timeout, a killed FC worker's survivors): five small
# `torchrun` jobs and one 3-process engine run; no root: the processes talk over loopback.

# %% tags=["parameters"]
timeout_s: float = 3.0  # the process group's timeout in the deadlock lab (seconds)
engine_timeout_s: float = 20.0  # --timeout-s of the engine run whose FC worker is killed
delays_s: list[float] = [0.0, 0.1, 0.2]  # extra compute of the slow rank in the straggler lab
compute_s: float = 0.05  # every rank's compute per step in the straggler lab
png: bool = True  # also export PNG figures (needs a Chromium)
out_dir: str = "../reproductions/out/tutorials/t7_failure_modes"  # where results.json and figures go

# %%
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import plotly.graph_objects as go
from IPython.display import Code

import stanza_core.nbtools as nbt
from stanza_core import procgroup
from stanza_core.launch import ROOT, job_env

out = Path(out_dir).resolve()
script = Path("t7_failure_lab.py").resolve()


def torchrun(nproc, *args, wait_s=300):
    """Run t7_failure_lab.py on `nproc` local processes; each rank's JSON result. The job runs in
    its own process group (procgroup): if it outlives `wait_s`, torchrun and every rank end."""
    folder = out / "_".join(str(a).lstrip("-") for a in args)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           str(script), *map(str, args), "--out", str(folder)]
    proc = procgroup.run(cmd, env=job_env(), capture_output=True, text=True, timeout_s=wait_s)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(nproc)]


Code(filename=str(script), language="python")

# %% [markdown]
# ## 1. A deadlock: both ranks send first
#
# Two ranks swap a tensor. Read `deadlock()` in the script above. With `--order swapped` both
# call `dist.send(mine, peer)` and only then `dist.recv(theirs, peer)`.
#
# **Predict first.** Under gloo a send returns only once the peer has posted the matching
# receive (T3). What happens, and after how long? What does each rank's error say?

# %%
swapped = torchrun(2, "deadlock", "--order", "swapped", "--timeout-s", timeout_s)
for r in swapped:
    print(f"rank {r['rank']}: ok={r['ok']} after {r['waited_s']:.2f} s: {r.get('error')}")
assert not any(r["ok"] for r in swapped)
timed_out = ["Timed out waiting" in r["error"] and "send" in r["error"] for r in swapped]
assert any(timed_out)  # the first rank to give up: its own timeout
assert all(t or "Connection closed by peer" in r["error"] for t, r in zip(timed_out, swapped))
assert all(r["waited_s"] > 0.9 * timeout_s for r in swapped)

# %% [markdown]
# Each rank sits in its send until the timeout fires, then gets one line from gloo: `Timed out
# waiting 3000ms for send operation to complete`. That is the line to expect. (A rank that gives
# up closes its connections; a peer whose own timeout fires a moment later may read `Connection
# closed by peer` instead: both ranks waited the whole timeout either way.) Nothing is wrong
# with the network; the *program* has a cycle of waits: rank 0 waits for rank 1's receive,
# rank 1 waits for rank 0's. Without a timeout it would wait forever. (Under MPI a 16-byte send
# often completes into a buffer, and this bug hides until the messages grow; gloo shows it at
# any size.) The fix: one rank receives first, or both use `isend` / `irecv` and wait on both.

# %%
right = torchrun(2, "deadlock", "--order", "right", "--timeout-s", timeout_s)
for r in right:
    print(f"rank {r['rank']}: ok={r['ok']} after {r['waited_s'] * 1e3:.1f} ms, got {r['got']}")
assert all(r["ok"] for r in right) and [r["got"][0] for r in right] == [1.0, 0.0]

# %% [markdown]
# ## 2. A dead FC worker
#
# The engine's ranks talk through `stanza_core/comm/`, which gives every wait the run's
# `--timeout-s` and turns a timeout or a broken connection into one line naming the rank, the
# step and what it waited for. We start a 3-rank stanza run (2 CONV workers, FC worker = rank 2)
# by hand, one process per rank (torchrun's agent would tear the job down itself, and we want
# to see what the survivors do on their own), wait until it trains, and kill the FC worker with
# SIGKILL: no goodbye, as when a machine loses power.
#
# **Predict first.** Do the CONV workers hang, crash with a traceback, or exit? After how long?


# %%
def start_engine(folder, n=3, timeout=engine_timeout_s):
    """n engine ranks started by hand, each in a process group of its own (procgroup.start, so
    procgroup.end stops it with anything it started); returns them once every rank has written a
    checkpoint."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = job_env()
        env.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(procgroup.start(
            [sys.executable, "-m", "stanza_core.train", "--strategy", "stanza", "--model", "tiny_cnn", "--image-size", "32",
             "--global-batch", "8", "--steps", "100000", "--quiet", "--device", "cpu", "--timeout-s", str(timeout),
             "--checkpoint-dir", str(folder), "--checkpoint-every", "20"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True))
    deadline = time.time() + 240  # a loaded 2-core machine starts 3 ranks slowly
    try:
        while not (folder / "latest").exists():  # every rank has saved (a collective)
            assert time.time() < deadline and all(p.poll() is None for p in procs), "the run did not start"
            time.sleep(0.2)
    except BaseException:
        procgroup.end(*procs)
        raise
    return procs


procs = start_engine(out / "dead_fc_worker")
try:
    os.kill(procs[2].pid, signal.SIGKILL)  # the FC worker
    t0 = time.time()
    dead = []
    for r, p in enumerate(procs[:2]):
        p.wait(timeout=engine_timeout_s + 60)
        lines = [ln for ln in p.stderr.read().splitlines() if ln.strip()]
        dead.append({"rank": r, "returncode": p.returncode, "exit_s": time.time() - t0,
                     "last_line": lines[-1] if lines else ""})
finally:
    procgroup.end(*procs)  # every rank, also when a survivor outlived the wait
for d in dead:
    print(f"CONV worker {d['rank']}: exit status {d['returncode']} {d['exit_s']:.1f} s after the kill: {d['last_line']}")
assert all(d["returncode"] == 1 and d["last_line"].startswith("error: rank ") for d in dead)
assert all(d["exit_s"] < engine_timeout_s + 30 for d in dead)

# %% [markdown]
# Both CONV workers exit with status 1 and one line each, naming the rank, what it waited for
# (the activation gradients from FC worker 2) and the step. A killed process's sockets are
# closed by its operating system, so its peers can see the broken connection ("Connection closed
# by peer", "Connection reset by peer") before the timeout; a *frozen* one (SIGSTOP, a swapping machine) sends nothing, and only the timeout
# ends the wait (`tests/dist/test_faults.py` checks both). Either way the survivors fail within
# `--timeout-s`, never hang, and say which rank and step. Restarting from the last checkpoint
# (`--checkpoint-dir ... --resume`) is the recovery: BSP training has no partial step to keep.

# %% [markdown]
# ## 3. A straggler: one slow rank delays everyone
#
# Three ranks do BSP steps: compute (here a sleep of `compute_s`, so the figure does not depend
# on the machine's load), then an allreduce of their gradients. Rank 2 computes `delay` longer
# (a slower machine, a noisy neighbour, a thermal throttle). Each rank records how long it
# computed and how long it waited inside the allreduce.
#
# **Predict first.** With a delay of 0.2 s, how long is a step, and who waits how long?

# %%
straggle = {}
for delay in delays_s:
    ranks = torchrun(3, "straggler", "--delay-s", delay, "--compute-s", compute_s, "--slow-rank", 2, "--steps", 6)
    straggle[delay] = [{k: statistics.median(s[k] for s in r["steps"][1:]) for k in ("compute_s", "allreduce_s", "step_s")}
                       for r in ranks]
    print(f"delay {delay:.2f} s: " + " | ".join(f"rank {i}: compute {m['compute_s'] * 1e3:.0f} ms, waits "
                                                 f"{m['allreduce_s'] * 1e3:.0f} ms" for i, m in enumerate(straggle[delay])))
for delay, ranks in straggle.items():
    step = max(m["step_s"] for m in ranks)
    assert abs(step - (compute_s + delay)) < 0.05 + 0.2 * (compute_s + delay)  # the step is the slowest rank's
    for m in ranks[:2]:  # the fast ranks wait out the delay inside the allreduce
        assert abs(m["allreduce_s"] - delay) < 0.03 + 0.2 * delay

# %%
fig = go.Figure()
for rank in range(3):
    fig.add_bar(x=[f"delay {d:.2f} s" for d in delays_s], y=[straggle[d][rank]["compute_s"] * 1e3 for d in delays_s],
                name=f"rank {rank} compute", offsetgroup=rank)
    fig.add_bar(x=[f"delay {d:.2f} s" for d in delays_s], y=[straggle[d][rank]["allreduce_s"] * 1e3 for d in delays_s],
                name=f"rank {rank} waits in allreduce", offsetgroup=rank,
                base=[straggle[d][rank]["compute_s"] * 1e3 for d in delays_s], opacity=0.5)
fig.update_layout(title="Measured (3 processes, gloo over loopback, compute = sleep): a BSP step with one slow rank",
                  yaxis_title="ms per step (median)", barmode="group", height=430)
fig

# %% [markdown]
# **What the figure says** (measured). Every rank's step is as long as the slowest rank's:
# ranks 0 and 1 spend the straggler's extra time waiting inside the allreduce. With n ranks and
# one straggler delayed by d, the cluster loses (n - 1) d rank-seconds per step: the slower a
# single rank, the more it costs everyone. In Stanza a slow FC worker delays all its CONV
# workers (they wait for their activation gradients), and a slow CONV worker delays the FC
# worker's last chunk and the CONV allreduce. Remedies trade exactness: drop the slowest
# gradients (backup workers), or stale updates (asynchronous SGD): both change the algorithm
# (T6).

# %%
results = {"timeout_s": timeout_s, "deadlock": swapped, "right_order": right, "dead_fc_worker": dead,
           "engine_timeout_s": engine_timeout_s, "compute_s": compute_s,
           "straggler": {str(d): v for d, v in straggle.items()}}
nbt.write_results(results, out_dir)
written = nbt.save_figures({"straggler": fig}, out_dir, png=png)

# %% [markdown]
# ## Exercises
#
# Graded lab: `reproductions/out/course/release/lab7/lab7.ipynb`, the student release that
# `make course` builds at the repository root (the exercises without their solutions; nbgrader
# grades what you hand in, see `docs/course.md`).
#
# 1. `deadlocks(program)`: given each rank's list of blocking sends and receives, does the
#    program deadlock under gloo's rule (a send waits for its receive)?
# 2. `bsp_waits(compute_s, allreduce_s)`: how long each rank waits per BSP step.
# 3. `straggler_loss(compute_s)`: the share of the cluster's rank-seconds lost to waiting;
#    check it against this notebook's `results.json`.
