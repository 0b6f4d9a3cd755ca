"""Compute cost of the CONV and FC parts on one device: measured, or derived from a table.

A `DeviceProfile` gives, per part (conv, fc) and phase (fwd, bwd), seconds per sample and a
floor per call; one call on a batch of b samples takes `max(call_s, b * per_sample_s)`: a
roofline (the part is compute-bound at large b, bound by streaming its weights at small b).
A measured profile has floors of 0, because its per-sample times were taken at a real batch.

Table-derived times: with layer rows, each layer is costed by kind (compute.py: 3x3 stride-1
convolutions with an algorithmic factor, other convolutions, GEMMs, memory-bound batch norm /
ReLU / pooling by bytes moved), with efficiencies fitted to published measurements; without
layer rows (a hand-made profile):
  forward FLOPs per sample from the profile (torch's FLOP counter, a multiply-add = 2 FLOPs);
  backward = 2 x forward (gradients of inputs and of weights: the usual "fwd+bwd = 3x fwd");
  sustained FLOP/s = vendor peak of the math the framework uses x an efficiency;
  floors: forward streams the part's fp32 weights once (4 bytes/param), backward three times
  (read W for the input gradient, read and write the accumulated weight gradient);
  optimizer step: SGD with momentum moves 20 bytes/param (read w, g, v; write w, v).
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch

from ..anatomy import Profile


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """One row of the device table: vendor peaks (sourced) and efficiencies (assumptions)."""

    name: str
    conv_peak_flops: float  # peak FLOP/s of the math PyTorch uses for fp32 convolutions
    fc_peak_flops: float  # peak FLOP/s of the math PyTorch uses for fp32 matmuls
    mem_bytes_per_s: float  # peak memory bandwidth
    conv_efficiency: float  # assumption: sustained / peak for the conv body
    fc_efficiency: float  # assumption: sustained / peak for the FC head when compute-bound
    mem_efficiency: float  # assumption: achievable / peak memory bandwidth
    note: str
    winograd_factor: float = 1.0  # 3x3 stride-1 convs: direct FLOPs / the algorithm's (compute.py)


# Vendor peaks: NVIDIA product datasheets (nvidia.com/en-us/data-center/v100, /a100, /h100):
# V100 SXM2: 15.7 TFLOP/s FP32, 900 GB/s HBM2. A100 SXM4 80 GB: 19.5 TFLOP/s FP32, 156 TFLOP/s
# TF32 tensor (dense), 2039 GB/s. H100 SXM5: 67 TFLOP/s FP32, 494.7 TFLOP/s TF32 tensor (dense;
# the datasheet's 989 is with sparsity), 3350 GB/s. PyTorch runs fp32 convolutions in TF32 on
# Ampere and later by default (torch.backends.cudnn.allow_tf32 = True) and fp32 matmuls in
# full FP32 (torch.backends.cuda.matmul.allow_tf32 = False since 1.12): hence the two peaks.
# "-fp32" rows: the same GPUs with TF32 off (--exact), convolutions on FP32 CUDA cores.
#
# Efficiencies (compute.py; fit and figures in docs/performance-model.md):
#   FP32 CUDA-core conv/GEMM efficiency 0.66 and 3x3 algorithmic factor 1.95: FITTED to
#     published V100 training throughput (benchmarks/fit_compute_model.py); a100-fp32 and
#     h100-fp32 inherit them (datasheet-only rows: no figure of theirs was found);
#   memory efficiency 0.80: prior (STREAM-like share of HBM bandwidth), not fitted;
#   TF32 tensor-core conv efficiency 0.25 (A100) / 0.20 (H100): priors kept from the
#     uncalibrated table; the A100 figure is held out, no H100 fp32/TF32 figure was found.
FP32_EFFICIENCY, WINOGRAD_FACTOR, MEM_EFFICIENCY = 0.66, 1.95, 0.80
DEVICE_TABLE: dict[str, DeviceSpec] = {
    "v100": DeviceSpec("v100", 15.7e12, 15.7e12, 900e9, FP32_EFFICIENCY, FP32_EFFICIENCY, MEM_EFFICIENCY,
                       "V100 SXM2 (EC2 p3): FP32 CUDA cores for convs and matmuls", WINOGRAD_FACTOR),
    "a100": DeviceSpec("a100", 156e12, 19.5e12, 2039e9, 0.25, FP32_EFFICIENCY, MEM_EFFICIENCY,
                       "A100 SXM4 80 GB: convs on TF32 tensor cores (implicit GEMM), matmuls FP32"),
    "h100": DeviceSpec("h100", 494.7e12, 67e12, 3350e9, 0.20, FP32_EFFICIENCY, MEM_EFFICIENCY,
                       "H100 SXM5: convs on TF32 tensor cores (implicit GEMM), matmuls FP32"),
    "a100-fp32": DeviceSpec("a100-fp32", 19.5e12, 19.5e12, 2039e9, FP32_EFFICIENCY, FP32_EFFICIENCY,
                            MEM_EFFICIENCY, "A100 SXM4 80 GB, TF32 off: FP32 CUDA cores", WINOGRAD_FACTOR),
    "h100-fp32": DeviceSpec("h100-fp32", 67e12, 67e12, 3350e9, FP32_EFFICIENCY, FP32_EFFICIENCY,
                            MEM_EFFICIENCY, "H100 SXM5, TF32 off: FP32 CUDA cores", WINOGRAD_FACTOR),
}
SGD_MOMENTUM_BYTES_PER_PARAM = 20  # read weight, grad, momentum; write weight, momentum (fp32)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceProfile:
    name: str  # what it describes, e.g. "v100 (table)" or "cpu (measured, batch 32)"
    conv_fwd_s: float  # seconds per sample, CONV body forward
    conv_bwd_s: float  # seconds per sample, CONV body backward
    fc_fwd_s: float  # seconds per sample, FC head forward
    fc_bwd_s: float  # seconds per sample, FC head backward
    conv_fwd_call_s: float = 0.0  # floor of one CONV forward call (weight streaming)
    conv_bwd_call_s: float = 0.0
    fc_fwd_call_s: float = 0.0  # floor of one FC forward call (weights read once)
    fc_bwd_call_s: float = 0.0
    step_overhead_s: float = 0.0  # fixed seconds per step per node (data loading, launches)
    update_s_per_param: float = 0.0  # optimizer step, seconds per parameter updated

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "name":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"DeviceProfile.{f.name} must be a finite number >= 0, got {v!r}")

    def time_s(self, part: str, phase: str, batch: int) -> float:
        """Seconds of one call of `part` ("conv"/"fc") in `phase` ("fwd"/"bwd") on `batch` samples."""
        per_sample = getattr(self, f"{part}_{phase}_s")
        return max(getattr(self, f"{part}_{phase}_call_s"), batch * per_sample)

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
        key = device.lower()
        if key not in DEVICE_TABLE:
            raise ValueError(f"unknown device {device!r}; expected one of: {', '.join(DEVICE_TABLE)}")
        return cls.from_spec(DEVICE_TABLE[key], profile, step_overhead_s=step_overhead_s, name=f"{key} (table)")

    @classmethod
    def from_spec(cls, s: "DeviceSpec", profile: Profile, *, step_overhead_s: float = 0.0,
                  name: str | None = None) -> "DeviceProfile":
        """Per-sample times of `profile`'s model on any DeviceSpec, e.g. one written from a
        datasheet. With layer rows: the calibrated layer-by-layer model (compute.py); without
        them (a hand-made profile): the part FLOPs at the conv/GEMM rates."""
        from .compute import part_seconds

        conv_rate, fc_rate = s.conv_peak_flops * s.conv_efficiency, s.fc_peak_flops * s.fc_efficiency
        mem = s.mem_bytes_per_s * s.mem_efficiency
        parts = part_seconds(profile, s) or {
            "conv_fwd_s": profile.conv.flops / conv_rate, "conv_bwd_s": 2 * profile.conv.flops / conv_rate,
            "fc_fwd_s": profile.fc.flops / fc_rate, "fc_bwd_s": 2 * profile.fc.flops / fc_rate}
        return cls(name=name or f"{s.name} (datasheet)", **parts,
                   conv_fwd_call_s=4 * profile.conv.params / mem, conv_bwd_call_s=12 * profile.conv.params / mem,
                   fc_fwd_call_s=4 * profile.fc.params / mem, fc_bwd_call_s=12 * profile.fc.params / mem,
                   step_overhead_s=step_overhead_s, update_s_per_param=SGD_MOMENTUM_BYTES_PER_PARAM / mem)


def resolve_device(device, profile: Profile) -> DeviceProfile:
    """A Cluster's device (table name or DeviceProfile) as a DeviceProfile for `profile`."""
    return device if isinstance(device, DeviceProfile) else DeviceProfile.from_table(device, profile)


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
