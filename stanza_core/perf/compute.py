"""Layer-by-layer compute cost of a training step on a GPU (compute model v2).

Each layer of a profile (`LayerRow`) costs, per call on a batch of b samples, in each phase:

  device   kernels x kernel floor + weight streaming  +  b x work per sample
  host     kernels x launch cost (the CPU issuing them: Python, autograd, driver)

Work per sample, by kind:
  convolution       FLOPs / (conv peak x conv efficiency x size factor x algorithmic factor)
                    size factor K / (K + conv_half_k), K = FLOPs / (2 x output values) the
                    reduction length of the implicit GEMM (C_in x kernel area): small-channel
                    convolutions fill the math units badly. Algorithmic factor: 3x3 stride-1
                    convolutions on FP32 CUDA cores run Winograd/FFT (fewer multiplications than
                    the direct count); tensor-core (TF32) convolutions run implicit GEMM: 1
  Linear (GEMM)     FLOPs / (GEMM peak x GEMM efficiency); its floor also streams the weights
                    (forward reads W, backward reads W and writes dW) at bandwidth x weight efficiency
  ReLU, dropout     values moved x 4 bytes / (bandwidth x memory efficiency), passes in MEM_PASSES
  batch norm,       the same at a lower share of the bandwidth (reduce efficiency): statistics,
  pooling           windows and max-pool's scattered backward
backward work = 2 x forward for convolutions and GEMMs (input and weight gradients), except the
first parameterised layer, whose input needs no gradient (1 x). The loss adds LOSS_KERNELS.

Floors and work ADD (affine in b) rather than take a max: at batch 16 the measured H200 steps sit
well above both the kernel floors and the work alone (VGG-16 TF32 b16: 14.0 ms, work alone 11 ms,
floors 1 ms); the fit of the max form leaves larger residuals (benchmarks/fit_compute_model.py
prints both). The affine form is also what a DeviceProfile carries exactly (fixed + b x per_sample).

The host floor is a max, not a sum: the CPU issues kernels asynchronously, so a part's call
lasts max(host launches, device time). It is taken per part and phase (DeviceProfile.call_s),
which is what the performance model and replay can wait.

A device is its datasheet (peaks, bandwidth) plus efficiencies, floors and launch cost fitted to
measured steps (devices.py says what was fitted to what; benchmarks/fit_compute_model.py fits and
cross-validates; docs/performance-model.md has the tables).
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
# Memory-bound layers that reduce or gather (batch norm's statistics, pooling windows, max-pool's
# scattered backward) reach a lower share of the bandwidth than element-wise ones.
REDUCE_KINDS = {"BatchNorm1d", "BatchNorm2d", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d",
                "AdaptiveAvgPool2d", "AdaptiveMaxPool2d"}
FREE_KINDS = {"Flatten", "Identity", "Unflatten"}  # views: no data moved, no kernel
DEFAULT_PASSES = (1.0, 1.5)  # any other parameterless layer: treated as element-wise

# Kernels launched per call (forward, backward) by PyTorch's CUDA implementation of each kind.
KERNELS: dict[str, tuple[int, int]] = {
    "Conv2d": (1, 2),  # cuDNN forward; backward: data gradient + weight gradient
    "Linear": (1, 2),  # addmm; backward: mm for the input gradient, mm for the weight gradient
    "BatchNorm2d": (2, 1),  # cuDNN forward + num_batches_tracked += 1; cuDNN backward
    "BatchNorm1d": (2, 1),
    "MaxPool2d": (1, 2),  # backward: zero-fill + scatter of the gradient
}
DEFAULT_KERNELS = (1, 1)  # element-wise layers and the other pools: one kernel each way
LOSS_KERNELS = (2, 3)  # cross-entropy: log_softmax + nll forward; nll (fill + scatter) + log_softmax backward


@dataclasses.dataclass(frozen=True)
class LayerCost:
    """One layer call on `spec`: work seconds per sample, device floor seconds per call, kernels per call."""

    fwd_s: float
    bwd_s: float
    fwd_fixed_s: float
    bwd_fixed_s: float
    fwd_kernels: int
    bwd_kernels: int

    def seconds(self, phase: str, batch: int) -> float:
        """Device seconds of one call in `phase` on `batch` samples (floors + work)."""
        return getattr(self, f"{phase}_fixed_s") + batch * getattr(self, f"{phase}_s")


def is_winograd(row: LayerRow) -> bool:
    """3x3 stride-1 convolutions: where cuDNN's Winograd/FFT algorithms apply."""
    return row.kernel == 9 and row.stride == 1


def reduction_length(row: LayerRow) -> float:
    """K of a convolution's implicit GEMM (C_in / groups x kernel area): FLOPs = 2 x outputs x K."""
    return row.flops / (2 * row.out_values) if row.out_values else 0.0


def layer_cost(row: LayerRow, spec, first: bool = False) -> LayerCost:
    """Cost of one call of `row` on DeviceSpec `spec`; `first`: the first parameterised layer
    (its backward computes only the weight gradient)."""
    kf, kb = (0, 0) if row.kind in FREE_KINDS else KERNELS.get(row.kind, DEFAULT_KERNELS)
    if row.kernel:  # a convolution
        k = reduction_length(row)
        size = k / (k + spec.conv_half_k) if k > 0 else 1.0
        factor = spec.winograd_factor if is_winograd(row) else 1.0
        fwd = row.flops / (spec.conv_peak_flops * spec.conv_efficiency * factor * size)
        kb = kb - 1 if first else kb
        bwd, fixed_f, fixed_b = (1 if first else 2) * fwd, 0.0, 0.0
    elif row.flops:  # Linear and other GEMM-counted layers
        fwd = row.flops / (spec.fc_peak_flops * spec.fc_efficiency)
        kb = kb - 1 if first else kb
        bwd = (1 if first else 2) * fwd
        stream = row.params * DTYPE_BYTES / (spec.mem_bytes_per_s * spec.weight_efficiency)
        fixed_f, fixed_b = stream, (1 if first else 2) * stream
    elif row.kind in FREE_KINDS:
        return LayerCost(0.0, 0.0, 0.0, 0.0, 0, 0)
    else:
        f, b = MEM_PASSES.get(row.kind, DEFAULT_PASSES)
        io = row.io_values or 2 * row.out_values  # profiles saved before io_values existed
        eff = spec.reduce_efficiency if row.kind in REDUCE_KINDS else spec.mem_efficiency
        mem = spec.mem_bytes_per_s * eff
        fwd, bwd, fixed_f, fixed_b = f * io * DTYPE_BYTES / mem, b * io * DTYPE_BYTES / mem, 0.0, 0.0
    calls = max(1, row.calls)  # io_values and FLOPs already sum the calls; kernels do not
    kf, kb = kf * calls, kb * calls
    return LayerCost(fwd, bwd, fixed_f + kf * spec.kernel_s, fixed_b + kb * spec.kernel_s, kf, kb)


def layer_seconds(row: LayerRow, spec) -> tuple[float, float]:
    """(forward, backward) work seconds per sample of one layer on DeviceSpec `spec` (no floors)."""
    c = layer_cost(row, spec)
    return c.fwd_s, c.bwd_s


def layer_costs(profile: Profile, spec) -> list[tuple[LayerRow, LayerCost]]:
    """Every layer row with its cost, in forward order."""
    out, seen_params = [], False
    for r in profile.layers:
        out.append((r, layer_cost(r, spec, first=not seen_params and r.params > 0)))
        seen_params = seen_params or r.params > 0
    return out


def layer_times(profile: Profile, spec) -> list[dict]:
    """Per-layer forward/backward work seconds per sample, in forward order (name, part, kind, fwd_s, bwd_s)."""
    return [{"name": r.name, "part": r.part, "kind": r.kind, "fwd_s": c.fwd_s, "bwd_s": c.bwd_s}
            for r, c in layer_costs(profile, spec)]


def part_costs(profile: Profile, spec) -> dict[str, float] | None:
    """Per part ("conv", "fc") and phase ("fwd", "bwd"): work seconds per sample ({pp}_s),
    device floor per call ({pp}_fixed_s) and host launch floor per call ({pp}_call_s); the loss
    is in the FC part. None when the profile has no layer rows (the caller then falls back to
    part FLOPs)."""
    if not profile.layers:
        return None
    keys = [f"{p}_{ph}" for p in ("conv", "fc") for ph in ("fwd", "bwd")]
    sums = {f"{k}{s}": 0.0 for k in keys for s in ("_s", "_fixed_s")}
    kernels = dict.fromkeys(keys, 0)
    kernels["fc_fwd"], kernels["fc_bwd"] = LOSS_KERNELS
    for r, c in layer_costs(profile, spec):
        part = r.part if r.part in ("conv", "fc") else "conv"
        for ph in ("fwd", "bwd"):
            sums[f"{part}_{ph}_s"] += getattr(c, f"{ph}_s")
            sums[f"{part}_{ph}_fixed_s"] += getattr(c, f"{ph}_fixed_s")
            kernels[f"{part}_{ph}"] += getattr(c, f"{ph}_kernels")
    for k in keys:
        sums[f"{k}_call_s"] = kernels[k] * spec.launch_s
    return sums


def step_kernels(profile: Profile, spec) -> int:
    """Kernels one forward+backward launches (layers and loss)."""
    return sum(c.fwd_kernels + c.bwd_kernels for _, c in layer_costs(profile, spec)) + sum(LOSS_KERNELS)


def part_seconds(profile: Profile, spec) -> dict[str, float] | None:
    """{"conv_fwd_s", "conv_bwd_s", "fc_fwd_s", "fc_bwd_s"}: work seconds per sample (see part_costs)."""
    costs = part_costs(profile, spec)
    return None if costs is None else {f"{p}_{ph}_s": costs[f"{p}_{ph}_s"] for p in ("conv", "fc")
                                       for ph in ("fwd", "bwd")}


# ---------------------------------------------------------------------------------------------
# Published single-GPU training throughput (images/s, 224x224, fp32 or TF32 as PyTorch runs
# it by default). Sources in docs/performance-model.md. "update": whether the measured step
# includes the optimizer step (a full training iteration) or only forward+backward; "fit":
# whether benchmarks/fit_compute_model.py fits to it (False: held out, a check).


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
    Figure("v100", "vgg16", 16, 16 / 83.5e-3, False, "u39kun PyTorch 0.3 (V100 p3, FP32)", False),
    Figure("v100", "vgg16", 16, 16 / 71.7e-3, False, "u39kun TensorFlow 1.5 (V100, FP32)", False),
    # Lambda, "RTX 2080 Ti Deep Learning Benchmarks" (TensorFlow 1.12, FP32, synthetic data)
    Figure("v100", "resnet50", 64, 405.0, True, "Lambda TF 1.12 (V100, FP32)", False),
)
