"""`python -m stanza_core.perf calibrate`: measure a DeviceProfile on this machine's GPU.

    python -m stanza_core.perf calibrate --model vgg16 --batch 32 --out v100-vgg16.json

One training step of the model at `--batch` (CONV forward, FC forward, loss, FC backward,
CONV backward) is run `--warmup` times untimed, then `--reps` times timed with CUDA events
around each part and around every layer's forward and backward (module hooks); the medians,
divided by the batch, are the per-sample times. The optimizer step is timed on its own
(measure_update_s_per_param). Two files are written:

  OUT            a DeviceProfile JSON (DeviceProfile.to_dict()): `perf --device OUT`,
                 the explorer and `train --compute replay --replay-device OUT` read it;
  OUT.layers.json  per-layer forward/backward seconds per sample (median over reps).

Without a GPU it refuses in one line; `--device cpu` runs the same code path with wall-clock
timers (for tests, or to profile this machine).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..anatomy import _leaf_modules
from ..models import get_model
from ..split import split_model
from .devices import DeviceProfile, measure_update_s_per_param


class _Clock:
    """CUDA events on a GPU (read after one synchronize), perf_counter on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()


def _no_inplace(model: nn.Module):
    """Backward hooks cannot wrap in-place ReLUs: time them out of place (same arithmetic)."""
    for m in model.modules():
        if isinstance(m, nn.ReLU):
            m.inplace = False


def calibrate(model_name: str = "alexnet", batch: int = 32, image_size: int = 224, num_classes: int = 1000,
              device: str = "cuda", warmup: int = 5, reps: int = 20, tf32: bool = True) -> tuple[DeviceProfile, dict]:
    """(DeviceProfile, per-layer record) measured on `device`; see the module docstring."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch's default for matmuls
        torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(0)
    model = get_model(model_name, num_classes)
    _no_inplace(model)
    shape = (3, image_size, image_size)
    split = split_model(model, input_shape=shape, batch_size=batch)
    model.to(dev).train()
    clock = _Clock(dev)
    leaves = _leaf_modules(model)
    conv_names = {id(m) for _, m in _leaf_modules(split.conv)} if isinstance(split.conv, nn.Module) else set()
    events: dict[str, list] = {n: [] for n, _ in leaves}
    hooks = []
    for n, m in leaves:
        hooks.append(m.register_forward_pre_hook(lambda mod, i, n=n: events[n].append(("f0", clock.mark()))))
        hooks.append(m.register_forward_hook(lambda mod, i, o, n=n: events[n].append(("f1", clock.mark()))))
        hooks.append(m.register_full_backward_pre_hook(lambda mod, g, n=n: events[n].append(("b0", clock.mark()))))
        hooks.append(m.register_full_backward_hook(lambda mod, gi, go, n=n: events[n].append(("b1", clock.mark()))))
    x = torch.randn((batch, *shape), device=dev)
    y = torch.randint(0, num_classes, (batch,), device=dev)
    parts = {k: [] for k in ("conv_fwd", "fc_fwd", "fc_bwd", "conv_bwd")}
    layer_runs: dict[str, list[tuple[float, float]]] = {n: [] for n, _ in leaves}
    try:
        # The first layer's input needs no gradient: torch warns that its backward hook fires
        # on the outputs' gradients, which is what we time there anyway.
        warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
        for rep in range(warmup + reps):
            for v in events.values():
                v.clear()
            model.zero_grad(set_to_none=True)
            t0 = clock.mark()
            a = split.conv(x)
            t1 = clock.mark()
            a_in = a.detach().requires_grad_(True)
            loss = F.cross_entropy(split.fc(a_in), y)
            t2 = clock.mark()
            loss.backward()
            t3 = clock.mark()
            a.backward(a_in.grad)
            t4 = clock.mark()
            clock.sync()
            if rep < warmup:
                continue
            for k, (s, e) in zip(parts, ((t0, t1), (t1, t2), (t2, t3), (t3, t4))):
                parts[k].append(clock.seconds(s, e))
            for n, ev in events.items():
                fwd = _paired(clock, ev, "f0", "f1")
                bwd = _paired(clock, ev, "b0", "b1")
                if fwd is not None:
                    layer_runs[n].append((fwd, bwd if bwd is not None else float("nan")))
    finally:
        for h in hooks:
            h.remove()
    med = {k: statistics.median(v) / batch for k, v in parts.items()}
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    tf = ("tf32 on" if tf32 else "tf32 off") if dev.type == "cuda" else "fp32"
    profile = DeviceProfile(name=f"{name} (measured: {model_name} {image_size}px, batch {batch}, {tf}, CUDA events)"
                            if dev.type == "cuda" else f"cpu (measured: {model_name} {image_size}px, batch {batch}, "
                            "wall clock)",
                            conv_fwd_s=med["conv_fwd"], conv_bwd_s=med["conv_bwd"], fc_fwd_s=med["fc_fwd"],
                            fc_bwd_s=med["fc_bwd"], update_s_per_param=measure_update_s_per_param(
                                numel=4_000_000 if dev.type == "cuda" else 1_000_000, device=str(dev)))
    layers = []
    for n, m in leaves:
        runs = layer_runs[n]
        if not runs:
            continue
        bwd = [b for _, b in runs if b == b]
        layers.append({"name": n, "kind": type(m).__name__, "part": "conv" if id(m) in conv_names else "fc",
                       "fwd_s": statistics.median(f for f, _ in runs) / batch,
                       "bwd_s": statistics.median(bwd) / batch if bwd else None})
    record = {"device": name, "model": model_name, "image_size": image_size, "batch": batch, "reps": reps,
              "warmup": warmup, "tf32": tf32 if dev.type == "cuda" else None,
              "timer": "cuda events" if dev.type == "cuda" else "perf_counter",
              "note": "seconds per sample, medians; a layer's times include its kernel launches; "
                      "layers called several times per forward are summed per call; bwd_s None: not observable",
              "layers": layers}
    return profile, record


def _paired(clock, ev, start, end) -> float | None:
    """Sum of (start, end) intervals of one layer in one step (a reused module has several)."""
    total, opened = None, None
    for kind, t in ev:
        if kind == start:
            opened = t
        elif kind == end and opened is not None:
            total = (total or 0.0) + clock.seconds(opened, t)
            opened = None
    return total


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv=None) -> int:
    p = _Parser(prog="python -m stanza_core.perf calibrate", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="alexnet", help="zoo model (default alexnet)")
    p.add_argument("--batch", type=int, default=32, help="samples per step (default 32)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--device", default="cuda", help="cuda (default; CUDA events) or cpu (wall clock, for tests)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--no-tf32", action="store_true", help="convolutions in full FP32 (as --exact training)")
    p.add_argument("--out", required=True, help="DeviceProfile JSON to write (and OUT.layers.json beside it)")
    args = p.parse_args(argv)
    prog = "python -m stanza_core.perf calibrate"
    if args.device not in ("cuda", "cpu") and not args.device.startswith("cuda:"):
        print(f"{prog}: error: --device must be cuda or cpu, got {args.device!r}", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"{prog}: error: no CUDA GPU visible (this measures a GPU); --device cpu runs the same code "
              "path with wall-clock timers", file=sys.stderr)
        return 2
    if min(args.batch, args.reps, args.image_size) < 1 or args.warmup < 0:
        print(f"{prog}: error: --batch, --reps, --image-size must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2
    try:
        profile, record = calibrate(args.model, args.batch, args.image_size, args.num_classes, args.device,
                                    args.warmup, args.reps, not args.no_tf32)
    except ValueError as e:  # unknown model, image too small for it
        print(f"{prog}: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(profile.to_dict(), indent=1))
    layers_path = layers_file(out)
    layers_path.write_text(json.dumps(record, indent=1))
    step = profile.step_compute_s(args.batch)
    print(f"{profile.name}: fwd+bwd {step * 1e3:.2f} ms per step of {args.batch} "
          f"({args.batch / step:.0f} samples/s, optimizer excluded); wrote {out} and {layers_path}")
    return 0


def layers_file(out: Path) -> Path:
    """Where the per-layer record of DeviceProfile file `out` goes."""
    return out.with_name(out.stem + ".layers.json")
