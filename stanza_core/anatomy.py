"""Layer anatomy: parameters, forward FLOPs and output size of every layer, CONV vs FC totals.

FLOPs are counted by torch.utils.flop_counter.FlopCounterMode (a multiply-add is 2 FLOPs; only
matmul/conv/attention-class ops are counted, so ReLU, pooling and additions count 0).
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time as _time
from typing import Any

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from .split import module_device, split_model
from .batchnorm import bn_channels

DTYPE_BYTES = 4  # fp32 activations and parameters
LABEL_BYTES = 8  # int64 class labels sent with the activations


@dataclasses.dataclass
class LayerRow:
    name: str  # qualified module name, e.g. "features.0"
    kind: str  # module class, e.g. "Conv2d"
    part: str  # "conv" or "fc"
    params: int
    flops: float  # forward FLOPs per sample
    out_values: int  # output values per sample
    out_bytes: int  # output bytes per sample (fp32)
    io_values: int = 0  # input + output values per sample, summed over every call (a ReLU may be reused)
    calls: int = 1  # forward calls of the module per model forward
    kernel: int = 0  # convolutions: kernel height x width (e.g. 9 for 3x3); 0 otherwise
    stride: int = 0  # convolutions: product of the strides (1 for stride 1); 0 otherwise


@dataclasses.dataclass
class PartTotals:
    params: int
    flops: float  # forward FLOPs per sample
    fwd_s: float | None = None  # measured forward seconds per sample (time=True)
    bwd_s: float | None = None  # measured backward seconds per sample (time=True)


@dataclasses.dataclass
class Profile:
    model: str
    input_shape: tuple[int, int, int]
    batch_size: int
    boundary: str  # first FC-side module
    boundary_values: int  # values per sample crossing the cut
    conv: PartTotals
    fc: PartTotals
    layers: list[LayerRow]
    timed_on: str | None = None  # device the times were measured on
    conv_shapes: list[list[int]] | None = None  # CONV parameter shapes, in parameters() order (PowerSGD sizes)
    bn_conv_channels: int = 0  # batch-norm channels of each part (their global statistics are traffic)
    bn_fc_channels: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)  # the split's warnings (e.g. FC side compute-heavy)

    @property
    def fc_compute_heavy(self) -> bool:
        """The FC side carries most of the forward FLOPs: this cut is not layer separation."""
        return self.fc_flop_share() > 0.5

    @property
    def boundary_bytes(self) -> int:
        return self.boundary_values * DTYPE_BYTES

    @property
    def params(self) -> int:
        return self.conv.params + self.fc.params

    def fc_param_share(self) -> float:
        return self.fc.params / self.params

    def fc_flop_share(self) -> float:
        return self.fc.flops / (self.conv.flops + self.fc.flops)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["boundary_bytes"] = self.boundary_bytes
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Profile":
        d = {k: v for k, v in d.items() if k != "boundary_bytes"}
        d["input_shape"] = tuple(d["input_shape"])
        d["conv"], d["fc"] = PartTotals(**d["conv"]), PartTotals(**d["fc"])
        d["layers"] = [LayerRow(**r) for r in d["layers"]]
        return cls(**d)


def _leaf_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if n and not list(m.children())]


def _flops(module: nn.Module, x: torch.Tensor) -> tuple[float, dict[str, float], torch.Tensor]:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        y = module(x)
    root = type(module).__name__ + "."
    per_module = {k[len(root):]: float(sum(v.values())) for k, v in counter.get_flop_counts().items()
                  if k.startswith(root)}
    return float(counter.get_total_flops()), per_module, y


def _median_time(fn, reps: int, setup=None) -> float:
    """Median seconds of fn(state) over reps calls; setup() (untimed) makes each call's state."""
    fn(setup() if setup else None)  # warm-up: allocator, kernels, lazy init
    times = []
    for _ in range(reps):
        state = setup() if setup else None
        t0 = _time.perf_counter()
        fn(state)
        times.append(_time.perf_counter() - t0)
    return statistics.median(times)


def _time_parts(split, x: torch.Tensor, reps: int) -> tuple[float, float, float, float]:
    """Median forward and backward seconds of the CONV and FC parts on batch x (train mode).

    A backward is timed on its own, after an untimed forward that built its graph."""
    sync = torch.cuda.synchronize if x.device.type == "cuda" else (lambda: None)
    with torch.no_grad():
        a = split.conv(x)

    def forward(part, inp):
        def run(_):
            with torch.no_grad():
                part(inp)
            sync()
        return run

    def graph(part, inp, leaf):
        def build():
            i = inp.detach().requires_grad_(True) if leaf else inp
            out = part(i)
            sync()
            return out
        return build

    def backward(out):
        out.backward(torch.ones_like(out))
        sync()

    cf = _median_time(forward(split.conv, x), reps)
    cb = _median_time(backward, reps, graph(split.conv, x, False))
    ff = _median_time(forward(split.fc, a), reps)
    fb = _median_time(backward, reps, graph(split.fc, a, True))
    return cf, cb, ff, fb


def profile_model(model: nn.Module, input_shape=(3, 224, 224), batch_size: int = 32, time: bool = False,
                  *, name: str | None = None, boundary: str | None = None, device: str = "cpu",
                  reps: int = 5) -> Profile:
    """Per-layer rows and CONV/FC totals of `model` at `input_shape` (C, H, W).

    With time=True, also the median forward and backward seconds per sample of each part,
    measured in train mode on `device` over `reps` repetitions at `batch_size`."""
    input_shape = tuple(int(v) for v in input_shape)
    if len(input_shape) != 3 or min(input_shape) < 1:
        raise ValueError(f"input_shape must be (C, H, W) with positive sizes, got {input_shape}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    split = split_model(model, boundary, input_shape=input_shape, batch_size=batch_size)
    conv_names = {n for n, _ in split.conv.named_parameters()}
    was_training = model.training
    model.eval()
    x = torch.zeros((1, *input_shape), device=module_device(model))  # a meta-built model profiles on meta
    outputs: dict[str, int] = {}
    io: dict[str, list[int]] = {}  # name -> [input+output values summed over calls, calls]

    def record(n, i, o):
        outputs[n] = o[0].numel()
        t = io.setdefault(n, [0, 0])
        t[0] += sum(v[0].numel() for v in i if isinstance(v, torch.Tensor)) + o[0].numel()
        t[1] += 1
    hooks = [m.register_forward_hook(lambda mod, i, o, n=n: record(n, i, o)) for n, m in _leaf_modules(model)]
    try:
        _, per_module, _ = _flops(model, x)
    finally:
        for h in hooks:
            h.remove()
    rows = []
    for n, m in _leaf_modules(model):
        if n not in outputs:  # defined but unused by forward
            continue
        own = [f"{n}.{p}" for p, _ in m.named_parameters()]
        part = "conv" if own and all(p in conv_names for p in own) else ("fc" if own else None)
        conv = isinstance(m, nn.modules.conv._ConvNd)
        rows.append(LayerRow(n, type(m).__name__, part or "", sum(p.numel() for p in m.parameters()),
                             per_module.get(n, 0.0), outputs[n], outputs[n] * DTYPE_BYTES, io[n][0], io[n][1],
                             math.prod(m.kernel_size) if conv else 0, math.prod(m.stride) if conv else 0))
    # Parameterless layers take the part of the layer before them (ReLU after a conv is CONV).
    fc_started = False
    for r in rows:
        fc_started = fc_started or r.part == "fc" or r.name == split.boundary or r.name.startswith(split.boundary + ".")
        r.part = "fc" if fc_started else "conv"
    with torch.no_grad():
        conv_flops, _, a = _flops(split.conv, x)
        fc_flops, _, _ = _flops(split.fc, a)
    conv = PartTotals(sum(p.numel() for p in split.conv.parameters()), conv_flops)
    fc = PartTotals(sum(p.numel() for p in split.fc.parameters()), fc_flops)
    timed_on = None
    if time:
        model.train()
        model.to(device)
        xb = torch.randn((batch_size, *input_shape), device=device)
        cf, cb, ff, fb = _time_parts(split, xb, reps)
        model.zero_grad(set_to_none=True)
        model.to("cpu")
        conv.fwd_s, conv.bwd_s = cf / batch_size, cb / batch_size
        fc.fwd_s, fc.bwd_s = ff / batch_size, fb / batch_size
        timed_on = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
    model.train(was_training)
    return Profile(name or type(model).__name__.lower(), input_shape, batch_size, split.boundary,
                   a.numel(), conv, fc, rows, timed_on, [list(p.shape) for p in split.conv.parameters()],
                   bn_channels(split.conv), bn_channels(split.fc), list(split.notes))
