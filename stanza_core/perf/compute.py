"""Layer-by-layer compute cost on a GPU, calibrated against published training throughput.

Each layer of a profile (`LayerRow`) is costed by kind, per sample:

  3x3 stride-1 convolution   FLOPs / (conv peak x conv efficiency x algorithmic factor)
                             cuDNN runs these with Winograd/FFT on fp32 CUDA cores: fewer
                             multiplications than the direct FLOP count (the factor); tensor-
                             core (TF32) convolutions run implicit GEMM: factor 1
  other convolution          FLOPs / (conv peak x conv efficiency)
  Linear (GEMM)              FLOPs / (GEMM peak x GEMM efficiency), plus the part-level floor of
                             streaming the weights (devices.py)
  batch norm, ReLU, pooling, values moved x 4 bytes / (memory bandwidth x memory efficiency):
  dropout                    memory-bound work the FLOP count leaves out (MEM_PASSES)
backward = 2 x forward for GEMM-like layers (input and weight gradients); memory-bound layers
use their own backward traffic. The optimizer moves 20 bytes per parameter (devices.py).

A device is its datasheet (peaks, bandwidth) plus four efficiencies. The efficiencies and the
algorithmic factor of fp32 CUDA-core devices were fitted to published V100 measurements
(FIT_FIGURES); a new device needs only its datasheet numbers (`DeviceSpec(...)`) and inherits
them. Every figure, the fit and the held-out errors: docs/performance-model.md.
"""
from __future__ import annotations

import dataclasses

from ..anatomy import DTYPE_BYTES, LayerRow, Profile

# Values moved per value of input+output (LayerRow.io_values), (forward, backward), for the
# memory-bound layers. io_values counts each element's input and output once, so an
# element-wise forward that reads x and writes y moves 1.0 x io_values.
MEM_PASSES: dict[str, tuple[float, float]] = {
    "BatchNorm1d": (1.5, 2.5),  # fwd: read x for the statistics, read again, write y; bwd: x, dy twice, write dx
    "BatchNorm2d": (1.5, 2.5),
    "ReLU": (1.0, 1.5),  # fwd: read, write; bwd: read y and dy, write dx
    "MaxPool2d": (1.0, 1.5),  # bwd: read dy and the indices, write (scatter) dx
    "AvgPool2d": (1.0, 1.0),
    "AdaptiveAvgPool2d": (1.0, 1.0),
    "Dropout": (1.5, 1.5),  # the mask is read once more each way
    "SampleDropout": (1.5, 1.5),
}
FREE_KINDS = {"Flatten", "Identity", "Unflatten"}  # views: no data moved
DEFAULT_PASSES = (1.0, 1.5)  # any other parameterless layer: treated as element-wise


def is_winograd(row: LayerRow) -> bool:
    """3x3 stride-1 convolutions: where cuDNN's Winograd/FFT algorithms apply."""
    return row.kernel == 9 and row.stride == 1


def layer_seconds(row: LayerRow, spec) -> tuple[float, float]:
    """(forward, backward) seconds per sample of one layer on DeviceSpec `spec`."""
    if row.kernel:  # a convolution
        factor = spec.winograd_factor if is_winograd(row) else 1.0
        fwd = row.flops / (spec.conv_peak_flops * spec.conv_efficiency * factor)
        return fwd, 2 * fwd
    if row.flops:  # Linear and other GEMM-counted layers
        fwd = row.flops / (spec.fc_peak_flops * spec.fc_efficiency)
        return fwd, 2 * fwd
    if row.kind in FREE_KINDS:
        return 0.0, 0.0
    f, b = MEM_PASSES.get(row.kind, DEFAULT_PASSES)
    io = row.io_values or 2 * row.out_values  # profiles saved before io_values existed
    mem = spec.mem_bytes_per_s * spec.mem_efficiency
    return f * io * DTYPE_BYTES / mem, b * io * DTYPE_BYTES / mem


def layer_times(profile: Profile, spec) -> list[dict]:
    """Per-layer forward/backward seconds per sample, in forward order (name, part, kind, fwd_s, bwd_s)."""
    out = []
    for r in profile.layers:
        f, b = layer_seconds(r, spec)
        out.append({"name": r.name, "part": r.part, "kind": r.kind, "fwd_s": f, "bwd_s": b})
    return out


def part_seconds(profile: Profile, spec) -> dict[str, float] | None:
    """{"conv_fwd_s", "conv_bwd_s", "fc_fwd_s", "fc_bwd_s"} per sample from the layer rows, or
    None when the profile has no layer rows (the caller then falls back to part FLOPs)."""
    if not profile.layers:
        return None
    sums = {f"{p}_{ph}_s": 0.0 for p in ("conv", "fc") for ph in ("fwd", "bwd")}
    for t in layer_times(profile, spec):
        part = t["part"] if t["part"] in ("conv", "fc") else "conv"
        sums[f"{part}_fwd_s"] += t["fwd_s"]
        sums[f"{part}_bwd_s"] += t["bwd_s"]
    return sums


# ---------------------------------------------------------------------------------------------
# Published single-GPU training throughput (images/s, 224x224, fp32 or TF32 as PyTorch runs
# it by default). Sources in docs/performance-model.md. "update": whether the measured step
# includes the optimizer step (a full training iteration) or only forward+backward.


@dataclasses.dataclass(frozen=True)
class Figure:
    device: str  # table key
    model: str  # zoo name
    batch: int  # per-GPU batch of the measurement
    images_per_s: float
    update: bool  # the measured time includes the optimizer step
    source: str  # short name of the source (docs/performance-model.md lists them)
    fit: bool  # used to fit the parameters (False: held out)


FIGURES: tuple[Figure, ...] = (
    # NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5 README (NGC 21.03): 1 GPU training
    Figure("v100", "resnet50", 256, 367.0, True, "DLE-RN50-PyT (DGX-1 V100 16 GB, FP32)", True),
    Figure("v100", "resnet50", 256, 356.0, True, "DLE-RN50-PyT (DGX-1 V100 32 GB, FP32)", False),
    Figure("a100", "resnet50", 256, 938.0, True, "DLE-RN50-PyT (DGX A100 80 GB, TF32)", False),
    # u39kun/deep-learning-benchmark README: V100 (AWS p3), batch 16, forward+backward only
    Figure("v100", "vgg16", 16, 16 / 83.5e-3, False, "u39kun PyTorch 0.3 (V100 p3, FP32)", True),
    Figure("v100", "vgg16", 16, 16 / 71.7e-3, False, "u39kun TensorFlow 1.5 (V100, FP32)", False),
    # Lambda, "RTX 2080 Ti Deep Learning Benchmarks" (TensorFlow 1.12, FP32, synthetic data)
    Figure("v100", "resnet50", 64, 405.0, True, "Lambda TF 1.12 (V100, FP32)", False),
)
