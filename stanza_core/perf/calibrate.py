"""`python -m stanza_core.perf calibrate`: measure a DeviceProfile on this machine's GPU.

    python -m stanza_core.perf calibrate --model vgg16 --batch 32 --out v100-vgg16.json

One training step of the model at `--batch` (CONV forward, FC forward and loss, FC backward,
CONV backward; no optimizer) is run `--warmup` times untimed, then `--reps` times timed, each
repetition twice, back to back:

  unhooked  events only around the whole step and at the CONV|FC boundary: the TOTALS. A
            launch-bound step (small batch) is slowed by per-layer events (up to 2.7x on an
            H200: records/h200/SOURCE.md), so only this run gives the step as it runs;
  hooked    the same plus an event pair around every layer's forward and backward (module
            hooks): these only APPORTION each part's unhooked time among its layers.

Medians over the repetitions, divided by the batch, are per-sample times. Both totals (per part
and for the whole step) and their ratio are recorded; when the hooked step was more than 10 %
longer, one line says so. The optimizer step is timed on its own (measure_update_s_per_param).
Two files are written:

  OUT              a DeviceProfile JSON (DeviceProfile.to_dict()) from the UNHOOKED totals:
                   `perf --device OUT`, the explorer and `train --replay-device OUT` read it;
  OUT.layers.json  the per-layer record (format 2): per layer `fwd_s`/`bwd_s` (its share of the
                   unhooked part time, seconds per sample) and `hooked_fwd_s`/`hooked_bwd_s`;
                   `unhooked`, `hooked`, `hooked_over_unhooked`. As a device (`--device
                   OUT.layers.json`), each replayed layer waits its own time (perf/records.py).

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
from ..errors import OneLineParser, command_name
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


PARTS = ("conv_fwd", "fc_fwd", "fc_bwd", "conv_bwd")
NOTICE_ABOVE = 1.10  # hooked step / unhooked step above which calibrate says so


def _step(model, split, x, y, clock) -> tuple:
    """One training step without the optimizer: (start, after conv fwd, after fc fwd + loss,
    after fc bwd, after conv bwd) marks, read after one synchronize."""
    ts = clock.mark()
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
    return ts, t0, t1, t2, t3, t4


def _install_layer_hooks(leaves, events: dict[str, list], clock) -> list:
    """An event before and after every leaf's forward and backward (the hooked run's instrument)."""
    hooks = []
    for n, m in leaves:
        hooks.append(m.register_forward_pre_hook(lambda mod, i, n=n: events[n].append(("f0", clock.mark()))))
        hooks.append(m.register_forward_hook(lambda mod, i, o, n=n: events[n].append(("f1", clock.mark()))))
        hooks.append(m.register_full_backward_pre_hook(lambda mod, g, n=n: events[n].append(("b0", clock.mark()))))
        hooks.append(m.register_full_backward_hook(lambda mod, gi, go, n=n: events[n].append(("b1", clock.mark()))))
    return hooks


def calibrate(model_name: str = "alexnet", batch: int = 32, image_size: int = 224, num_classes: int = 1000,
              device: str = "cuda", warmup: int = 5, reps: int = 20, tf32: bool = True) -> tuple[DeviceProfile, dict]:
    """(DeviceProfile, per-layer record) measured on `device`; see the module docstring.

    Each repetition runs the step twice, back to back: UNHOOKED (marks only around the step and
    at the CONV|FC boundary: these are the totals) and HOOKED (the same marks plus an event pair
    around every layer's forward and backward: these only apportion the totals among layers)."""
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
    x = torch.randn((batch, *shape), device=dev)
    y = torch.randint(0, num_classes, (batch,), device=dev)
    runs = {run: {k: [] for k in (*PARTS, "step")} for run in ("unhooked", "hooked")}
    layer_runs: dict[str, list[tuple[float, float]]] = {n: [] for n, _ in leaves}
    calls: dict[str, int] = {}
    # The first layer's input needs no gradient: torch warns that its backward hook fires
    # on the outputs' gradients, which is what we time there anyway.
    warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
    for rep in range(warmup + reps):
        for run in ("unhooked", "hooked"):
            hooks = _install_layer_hooks(leaves, events, clock) if run == "hooked" else []
            try:
                for v in events.values():
                    v.clear()
                marks = _step(model, split, x, y, clock)
            finally:
                for h in hooks:
                    h.remove()
            if rep < warmup:
                continue
            for k, (s, e) in zip(PARTS, zip(marks[1:-1], marks[2:])):
                runs[run][k].append(clock.seconds(s, e))
            runs[run]["step"].append(clock.seconds(marks[0], marks[-1]))
            if run == "hooked":
                for n, ev in events.items():
                    calls[n] = sum(1 for kind, _ in ev if kind == "f0")
                    fwd = _paired(clock, ev, "f0", "f1")
                    bwd = _paired(clock, ev, "b0", "b1")
                    if fwd is not None:
                        layer_runs[n].append((fwd, bwd if bwd is not None else float("nan")))
    totals = {run: {k: statistics.median(v) for k, v in r.items()} for run, r in runs.items()}
    ratio = {k: totals["hooked"][k] / totals["unhooked"][k] if totals["unhooked"][k] > 0 else None
             for k in totals["hooked"]}
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    tf = ("tf32 on" if tf32 else "tf32 off") if dev.type == "cuda" else "fp32"
    un = {k: v / batch for k, v in totals["unhooked"].items()}
    profile = DeviceProfile(name=f"{name} (measured: {model_name} {image_size}px, batch {batch}, {tf}, CUDA events, "
                            "unhooked)" if dev.type == "cuda" else f"cpu (measured: {model_name} {image_size}px, "
                            f"batch {batch}, wall clock, unhooked)",
                            conv_fwd_s=un["conv_fwd"], conv_bwd_s=un["conv_bwd"], fc_fwd_s=un["fc_fwd"],
                            fc_bwd_s=un["fc_bwd"], update_s_per_param=measure_update_s_per_param(
                                numel=4_000_000 if dev.type == "cuda" else 1_000_000, device=str(dev)))
    layers = []
    for n, m in leaves:
        if not layer_runs[n]:
            continue
        bwd = [b for _, b in layer_runs[n] if b == b]
        layers.append({"name": n, "kind": type(m).__name__, "part": "conv" if id(m) in conv_names else "fc",
                       "calls": calls.get(n, 1), "hooked_fwd_s": statistics.median(f for f, _ in layer_runs[n]) / batch,
                       "hooked_bwd_s": statistics.median(bwd) / batch if bwd else None})
    _apportion(layers, un)
    record = {"format": 2, "device": name, "model": model_name, "image_size": image_size, "num_classes": num_classes,
              "batch": batch, "reps": reps, "warmup": warmup, "tf32": tf32 if dev.type == "cuda" else None,
              "timer": "cuda events" if dev.type == "cuda" else "perf_counter",
              "note": "per-layer fwd_s/bwd_s: seconds per sample, the unhooked part time apportioned by the hooked "
                      "per-layer medians (hooked_*: those medians); a layer's times include its kernel launches; "
                      "a module called several times per forward: its calls summed; bwd_s None: not observable",
              "totals_note": "unhooked/hooked: medians over reps of seconds per step of `batch` samples (parts: "
                             "conv_fwd, fc_fwd with the loss, fc_bwd, conv_bwd; step: from zero_grad to the end of "
                             "the conv backward, no optimizer); hooked_over_unhooked: their ratios",
              "unhooked": totals["unhooked"], "hooked": totals["hooked"], "hooked_over_unhooked": ratio,
              "profile": profile.to_dict(), "layers": layers}
    return profile, record


def _apportion(layers: list[dict], per_sample: dict[str, float]) -> None:
    """fwd_s/bwd_s of each layer: its part's unhooked time (per sample) split in proportion to
    the hooked per-layer medians, so a part's layers sum to the part's unhooked time."""
    for part in ("conv", "fc"):
        for ph in ("fwd", "bwd"):
            rows = [r for r in layers if r["part"] == part]
            hooked = sum(r[f"hooked_{ph}_s"] or 0.0 for r in rows)
            for r in rows:
                h = r[f"hooked_{ph}_s"]
                r[f"{ph}_s"] = None if h is None else (h / hooked * per_sample[f"{part}_{ph}"] if hooked > 0 else 0.0)


def inflation_notice(record: dict) -> str | None:
    """One line when the hooked step was more than 10 % longer than the unhooked one, else None."""
    r = record["hooked_over_unhooked"]["step"]
    if r is None or r <= NOTICE_ABOVE:
        return None
    return (f"note: the per-layer hooks made the step {r:.2f}x longer ({record['hooked']['step'] * 1e3:.2f} ms "
            f"against {record['unhooked']['step'] * 1e3:.2f} ms unhooked); the profile's totals are the unhooked "
            "run's, the hooks only apportion them among layers")


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


_Parser = OneLineParser  # one line, `error: ...`, no usage block


def main(argv=None) -> int:
    p = _Parser(prog=command_name("stanza_core.perf") + " calibrate", description=__doc__.splitlines()[0])
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
    if args.device not in ("cuda", "cpu") and not args.device.startswith("cuda:"):
        print(f"error: --device must be cuda or cpu, got {args.device!r}", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: no CUDA GPU visible (this measures a GPU); --device cpu runs the same code "
              "path with wall-clock timers", file=sys.stderr)
        return 2
    if min(args.batch, args.reps, args.image_size) < 1 or args.warmup < 0:
        print("error: --batch, --reps, --image-size must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2
    try:
        profile, record = calibrate(args.model, args.batch, args.image_size, args.num_classes, args.device,
                                    args.warmup, args.reps, not args.no_tf32)
    except ValueError as e:  # unknown model, image too small for it
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(profile.to_dict(), indent=1))
    layers_path = layers_file(out)
    layers_path.write_text(json.dumps(record, indent=1))
    notice = inflation_notice(record)
    if notice:
        print(notice)
    step = profile.step_compute_s(args.batch)
    print(f"{profile.name}: fwd+bwd {step * 1e3:.2f} ms per step of {args.batch} "
          f"({args.batch / step:.0f} samples/s, optimizer excluded); wrote {out} and {layers_path}")
    return 0


def layers_file(out: Path) -> Path:
    """Where the per-layer record of DeviceProfile file `out` goes."""
    return out.with_name(out.stem + ".layers.json")
