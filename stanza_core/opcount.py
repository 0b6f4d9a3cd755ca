"""The engine's operator calls per step against a plain PyTorch step on the same model and batch.

On a GPU each aten operator call is at least one kernel launch the host issues, so a short GPU
step costs host time per call: a step that issues more calls than the loop a PyTorch user writes
is slower there by about as much. Counting calls is exact and machine-independent, so it runs on
the CPU, in CI (tests/unit/test_opcount.py), and the count ratio is the engine's overhead a GPU
would show on a launch-bound step.

    engine_vs_plain("alexnet", "local", image_size=64, batch=4) -> {"engine": 171, "plain": 169, ...}

  plain local  zero_grad, forward, cross_entropy (mean), backward, SGD with momentum
               (torch's own nn.Dropout, no sample keys)
  plain ddp    the same, through torch's DistributedDataParallel at the same bucket size with
               no comm hook (its default averaging allreduce)
  engine       the strategy's `step` inside `comm.counting()`, as `stanza_core.train` runs it

A host read inside a step (`.item()`, `float(t)`, `.cpu()`: aten._local_scalar_dense, or a copy
to the CPU from another device) stops the host until the device is done: `host_reads` lists them.
"""
from __future__ import annotations

import contextlib
import copy
import os
import socket
import warnings
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from . import registry
from .data import batch_indices
from .engine.batch import Batch, positions_of
from .engine import train
from .comm import Comm
from .engine.config import TrainConfig

HOST_READ_OPS = ("aten._local_scalar_dense",)


class OpCounter(TorchDispatchMode):
    """Counts every aten operator call dispatched while active (backward and optimizer included),
    and the host reads among them."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()
        self.host_reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        self.ops[name] += 1
        if name in HOST_READ_OPS or (name == "aten._to_copy" and _to_cpu_from_device(args, kwargs)):
            self.host_reads.append(name)
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def _to_cpu_from_device(args, kwargs) -> bool:
    src = args[0] if args else None
    dev = (kwargs or {}).get("device")
    return isinstance(src, torch.Tensor) and src.device.type not in ("cpu", "meta") and \
        dev is not None and torch.device(dev).type == "cpu"


def count(fn) -> OpCounter:
    """The operator calls of one call of `fn`."""
    with OpCounter() as c:
        fn()
    return c


def plain_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, lr=0.01, momentum=0.9):
    """A plain PyTorch SGD step on `model` (pass a copy), nn.Dropout drawn by torch."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def engine_stepper(engine, prep, comm):
    """(step, batch): a callable running one engine step as `stanza_core.train` runs it (inside
    `comm.counting()`, the step counter advancing) on this rank's slice of global batch 0 (None
    on a rank that loads no data), and that batch."""

    engine.model.train()
    mine = engine.data_slice()
    batch = None
    if mine is not None:
        x, y = prep.dataset.get(batch_indices(prep.dataset, 0, engine.cfg.global_batch, engine.cfg.seed, mine))
        batch = Batch(x, y, positions_of(mine))
    state = {"t": 0}

    def step():
        with comm.counting():
            engine.step(state["t"], batch)
        state["t"] += 1

    return step, batch


@contextlib.contextmanager
def one_rank_group():
    """A gloo process group of one rank in this process (torch DDP needs one), removed after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def engine_vs_plain(model_name: str, strategy: str, *, image_size: int, batch: int, num_classes: int = 10,
                    warmup: int = 2) -> dict:
    """Operator calls of one engine step of `strategy` (local, or ddp at world size 1) and of its
    plain counterpart, after `warmup` steps of each; their ratio, the engine's extra calls by
    name, and the host reads of the engine's step. Call ddp inside `one_rank_group()`."""

    cfg = TrainConfig(strategy=strategy, model=model_name, image_size=image_size, global_batch=batch,
                      num_classes=num_classes, device="cpu", steps=1000, quiet=True, lr=0.01, momentum=0.9)
    prep = train.prepare(cfg)
    spec = registry.get(strategy)
    comm = Comm.from_env(60.0, prep.device, "gloo") if spec.compared else Comm(0, 1)  # the oracle: no group
    if spec.compared:
        comm.new_groups(dict(prep.topo.groups()), prep.device)
    plain_model = copy.deepcopy(prep.model)  # the same initial parameters, before the engine steps
    engine = registry.get(strategy).engine_class()(prep.model, cfg, prep.topo, comm, prep.device, prep.split)
    engine_step, b = engine_stepper(engine, prep, comm)
    x, y = b.x, b.y
    if spec.exchange == "allreduce":  # the plain counterpart of an allreduce strategy: torch's DDP

        with warnings.catch_warnings():  # the engine's own DDP settings (comm/hooks.py), no comm hook
            warnings.filterwarnings("ignore", message=".*broadcast_buffers.* is deprecated", category=FutureWarning)
            plain_model = DDP(plain_model, bucket_cap_mb=cfg.bucket_mb, broadcast_buffers=False,
                              gradient_as_bucket_view=True)
    plain = plain_step(plain_model, x, y, cfg.lr, cfg.momentum)
    for _ in range(warmup):
        engine_step()
        plain()
    e, p = count(engine_step), count(plain)
    extra = {k: e.ops[k] - p.ops.get(k, 0) for k in sorted(set(e.ops) | set(p.ops)) if e.ops[k] != p.ops.get(k, 0)}
    return {"model": model_name, "strategy": strategy, "image_size": image_size, "batch": batch,
            "engine": e.total, "plain": p.total, "ratio": e.total / p.total, "extra_by_name": extra,
            "host_reads": e.host_reads}


# ---------------------------------------------------------------------------------------------
# Every role of a distributed step, against the same model pieces run bare (run under torchrun)

# the collectives and point-to-point calls themselves, with torch's profiler marks around them:
# the network's work
COMM_PREFIXES = ("c10d.", "profiler.")


def _bare(fn) -> Counter:
    return count(fn).ops


def bare_pieces(strategy, batch) -> Counter:
    """Operator calls of the model pieces this rank runs, bare: its forward and backward passes
    (CE mean) and its SGD update, with no communication, no buckets and no bookkeeping. The
    pieces are the strategy's own (its record's `bare_pieces`: strategies/<name>/opcount.py);
    each runs once before it is counted."""
    path = registry.get(strategy.name).bare_pieces
    if not path:
        raise ValueError(f"bare pieces of {strategy.name}: its record names none (use engine_vs_plain for "
                         f"one process)")
    total = Counter()
    for fn in registry.load(path)(strategy, batch):
        fn()
        total += _bare(fn)
    return total


def role_counts(argv: list[str], warmup: int = 1) -> dict:
    """In a rank of a torchrun job given the training flags `argv` (ps or stanza): operator calls
    of one engine step of this rank, split into the network's own calls (c10d.*) and the rest,
    against the bare pieces of its role; and the step's host reads."""

    cfg = train.parse_config(argv)
    prep = train.prepare(cfg)
    comm = Comm.from_env(cfg.timeout_s, prep.device, "gloo")
    try:
        comm.new_groups(dict(prep.topo.groups()), prep.device)
        engine = registry.get(cfg.strategy).engine_class()(prep.model, cfg, prep.topo, comm, prep.device, prep.split)
        prep.model.train()
        step, batch = engine_stepper(engine, prep, comm)
        for _ in range(warmup):
            step()
        c = count(step)
        network = sum(v for k, v in c.ops.items() if k.startswith(COMM_PREFIXES))
        own = c.total - network
        bare = bare_pieces(engine, batch)
        comm.barrier()
        extra = {k: c.ops[k] - bare.get(k, 0) for k in sorted(set(c.ops) | set(bare))
                 if not k.startswith(COMM_PREFIXES) and c.ops[k] != bare.get(k, 0)}
        return {"rank": comm.rank, "role": engine.role, "strategy": cfg.strategy, "engine": own, "network": network,
                "bare": sum(bare.values()), "ratio": own / sum(bare.values()), "host_reads": c.host_reads,
                "extra_by_name": extra}
    finally:
        comm.close(failed=False)


OUT_ENV = "STANZA_OPCOUNT_DIR"  # where each rank writes rank<r>.json (ranks' printed lines can interleave)

if __name__ == "__main__":  # torchrun ... -m stanza_core.opcount TRAIN FLAGS: one JSON file (or line) per rank
    import json
    import sys

    row = role_counts(sys.argv[1:])
    if os.environ.get(OUT_ENV):
        with open(os.path.join(os.environ[OUT_ENV], f"rank{row['rank']}.json"), "w") as fh:
            json.dump(row, fh)
    else:
        print(json.dumps(row), flush=True)
