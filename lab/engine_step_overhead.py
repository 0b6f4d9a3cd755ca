"""The engine's local step against a plain PyTorch loop, on CPU: host time and operator calls.

    python lab/engine_step_overhead.py [--models alexnet,vgg16] [--image-size 64]
        [--batch 8] [--steps 5] [--out FILE.json]

Per model, side by side in one process, on the same model and the same batch:
  engine  `stanza_core.strategies.local.engine.Local.step` as `stanza_core.train` runs it (inside
          `comm.counting()`, per-sample dropout keys; the loss left on the device, as the training
          loop leaves it until it reads the step, where the plain loop reads it as a float);
  plain   zero_grad, forward, cross_entropy, backward, SGD step: the loop a PyTorch user writes.
Printed per step:
  host ms   median wall seconds of `--steps` steps after one warm-up step, the two columns
            alternating step by step (on CPU the host time is the whole step, arithmetic
            included: compare the two columns, not machines);
  ops       aten operator calls of one step, counted by a TorchDispatchMode (forward, backward
            and optimizer; exact and machine-independent). On a GPU each is at least one kernel
            launch issued by the host, so a step whose count grows costs host time there.
With --mask-batches, also the dropout layer alone (AlexNet's first FC dropout, 9216 values per
sample): the engine's SampleDropout under per-sample keys against torch's nn.functional.dropout,
host microseconds (median of --mask-reps, alternating) and operator calls, per batch size; it
shows whether the per-sample masks cost grows with the batch.
Measured, never modelled. On a shared machine the host times are only meaningful as ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from stanza_core import atomic  # noqa: E402
from stanza_core.opcount import OpCounter, engine_stepper  # noqa: E402


def engine_step_fn(model_name: str, image_size: int, batch: int, num_classes: int):
    """A zero-argument callable running one engine local step (step counter advancing)."""
    from stanza_core import train
    from stanza_core.comm import Comm
    from stanza_core.engine.config import TrainConfig
    from stanza_core import registry

    cfg = TrainConfig(strategy="local", model=model_name, image_size=image_size, global_batch=batch,
                      num_classes=num_classes, device="cpu", steps=1000, quiet=True)
    prep = train.prepare(cfg)
    comm = Comm(0, 1)
    strategy = registry.get("local").engine_class()(prep.model, cfg, prep.topo, comm, prep.device, None)
    step, b = engine_stepper(strategy, prep, comm)
    return step, prep.model, b.x, b.y


def plain_step_fn(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor):
    """The same model (its own copy of the parameters) trained by a plain PyTorch loop."""
    import copy

    model = copy.deepcopy(model).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def measure(engine, plain, steps: int) -> tuple[list[float], list[float]]:
    """Host seconds of `steps` steps of each, after one warm-up step each, alternating engine and
    plain step by step so both see the same machine load."""
    engine(), plain()  # warm-up (momentum buffers, allocator)
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(steps):
        for fn, out in ((engine, times[0]), (plain, times[1])):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return times


def count_ops(step) -> tuple[int, dict]:
    """Operator calls of one step: total and by name."""
    with OpCounter() as counter:
        step()
    return counter.total, dict(counter.ops)


def mask_rows(batches: list[int], reps: int, features: int = 9216) -> list[dict]:
    from stanza_core.models import SampleDropout, sample_keys

    drop = SampleDropout(0.5, layer_id=0).train()
    rows = []
    for b in batches:
        x = torch.randn(b, features)
        pos = torch.arange(b)
        state = {"t": 0}

        def engine():
            state["t"] += 1
            with sample_keys(0, state["t"], pos):
                return drop(x)

        def plain():
            return torch.nn.functional.dropout(x, 0.5, True)

        e_times, p_times = measure(engine, plain, reps)
        (e_ops, _), (p_ops, _) = count_ops(engine), count_ops(plain)
        rows.append({"batch": b, "engine_us": statistics.median(e_times) * 1e6,
                     "plain_us": statistics.median(p_times) * 1e6, "engine_ops": e_ops, "plain_ops": p_ops})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="alexnet,vgg16")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per column (median)")
    ap.add_argument("--mask-batches", default="", help="e.g. 8,32,128: also time the dropout layer alone")
    ap.add_argument("--mask-reps", type=int, default=30)
    ap.add_argument("--out", default=None, help="also write the figures as JSON here")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    rows = []
    print(f"CPU, {torch.get_num_threads()} threads, {args.image_size} px, batch {args.batch}, "
          f"median of {args.steps} steps (host ms) | aten operator calls per step")
    print(f"{'model':<8} {'engine ms':>10} {'plain ms':>10} {'ratio':>6} {'engine ops':>11} {'plain ops':>10}")
    for name in filter(None, args.models.split(",")):
        engine, model, x, y = engine_step_fn(name, args.image_size, args.batch, args.num_classes)
        plain = plain_step_fn(model, x, y)
        e_times, p_times = measure(engine, plain, args.steps)
        e_s, p_s = statistics.median(e_times), statistics.median(p_times)
        (e_ops, e_by), (p_ops, p_by) = count_ops(engine), count_ops(plain)
        extra = {k: v - p_by.get(k, 0) for k, v in e_by.items() if v != p_by.get(k, 0)}
        extra.update({k: -v for k, v in p_by.items() if k not in e_by})
        rows.append({"model": name, "engine_s": e_s, "plain_s": p_s, "engine_times_s": e_times, "plain_times_s": p_times, "engine_ops": e_ops, "plain_ops": p_ops,
                     "engine_minus_plain_ops_by_name": extra})
        print(f"{name:<8} {e_s * 1e3:10.1f} {p_s * 1e3:10.1f} {e_s / p_s:6.2f} {e_ops:11d} {p_ops:10d}")
        print(f"         engine - plain ops by name: {dict(sorted(extra.items(), key=lambda kv: -abs(kv[1])))}")
    masks = mask_rows([int(b) for b in args.mask_batches.split(",")], args.mask_reps) if args.mask_batches else []
    if masks:
        print(f"dropout layer alone, (b, 9216), median of {args.mask_reps}: host us | operator calls")
        print(f"{'batch':>6} {'engine us':>10} {'plain us':>10} {'engine ops':>11} {'plain ops':>10}")
        for r in masks:
            print(f"{r['batch']:6d} {r['engine_us']:10.0f} {r['plain_us']:10.0f} {r['engine_ops']:11d} {r['plain_ops']:10d}")
    if args.out:
        atomic.write_text(Path(args.out), json.dumps({"args": vars(args), "torch": torch.__version__,
                                              "cpu_count": os.cpu_count(), "rows": rows, "masks": masks}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
