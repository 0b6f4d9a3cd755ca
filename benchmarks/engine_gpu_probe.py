"""Where a GPU step's time goes: the engine's `local` step against a plain PyTorch loop, one
difference at a time, in one process on one GPU (measured; CUDA events, medians).

    python benchmarks/engine_gpu_probe.py [--models resnet50,alexnet,vgg16] [--out probe.json]

Variants (224 px, batch 32, TF32 default, SGD momentum, as `make gpu-check`'s check 5):

  plain_sync       the plain loop of gpu-check: batch resident on the GPU, one synchronize per step
  plain_nosync     the same loop with no synchronize in it (events read at the end)
  plain_hostdata   plain_sync, plus the engine's data path before each step: the synthetic
                   dataset's samples made on the host, then `.to(device)` (pageable, blocking)
  engine           the engine's Local strategy and StepLog in this process, data as the engine loads it
  engine_resident  the engine's step on one batch kept on the GPU
  engine_pinned    engine, its batch made in pinned memory and copied with non_blocking=True
  engine_cli       `python -m stanza_core.train --strategy local` in its own process (OMP_NUM_THREADS=2,
                   as gpu-check runs it): its metrics' step_time_median_s

Each variant also reports the host's time to issue one step (perf_counter from the step's start
to the return of the last launch, before any synchronize), and, for plain_sync and engine, the
kernels one step runs (torch.profiler: count and summed device time). A step whose host issue
time exceeds its kernels' time is launch-bound: its step time is the host's.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from stanza_core import procgroup  # noqa: E402

STEPS, WARMUP = 20, 6


def _timed(step, device, steps=STEPS, warmup=WARMUP, sync=True, before=None):
    """Median step seconds (CUDA events, or perf_counter on the CPU) and median host issue seconds."""
    cuda = device.type == "cuda"
    pairs, host = [], []
    for i in range(warmup + steps):
        arg = before(i) if before else None
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
        t0 = time.perf_counter()
        step(i, arg)
        t1 = time.perf_counter()
        if cuda:
            b.record()
        if sync and cuda:
            torch.cuda.synchronize()
        if i >= warmup:
            pairs.append((a, b) if cuda else t1 - t0)
            host.append(t1 - t0)
    if cuda:
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) / 1e3 for a, b in pairs]
    else:
        times = pairs
    return statistics.median(times), statistics.median(host)


def _kernels(step, device, n=3):
    """Kernels per step and their summed device seconds per step (torch.profiler, n steps)."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    for i in range(2):
        step(i, None)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(n):
            step(i, None)
        torch.cuda.synchronize()
    evs = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.device_time for e in evs) / 1e6  # us -> s
    top = {}
    for e in evs:
        top[e.name] = top.get(e.name, 0.0) + e.device_time / 1e6 / n
    worst = sorted(top.items(), key=lambda kv: -kv[1])[:8]
    return {"kernels_per_step": len(evs) / n, "kernel_s_per_step": total / n,
            "top": [(k[:90], round(v * 1e3, 3)) for k, v in worst]}


def plain(model_name, device, batch, image_size, num_classes):
    from stanza_core.models import get_model

    torch.manual_seed(0)
    model = get_model(model_name, num_classes).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, image_size, image_size, device=device)
    y = torch.randint(0, num_classes, (batch,), device=device)

    def step(i, arg):
        xb, yb = arg if arg is not None else (x, y)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(xb), yb).backward()
        opt.step()
    return step


def engine(model_name, device, batch, image_size, num_classes):
    """The engine's Local strategy built as `stanza_core.train` builds it, in this process."""
    from stanza_core.comm import Comm
    from stanza_core.engine.config import TrainConfig
    from stanza_core.engine.train import prepare
    from stanza_core.strategies.local.engine import Local
    from stanza_core.engine.batch import Batch, positions_of
    from stanza_core.data import batch_indices

    cfg = TrainConfig(strategy="local", model=model_name, num_classes=num_classes, image_size=image_size,
                      global_batch=batch, steps=STEPS + WARMUP, device=device.type, quiet=True)
    prep = prepare(cfg)
    comm = Comm.from_env(cfg.timeout_s, prep.device, None)
    strategy = Local(prep.model, cfg, prep.topo, comm, prep.device, prep.split)
    prep.model.train()
    mine = strategy.data_slice()

    def load(t):
        x, y = prep.dataset.get(batch_indices(prep.dataset, t, cfg.global_batch, cfg.seed, mine))
        return Batch(x.to(prep.device), y.to(prep.device), positions_of(mine))
    resident = load(0)

    def load_pinned(t):
        x, y = prep.dataset.get(batch_indices(prep.dataset, t, cfg.global_batch, cfg.seed, mine))
        if prep.device.type == "cuda":
            x, y = x.pin_memory(), y.pin_memory()
        return Batch(x.to(prep.device, non_blocking=True), y.to(prep.device, non_blocking=True), positions_of(mine))

    def step(i, arg):
        with comm.counting():
            strategy.step(i, arg if arg is not None else resident)
    return step, load, load_pinned


def engine_cli(model_name, batch, image_size, num_classes, device):
    with tempfile.TemporaryDirectory() as d:
        metrics = Path(d) / "m.json"
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="2", PYTHONWARNINGS="ignore")
        cmd = [sys.executable, "-m", "stanza_core.train", "--strategy", "local", "--model", model_name,
               "--num-classes", str(num_classes), "--image-size", str(image_size), "--global-batch", str(batch),
               "--steps", str(STEPS + WARMUP), "--warmup", str(WARMUP), "--device", device.type, "--quiet",
               "--metrics", str(metrics)]
        p = procgroup.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout_s=300)  # ended whole on a timeout
        if p.returncode != 0:
            return {"error": (p.stderr.strip().splitlines() or ["?"])[-1][:200]}
        return {"step_s": json.loads(metrics.read_text())["step_time_median_s"]}


def probe(model_name, device, batch, image_size, num_classes, cli=True):
    row = {"model": model_name, "batch": batch, "image_size": image_size}
    p = plain(model_name, device, batch, image_size, num_classes)
    row["plain_sync"] = _timed(p, device)
    row["plain_nosync"] = _timed(p, device, sync=False)
    step, load, load_pinned = engine(model_name, device, batch, image_size, num_classes)

    def host_data(i):
        b = load(i)
        return b.x, b.y
    row["plain_hostdata"] = _timed(p, device, before=host_data)
    row["engine"] = _timed(step, device, sync=False, before=load)
    row["engine_resident"] = _timed(step, device, sync=False)
    row["engine_sync"] = _timed(step, device, sync=True, before=load)
    row["engine_pinned"] = _timed(step, device, sync=False, before=load_pinned)
    t0 = time.perf_counter()
    for i in range(5):
        load(i)
    row["host_load_s"] = (time.perf_counter() - t0) / 5
    row["plain_sync_again"] = _timed(p, device)
    row["kernels_plain"] = _kernels(p, device)
    row["kernels_engine"] = _kernels(step, device)
    if cli:
        row["engine_cli"] = engine_cli(model_name, batch, image_size, num_classes, device)
    del p, step
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,alexnet,vgg16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--num-classes", type=int, default=1000)
    ap.add_argument("--no-cli", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU"
    rows = []
    for m in args.models.split(","):
        r = probe(m, device, args.batch, args.image_size, args.num_classes, cli=not args.no_cli)
        rows.append(r)
        print(f"{m} on {name} (torch {torch.__version__}), batch {args.batch}, {args.image_size} px: "
              "step ms (host issue ms)", flush=True)
        for k in ("plain_sync", "plain_nosync", "plain_hostdata", "engine", "engine_resident", "engine_sync",
                  "engine_pinned", "plain_sync_again"):
            s, h = r[k]
            print(f"  {k:<17} {s * 1e3:8.2f} ({h * 1e3:7.2f})", flush=True)
        print(f"  host batch load   {r['host_load_s'] * 1e3:8.2f}")
        if "engine_cli" in r:
            print(f"  engine_cli        {r['engine_cli']}")
        for k in ("kernels_plain", "kernels_engine"):
            if r[k]:
                print(f"  {k}: {r[k]['kernels_per_step']:.0f} kernels, {r[k]['kernel_s_per_step'] * 1e3:.2f} ms; "
                      f"top {r[k]['top'][:4]}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"device": name, "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
