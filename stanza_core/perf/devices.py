"""Compute cost of the CONV and FC parts on one device: measured, or derived from a table.

A `DeviceProfile` gives, per part (conv, fc) and phase (fwd, bwd), seconds per sample, a fixed
device time per call and a floor per call; one call on a batch of b samples takes

    max(call_s, fixed_s + b * per_sample_s)

fixed_s + b x per_sample_s is the device's time (kernel floors plus the work: compute.py; GEMM
work on the secant through the profile's batch and 4x it); call_s is the floor the host sets by launching the call's kernels (or, in
profiles saved before compute model v2, the weight-streaming roofline floor: the same max). A
measured profile has fixed and floor 0, because its per-sample times were taken at a real batch.

Table-derived times: with layer rows, compute model v2.2 (compute.py) costs each layer by kind
(convolutions by FLOP rate, Linear layers as GEMMs at their shape on the device's SMs), with
efficiencies, floors and launch cost fitted to measured steps (the constants below say what was
fitted to what); without layer rows (a hand-made profile):
  forward FLOPs per sample from the profile (torch's FLOP counter, a multiply-add = 2 FLOPs);
  backward = 2 x forward (gradients of inputs and of weights: the usual "fwd+bwd = 3x fwd");
  sustained FLOP/s = vendor peak of the math the framework uses x an efficiency;
  floors: forward streams the part's fp32 weights once (4 bytes/param), backward three times.
Optimizer step: torch.optim.SGD(momentum) (foreach) moves 32 bytes/param (buffer mul_, buffer
add_ of the gradient, weight add_ of the buffer) at the memory-bound rate.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch

from .. import checks
from ..anatomy import Profile
from .rows import V100_V3, row_version
from .compute import part_costs


# Compute model v2.2 constants (compute.py). FITTED by benchmarks/fit_compute_model.py (the header
# of that script and docs/performance-model.md say on which points: measured H200 steps without
# hooks and the published V100 ResNet-50 FP32 figure; the Linear layers' work (no floors) also on
# their long per-layer times where the hooked total agrees with the plain step). Not fitted: mem_efficiency (a prior
# set by hand from the vgg16 records) and the *_bwd_ratio shares (derived by the same script from the per-layer records whose hooked
# total agrees with the plain step: a share within the conv part, never a floor). FITTED_FROM says
# which data each came from; `--check` refits and fails if these drift. Leave-one-model-out and
# cross-GPU checks do not use these values (they saw every model): they refit from INITIAL
# (benchmarks/results/compute_model_fit.json). Efficiencies are shares of the datasheet peaks below.
FITTED: dict[str, float] = {
    "tf32_efficiency": 0.38053,  # TF32 tensor-core convolutions (a100, h100, h200 rows)
    "fp32_efficiency": 0.340038,  # FP32 CUDA-core convolutions on Hopper (h100-fp32, h200-fp32)
    "volta_fp32_efficiency": 0.677899,  # FP32 CUDA-core convolutions on V100 (and a100-fp32: no dual FP32 issue)
    "winograd_factor": 2.03943,  # 3x3 stride-1 convolutions on FP32 CUDA cores
    "conv_half_k": 1.00002,  # reduction length K at which a convolution runs at half its efficiency
    "gemm_efficiency": 0.374903,  # FP32 GEMMs (Linear layers; matmuls stay FP32 by default)
    "tile_exponent": 0.859972,  # operand reuse of a tile shrunk to a small M or N: (r / 64) ** this
    "mem_efficiency": 0.85,  # element-wise layers (ReLU, dropout, residual adds), optimizer step, GEMM roofline
    "reduce_efficiency": 0.54538,  # batch norm and pooling: reductions, strided and scattered access
    "kernel_s": 2.19877e-05,  # device floor per kernel
    "launch_s": 1.389e-05,  # host seconds per kernel launched (eager PyTorch: Python, autograd, driver)
    "tf32_bwd_ratio": 1.1866,  # conv backward seconds per FLOP / forward's, TF32 (derived from records)
    "fp32_bwd_ratio": 0.7045,  # the same on FP32 CUDA cores (Hopper records; also used for V100)
}


# Where each constant came from: the (device row, model) pairs of the data it was fitted on or
# derived from ("h200-fp32", "vgg16": that model's H200 records with TF32 off; "v100", "resnet50":
# a published figure). A constant cannot check a point it came from (Constants.leaks).
Source = tuple[str, str]
H200_MODELS = ("alexnet", "vgg16", "resnet50")
H200_RECORDS: frozenset[Source] = frozenset((d, m) for d in ("h200", "h200-fp32") for m in H200_MODELS)
FITTED_FROM: dict[str, frozenset[Source]] = {
    **{k: H200_RECORDS | {("v100", "resnet50")} for k in FITTED},  # the 24 steps, their Linear layers, V100 RN50 367
    "mem_efficiency": frozenset({("h200", "vgg16"), ("h200-fp32", "vgg16")}),  # set by hand: the vgg16 records' ReLUs reach ~0.88
    "tf32_bwd_ratio": frozenset(("h200", m) for m in H200_MODELS),  # records whose hooked total agrees with the plain step
    "fp32_bwd_ratio": frozenset(("h200-fp32", m) for m in H200_MODELS),
}

# Starting values of every fit that is judged on held-out data (each leave-one-model-out fold, the
# cross-GPU fit): round numbers set by hand, derived from no record and no published figure (no
# sources), so no such fit starts from constants that saw the data it is checked on.
INITIAL: dict[str, float] = {
    "tf32_efficiency": 0.5, "fp32_efficiency": 0.5, "volta_fp32_efficiency": 0.5,  # half the datasheet peak
    "winograd_factor": 2.25,  # F(2x2, 3x3)'s saving in multiplications, 36 / 16 (Lavin & Gray, 2016)
    "conv_half_k": 64.0,  # a reduction of one 8 x 8 tile of channels x taps
    "gemm_efficiency": 0.5, "tile_exponent": 1.0,  # reuse proportional to the tile's r
    "mem_efficiency": 0.8, "reduce_efficiency": 0.5,  # shares of the peak bandwidth
    "kernel_s": 5e-6, "launch_s": 1e-5,  # a few us of device floor, ~10 us of eager dispatch per kernel
    "tf32_bwd_ratio": 1.0, "fp32_bwd_ratio": 1.0,  # backward at the forward's seconds per FLOP
}


class LeakError(ValueError):
    """A constant is asked to check a point of the data it was fitted on or derived from."""


def gpu_of(device: str) -> str:
    """The GPU of a device row: "h200-fp32" -> "h200" (the math mode is a setting, not a device)."""
    return device.split("-")[0]


@dataclasses.dataclass(frozen=True)
class Constants:
    """Compute-model constants (keys of FITTED) with, per key, the (device row, model) pairs of the
    data it was fitted on or derived from (empty: set by hand from no data).

    A point is held out from them by `held`: "model" (no source has its model: leave one model
    out), "gpu" (no source is on its GPU: cross-GPU) or "config" (no source is its device row and
    model: a published figure)."""

    values: dict[str, float]
    sources: dict[str, frozenset[Source]]

    def __post_init__(self):
        if set(self.values) != set(self.sources):
            raise ValueError(f"constants without sources: {sorted(set(self.values) ^ set(self.sources))}")

    def leaks(self, device: str, model: str, held: str) -> list[str]:
        """The keys whose sources hold the point (device row, model) by `held`; [] when held out."""
        same = {"model": lambda d, m: m == model, "gpu": lambda d, m: gpu_of(d) == gpu_of(device),
                "config": lambda d, m: (d, m) == (device, model)}[held]
        return [k for k, src in self.sources.items() if any(same(d, m) for d, m in src)]

    def refuse(self, device: str, model: str, held: str) -> None:
        """Raise LeakError unless the point (device row, model) is held out from every constant by `held`."""
        bad = self.leaks(device, model, held)
        if bad:
            raise LeakError(f"{model} on {device} is not held out by {held}: {', '.join(bad)} came from "
                            f"{sorted(set().union(*(self.sources[k] for k in bad)))}")


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """One row of the device table: vendor peaks and SM count (sourced), efficiencies, floors and
    launch cost (compute model v2.2: fitted, see FITTED; a datasheet-only DeviceSpec inherits the
    fitted constants, and with sms = 0 no wave quantisation)."""

    name: str
    conv_peak_flops: float  # peak FLOP/s of the math PyTorch uses for fp32 convolutions
    fc_peak_flops: float  # peak FLOP/s of the math PyTorch uses for fp32 matmuls
    mem_bytes_per_s: float  # peak memory bandwidth
    conv_efficiency: float  # sustained / peak for large convolutions
    fc_efficiency: float  # sustained / peak for the FC head's GEMMs
    mem_efficiency: float  # achievable / peak memory bandwidth, element-wise layers
    note: str
    winograd_factor: float = 1.0  # 3x3 stride-1 convs: direct FLOPs / the algorithm's (compute.py)
    conv_half_k: float = FITTED["conv_half_k"]  # conv efficiency x K / (K + this)
    reduce_efficiency: float = FITTED["reduce_efficiency"]  # achievable / peak bandwidth, batch norm and pooling
    weight_efficiency: float = 0.0  # unused since compute model v2.1 (Linear layers are GEMMs on the roofline); kept for old callers
    kernel_s: float = FITTED["kernel_s"]  # device seconds per kernel, beside its work
    launch_s: float = FITTED["launch_s"]  # host seconds per kernel launched
    sms: int = 0  # streaming multiprocessors (GEMM wave quantisation, compute.gemm_utilisation); 0: not modelled
    tile_exponent: float = FITTED["tile_exponent"]  # operand-reuse loss of small GEMM tiles (compute.py)
    conv_bwd_ratio: float = 1.0  # conv backward seconds per FLOP / forward's (kernel model 2: kernels.conv_work)
    kernel_model: int = 2  # 2: compute model v2.2's GEMM tiles and conv backward; 3: per-pass convs, chosen tiles (kernels.py)
    conv_dgrad_ratio: float = 1.0  # kernel model 3: conv data gradient seconds per FLOP / forward's at its shape
    conv_dgrad_stride_ratio: float = 1.0  # kernel model 3: the same, strided convolutions, a further factor
    conv_wgrad_ratio: float = 1.0  # kernel model 3: conv weight gradient seconds per FLOP / a saturated forward's
    row_version: str = ""  # the row's constants, e.g. "v100 row v3 (DeepBench kernels)"; "" for a hand-written spec


# Vendor peaks: NVIDIA product datasheets (nvidia.com/en-us/data-center/v100, /a100, /h100,
# /h200): V100 SXM2: 15.7 TFLOP/s FP32, 900 GB/s HBM2. A100 SXM4 80 GB: 19.5 TFLOP/s FP32,
# 156 TFLOP/s TF32 tensor (dense), 2039 GB/s. H100 SXM5: 67 TFLOP/s FP32, 494.7 TFLOP/s TF32
# tensor (dense; the datasheet's 989 is with sparsity), 3350 GB/s. H200 SXM: the same GH100 chip
# and peaks as the H100 SXM (67 / 989 sparse TF32), 141 GB HBM3e at 4.8 TB/s. PyTorch runs fp32
# convolutions in TF32 on Ampere and later by default (torch.backends.cudnn.allow_tf32 = True)
# and fp32 matmuls in full FP32 (torch.backends.cuda.matmul.allow_tf32 = False since 1.12):
# hence the two peaks. "-fp32" rows: the same GPUs with TF32 off (--exact), convolutions on
# FP32 CUDA cores. SM counts (NVIDIA architecture whitepapers: Tesla V100 (Volta) 80 SMs; A100
# (Ampere GA100) 108 SMs; H100 SXM5 (Hopper GH100) 132 SMs; the H200 SXM is the same GH100
# configuration, 132 SMs, as the measured H200 reported, stanza_core/perf/records/h200/SOURCE.md).
#   name: (conv peak, GEMM peak, bandwidth, conv math: FITTED["<math>_efficiency"], note, SMs)
DATASHEETS: dict[str, tuple[float, float, float, str, str, int]] = {
    "v100": (15.7e12, 15.7e12, 900e9, "volta_fp32", "V100 SXM2 (EC2 p3): FP32 CUDA cores for convs and matmuls", 80),
    "a100": (156e12, 19.5e12, 2039e9, "tf32", "A100 SXM4 80 GB: convs on TF32 tensor cores (implicit GEMM), matmuls FP32", 108),
    "h100": (494.7e12, 67e12, 3350e9, "tf32", "H100 SXM5: convs on TF32 tensor cores (implicit GEMM), matmuls FP32", 132),
    "h200": (494.7e12, 67e12, 4800e9, "tf32", "H200 SXM: convs on TF32 tensor cores (implicit GEMM), matmuls FP32", 132),
    "a100-fp32": (19.5e12, 19.5e12, 2039e9, "volta_fp32", "A100 SXM4 80 GB, TF32 off: FP32 CUDA cores", 108),
    "h100-fp32": (67e12, 67e12, 3350e9, "fp32", "H100 SXM5, TF32 off: FP32 CUDA cores", 132),
    "h200-fp32": (67e12, 67e12, 4800e9, "fp32", "H200 SXM, TF32 off: FP32 CUDA cores", 132),
}


def device_spec(name: str, fitted: dict[str, float] = FITTED) -> DeviceSpec:
    """The table row `name` (a DATASHEETS key) with the compute model's constants `fitted`."""
    conv_peak, fc_peak, mem, math_mode, note, sms = DATASHEETS[name]
    tf32 = math_mode == "tf32"
    return DeviceSpec(name, conv_peak, fc_peak, mem, fitted[f"{math_mode}_efficiency"], fitted["gemm_efficiency"],
                      fitted["mem_efficiency"], note, 1.0 if tf32 else fitted["winograd_factor"],
                      conv_half_k=fitted["conv_half_k"], reduce_efficiency=fitted["reduce_efficiency"],
                      kernel_s=fitted["kernel_s"], launch_s=fitted["launch_s"], sms=sms,
                      tile_exponent=fitted["tile_exponent"],
                      conv_bwd_ratio=fitted["tf32_bwd_ratio" if tf32 else "fp32_bwd_ratio"], row_version=row_version(name))


def v100_v3_spec(kernel: dict[str, float] = V100_V3, step: dict[str, float] = FITTED) -> DeviceSpec:
    """The V100 row of compute model v3 (rows.py): the datasheet, the kernel constants `kernel`
    (fitted to DeepBench's V100 kernels) and the step overheads of `step` (the H200 fit's)."""
    conv_peak, fc_peak, mem, _, note, sms = DATASHEETS["v100"]
    k = kernel
    return DeviceSpec("v100", conv_peak, fc_peak, mem, k["conv_efficiency"], k["gemm_efficiency"], step["mem_efficiency"],
                      note + "; kernels fitted to DeepBench", k["winograd_factor"], conv_half_k=k["conv_half_k"],
                      reduce_efficiency=step["reduce_efficiency"], kernel_s=k["kernel_s"], launch_s=step["launch_s"],
                      sms=sms, tile_exponent=k["tile_exponent"], kernel_model=3, conv_dgrad_ratio=k["conv_dgrad_ratio"],
                      conv_dgrad_stride_ratio=k["conv_dgrad_stride_ratio"], conv_wgrad_ratio=k["conv_wgrad_ratio"],
                      row_version=row_version("v100"))


# The table: every datasheet row at compute model v2.2, except the V100 at v3; its v2.2 row stays
# reachable as "v100-v2" (the row the stored replayed runs were replayed with).
DEVICE_TABLE: dict[str, DeviceSpec] = {name: device_spec(name) for name in DATASHEETS}
DEVICE_TABLE["v100-v2"] = dataclasses.replace(DEVICE_TABLE["v100"], name="v100-v2", row_version=row_version("v100-v2"))
DEVICE_TABLE["v100"] = v100_v3_spec()
SGD_MOMENTUM_BYTES_PER_PARAM = 32  # foreach SGD(momentum): buffer mul_ (8), buffer add_ grad (12), weight add_ (12)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceProfile:
    name: str  # what it describes, e.g. "v100 (table)" or "cpu (measured, batch 32)"
    conv_fwd_s: float  # seconds per sample, CONV body forward
    conv_bwd_s: float  # seconds per sample, CONV body backward
    fc_fwd_s: float  # seconds per sample, FC head forward
    fc_bwd_s: float  # seconds per sample, FC head backward
    conv_fwd_call_s: float = 0.0  # floor of one CONV forward call (host launches; old profiles: weight streaming)
    conv_bwd_call_s: float = 0.0
    fc_fwd_call_s: float = 0.0  # floor of one FC forward call
    fc_bwd_call_s: float = 0.0
    conv_fwd_fixed_s: float = 0.0  # device seconds of one CONV forward call beside b x conv_fwd_s (kernel floors)
    conv_bwd_fixed_s: float = 0.0
    fc_fwd_fixed_s: float = 0.0  # the same for the FC head (kernel floors, weight streaming)
    fc_bwd_fixed_s: float = 0.0
    step_overhead_s: float = 0.0  # fixed seconds per step per node (data loading, launches)
    update_s_per_param: float = 0.0  # optimizer step, seconds per parameter updated
    row_version: str = ""  # a table row's version (rows.py), e.g. "v100 row v3 (DeepBench V100 kernels)"; "" otherwise

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in ("name", "row_version"):
                continue
            checks.number(f"DeviceProfile.{f.name}", v, at_least=0)

    def time_s(self, part: str, phase: str, batch: int) -> float:
        """Seconds of one call of `part` ("conv"/"fc") in `phase` ("fwd"/"bwd") on `batch` samples:
        max(floor, fixed + batch x per-sample) (module docstring)."""
        key = f"{part}_{phase}"
        device = getattr(self, f"{key}_fixed_s") + batch * getattr(self, f"{key}_s")
        return max(getattr(self, f"{key}_call_s"), device)

    def step_compute_s(self, batch: int) -> float:
        """Forward+backward of the whole model on `batch` samples: the t_compute of
        `emulated_bandwidth` when both machines run the same step."""
        return sum(self.time_s(p, ph, batch) for p in ("conv", "fc") for ph in ("fwd", "bwd"))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_profile(cls, profile: Profile, *, step_overhead_s: float = 0.0,
                     update_s_per_param: float = 0.0, name: str | None = None) -> "DeviceProfile":
        """Per-sample times measured by `profile_model(..., time=True)` (on whatever device)."""
        parts = (profile.conv.fwd_s, profile.conv.bwd_s, profile.fc.fwd_s, profile.fc.bwd_s)
        if any(v is None for v in parts):
            raise ValueError(f"profile of {profile.model} has no timings; build it with profile_model(..., time=True)")
        return cls(name=name or f"{profile.timed_on or 'measured'} (measured, batch {profile.batch_size})",
                   conv_fwd_s=parts[0], conv_bwd_s=parts[1], fc_fwd_s=parts[2], fc_bwd_s=parts[3],
                   step_overhead_s=step_overhead_s, update_s_per_param=update_s_per_param)

    @classmethod
    def from_table(cls, device: str, profile: Profile, *, step_overhead_s: float = 0.0) -> "DeviceProfile":
        """Per-sample times of `profile`'s model on a table device (see the module docstring)."""
        key = checks.one_of("device", device.lower(), DEVICE_TABLE)
        return cls.from_spec(DEVICE_TABLE[key], profile, step_overhead_s=step_overhead_s, name=f"{key} (table)")

    @classmethod
    def from_spec(cls, s: "DeviceSpec", profile: Profile, *, step_overhead_s: float = 0.0,
                  name: str | None = None) -> "DeviceProfile":
        """Times of `profile`'s model on any DeviceSpec, e.g. one written from a datasheet. With
        layer rows: compute model v2.2 (compute.py: work per sample, kernel floors, host launch
        floor); without them (a hand-made profile): the part FLOPs at the conv/GEMM rates."""
        conv_rate, fc_rate = s.conv_peak_flops * s.conv_efficiency, s.fc_peak_flops * s.fc_efficiency
        mem = s.mem_bytes_per_s * s.mem_efficiency
        parts = part_costs(profile, s) or {
            "conv_fwd_s": profile.conv.flops / conv_rate, "conv_bwd_s": 2 * profile.conv.flops / conv_rate,
            "fc_fwd_s": profile.fc.flops / fc_rate, "fc_bwd_s": 2 * profile.fc.flops / fc_rate,
            "conv_fwd_call_s": 4 * profile.conv.params / mem, "conv_bwd_call_s": 12 * profile.conv.params / mem,
            "fc_fwd_call_s": 4 * profile.fc.params / mem, "fc_bwd_call_s": 12 * profile.fc.params / mem}
        return cls(name=name or f"{s.name} (datasheet)", **parts, step_overhead_s=step_overhead_s,
                   update_s_per_param=SGD_MOMENTUM_BYTES_PER_PARAM / mem, row_version=s.row_version)


def measure_update_s_per_param(numel: int = 4_000_000, reps: int = 5, device: str = "cpu") -> float:
    """Seconds per parameter of one torch.optim.SGD(momentum=0.9) step here (median of reps),
    for a measured DeviceProfile: the optimizer step is not in profile_model's timings."""
    p = torch.zeros(numel, device=device, requires_grad=True)
    p.grad = torch.ones_like(p)
    opt = torch.optim.SGD([p], lr=0.01, momentum=0.9, weight_decay=5e-4)
    opt.step()  # creates the momentum buffer
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        opt.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] / numel
