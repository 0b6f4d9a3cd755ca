"""Compute rounds: a device profile of THIS machine under the contention the emulated runs see.

Why contention matters: on the emulated cluster every node is one process with one thread and
all of them share this machine's cores. A step's compute is slower than a lone process's when
more processes compute at once than there are cores, and how many compute at once depends on
the strategy and the phase: ddp and ps compute on all N nodes together; stanza's CONV phase on
its N - k CONV workers while the FC workers wait, and its FC phase on the k FC workers while
the CONV workers wait. So per-part times are measured in *rounds*: `level` worker processes
(one thread each, as the nodes) time the same step at the same moment (`timing_rounds`), and
each configuration's DeviceProfile takes every part from the round with that part's level
(`device_for`). The per-step overhead (loss, dropout masks, zero_grad, optimizer glue) is what
a whole measured step takes beyond its timed parts, in the same rounds.

Glossary: level = processes computing at once; round = one timing at one (level, batch).
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F

from .. import registry
from ..perf import DeviceProfile
from ..topology import plain_topology
from ..variant import Variant
from ..models import get_model, sample_keys
from ..split import split_model
from ..launch import job_env

PARTS = ("conv_fwd", "conv_bwd", "fc_fwd", "fc_bwd")


# ---------------------------------------------------------------------------------------------
# Timing worker: one process, one thread, the engine's step pieces on a batch


def _worker(model_name: str, image_size: int, num_classes: int) -> None:
    """Serve timing requests on stdin (one JSON line {"batch", "reps"} each; "quit" ends)."""


    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = get_model(model_name, num_classes)
    model.train()
    shape = (3, image_size, image_size)
    split = split_model(model, None, input_shape=shape)
    conv_p, fc_p = list(split.conv.parameters()), list(split.fc.parameters())
    opt = torch.optim.SGD(conv_p + fc_p, lr=0.01, momentum=0.9)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            return
        req = json.loads(line)
        b, reps = int(req["batch"]), int(req["reps"])
        x, y = torch.randn((b, *shape)), torch.randint(0, num_classes, (b,))
        rows = []
        for rep in range(reps + 1):  # the first repetition warms the allocator up
            t = [time.perf_counter()]
            opt.zero_grad(set_to_none=True)
            a = split.conv(x)  # the CONV worker's forward, graph kept for its backward
            t.append(time.perf_counter())
            inp = a.detach().requires_grad_(True)
            with sample_keys(0, rep, torch.arange(b)):  # per-sample dropout masks, as the engine
                loss = F.cross_entropy(split.fc(inp), y, reduction="sum") / b
            t.append(time.perf_counter())
            loss.backward()
            t.append(time.perf_counter())
            a.backward(inp.grad)
            t.append(time.perf_counter())
            opt.step()
            t.append(time.perf_counter())
            d = [t[i + 1] - t[i] for i in range(5)]
            rows.append({"conv_fwd": d[0], "fc_fwd": d[1], "fc_bwd": d[2], "conv_bwd": d[3],
                         "update": d[4], "step": t[5] - t[0]})
        rows = rows[1:]
        print(json.dumps({k: statistics.median(r[k] for r in rows) for k in rows[0]}), flush=True)


class TimingPool:
    """`size` timing workers (one thread each) kept alive between rounds, so rounds can be timed
    right before and after each measured run, under the load the run saw, at ~1 s per round.

        with TimingPool("cifar_alexnet", 32, 10, size=3) as pool:
            pool.time([(3, 4), (1, 6)])
    """

    def __init__(self, model: str, image_size: int, num_classes: int, size: int, *, reps: int = 5):
        self.cmd = [sys.executable, "-m", "stanza_core.runs.compute_rounds", "worker", model, str(image_size),
                    str(num_classes)]
        self.size, self.reps, self.procs = size, reps, []

    def __enter__(self) -> "TimingPool":
        self.procs = [subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, env=job_env(1)) for _ in range(self.size)]
        try:
            for p in self.procs:  # wait until every worker has imported torch and built the model
                if p.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"timing worker failed: {p.stderr.read().strip().splitlines()[-1:]}")
        except BaseException:
            self.__exit__()
            raise
        return self

    def time(self, rounds: list[tuple[int, int]]) -> list[dict[str, Any]]:
        """One dict per (level, batch): the median over the round's processes of their medians."""
        if any(lv < 1 or b < 1 or lv > self.size for lv, b in rounds):
            raise ValueError(f"rounds need 1 <= level <= {self.size} and batch >= 1, got {rounds}")
        out = []
        for level, batch in rounds:
            req = json.dumps({"batch": batch, "reps": self.reps}) + "\n"
            for p in self.procs[:level]:  # started back to back: the processes time at the same moment
                p.stdin.write(req)
                p.stdin.flush()
            got = [self._answer(p) for p in self.procs[:level]]
            out.append({"level": level, "batch": batch, **{k: statistics.median(g[k] for g in got) for k in got[0]}})
        return out

    @staticmethod
    def _answer(p: subprocess.Popen) -> dict:
        line = p.stdout.readline()
        if not line:  # the worker died: its own last error line is the useful one
            err = [ln for ln in p.stderr.read().strip().splitlines() if ln.strip()] or ["no error output"]
            raise RuntimeError(f"timing worker exited: {err[-1]}")
        return json.loads(line)

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            try:
                p.stdin.write("quit\n")
                p.stdin.close()
            except (BrokenPipeError, ValueError, OSError):
                pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()
        self.procs = []


def timing_rounds(model: str, image_size: int, num_classes: int, rounds: list[tuple[int, int]], *,
                  reps: int = 5) -> list[dict[str, Any]]:
    """Time the step pieces at each (level, batch) of `rounds`: `level` processes at once (one
    pool for all of them). Per round: level, batch and, per piece (conv_fwd, conv_bwd, fc_fwd,
    fc_bwd, update, step), seconds per call."""
    if not rounds:
        return []
    if any(lv < 1 or b < 1 for lv, b in rounds):
        raise ValueError(f"rounds need level >= 1 and batch >= 1, got {rounds}")
    with TimingPool(model, image_size, num_classes, max(lv for lv, _ in rounds), reps=reps) as pool:
        return pool.time(rounds)


def mean_rounds(*sets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Round by round, the mean of several timings of the same rounds (e.g. before and after a run)."""
    out = []
    for group in zip(*sets):
        keys = [k for k in group[0] if k not in ("level", "batch")]
        out.append({"level": group[0]["level"], "batch": group[0]["batch"],
                    **{k: statistics.fmean(g[k] for g in group) for k in keys}})
    return out


# ---------------------------------------------------------------------------------------------
# Which rounds a configuration needs, and its DeviceProfile


def config_rounds(strategy: str, nodes: int, fc_workers: int, global_batch: int,
                  lone: bool = False) -> dict[str, tuple[int, int]]:
    """(level, batch) of each piece of `strategy`'s step on `nodes` (see the module docstring);
    `lone`: every piece at level 1."""
    if lone:
        return {p: (1, b) for p, (_, b) in config_rounds(strategy, nodes, fc_workers, global_batch).items()}
    topo = plain_topology(Variant.parse(strategy, {"fc_workers": fc_workers or None}), nodes)
    b = topo.worker_batch(global_batch)
    if registry.get(strategy).split:  # the CONV and the FC pieces on their own ranks
        conv, fc = (len(topo.conv_ranks), b), (len(topo.fc_ranks), b)
        return {"conv_fwd": conv, "conv_bwd": conv, "fc_fwd": fc, "fc_bwd": fc, "update": conv, "step": conv}
    every = (nodes, b)
    return {k: every for k in (*PARTS, "update", "step")}


def rounds_needed(configs: list[tuple[str, int]], nodes: int, global_batch: int) -> list[tuple[int, int]]:
    need = {r for s, k in configs for r in config_rounds(s, nodes, k, global_batch).values()}
    return sorted(need, key=lambda r: (-r[0], r[1]))


def device_for(strategy: str, nodes: int, fc_workers: int, global_batch: int, rounds: list[dict],
               params: int, step_overhead_s: float = 0.0, lone: bool = False) -> DeviceProfile:
    """The DeviceProfile of one configuration: each piece from the round of its level (`lone`:
    from the round of one process alone at the piece's batch, i.e. its CPU time on a free core).

    Per-sample times are per-call times over the batch (floors 0); `update_s_per_param` is the
    optimizer step over all `params`; `step_overhead_s` is passed through (the engine's glue
    around these pieces is not in the rounds: see `fit_overhead`)."""
    at = {(r["level"], r["batch"]): r for r in rounds}
    need = config_rounds(strategy, nodes, fc_workers, global_batch, lone)
    missing = sorted({v for v in need.values() if v not in at})
    if missing:
        raise ValueError(f"no timing round at (level, batch) {missing} for {strategy} on {nodes} nodes")
    per_sample = {p: at[need[p]][p] / need[p][1] for p in PARTS}
    return DeviceProfile(name=f"this machine, {strategy} pieces at levels "
                              f"{sorted({v[0] for v in need.values()})}",
                         conv_fwd_s=per_sample["conv_fwd"], conv_bwd_s=per_sample["conv_bwd"],
                         fc_fwd_s=per_sample["fc_fwd"], fc_bwd_s=per_sample["fc_bwd"],
                         step_overhead_s=step_overhead_s,
                         update_s_per_param=at[need["update"]]["update"] / params)



if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    _worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
