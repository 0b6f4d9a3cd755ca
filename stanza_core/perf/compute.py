"""Layer-by-layer compute cost of a training step on a GPU (compute model v3; kernels: kernels.py).

Each layer of a profile (`LayerRow`) costs, per call on a batch of b samples, in each phase:

  device   kernels x kernel floor + work(b)
  host     kernels x launch cost (the CPU issuing them: Python, autograd, driver)

Work, by kind (kernel model 2, the rows fitted to H200 steps; the V100 row runs kernel model 3,
fitted to DeepBench's V100 kernels: chosen GEMM tiles and convolution passes priced apart, see
kernels.py):
  convolution    FLOPs / rate (linear in b), rate = peak x efficiency x size factor x algorithmic
                 factor; the backward (data gradient + weight gradient, 2 x the forward FLOPs; the
                 first layer only the weight gradient) takes conv_bwd_ratio x the forward's seconds
                 per FLOP:
                   efficiency   by math: FP32 CUDA cores, TF32 tensor cores
                   size factor  K / (K + conv_half_k x conv peak / FP32 peak), K = C_in x kernel
                                area, the reduction length (small-channel convolutions gather
                                badly; math that is faster per SM (TF32 tensor cores) needs a
                                proportionally longer K to hide the same gather)
                   algorithmic  3x3 stride-1 convolutions on FP32 CUDA cores run Winograd/FFT
                                (fewer multiplications than the direct count): winograd_factor
  Linear         each GEMM (forward; backward: data gradient and weight gradient, shapes in
                 `gemms`) at max(FLOPs / (FP32 GEMM rate x shape utilisation), bytes / (bandwidth
                 x memory efficiency)) (the roofline); `gemm_utilisation`: the GEMM (M x N,
                 reduction K) cut into output tiles on the device's SMs: tiles shrink to a small M
                 or N (16 to 128) at a loss of operand reuse ((r / 64) ** tile_exponent,
                 r = tm tn / (tm + tn)); split-K fills the SMs when there are fewer tiles than SMs;
                 the last wave of tiles leaves SMs idle. So a small batch's FC cost scales with the
                 device's compute and SM count; bandwidth is only the roofline bound.
  ReLU, dropout, values moved x 4 bytes / (bandwidth x memory efficiency), passes in MEM_PASSES;
  residual adds  torchvision's Bottleneck/BasicBlock `out += identity` (not a module: counted from
                 the block structure, `residual_rows`)
  batch norm,    the same at a lower share of the bandwidth (reduce efficiency): statistics,
  pooling        windows and max-pool's scattered backward
The loss adds LOSS_KERNELS.

Linear GEMM shapes (and kernel model 3's convolution shapes) depend on the batch (M = b), so their
work is not linear in b. A DeviceProfile
is affine per part (fixed + b x per sample): `layer_cost` takes the secant of the work between the
profile's batch b0 and 4 b0 (exact at both; fixed >= 0), so a profile built at a run's per-worker
batch times that batch exactly and a gathered FC batch up to 4x on the secant.

The host floor is a max, not a sum: the CPU issues kernels asynchronously, so a part's call
lasts max(host launches, device time). It is taken per part and phase (DeviceProfile.call_s),
the coarsest unit the performance model and replay wait.

A device is its datasheet (peaks, bandwidth, SM count) plus efficiencies, floors and launch cost
fitted to measured steps or kernels (devices.py and rows.py say what was fitted to what;
benchmarks/fit_compute_model.py and benchmarks/fit_v100_deepbench.py fit and check;
docs/performance-model.md has the tables).
"""
from __future__ import annotations

import dataclasses

from ..anatomy import DTYPE_BYTES, LayerRow, Profile
from .kernels import (MIN_TILE, SPLIT_K_MIN, TILE, TILES, conv_pass_seconds, conv_pass_shapes,  # noqa: F401 (re-exported)
                      conv_rate, conv_work, gemm_rate, gemm_seconds, gemm_utilisation, gemm_work, gemms, is_winograd,
                      out_channels, reduction_length)

# Values moved per value of input+output (LayerRow.io_values), (forward, backward), for the
# memory-bound layers. io_values counts each element's input and output once, so an
# element-wise forward that reads x and writes y moves 1.0 x io_values.
MEM_PASSES: dict[str, tuple[float, float]] = {
    "BatchNorm1d": (1.5, 2.5),  # fwd: read x for the statistics, read again, write y; bwd: x, dy twice, write dx
    "BatchNorm2d": (1.5, 2.5),
    "ReLU": (1.0, 1.5),  # fwd: read, write; bwd: read y and dy, write dx
    "MaxPool2d": (1.4, 3.0),  # 2x2 window (io = 5 x outputs): fwd reads x, writes y and int64 indices (7 outputs' worth);
    # bwd zero-fills dx, reads dy and the indices, scatter-adds into dx (read and write: 15)
    "AvgPool2d": (1.0, 1.0),
    "AdaptiveAvgPool2d": (1.0, 1.0),
    "Dropout": (1.5, 1.5),  # the mask is read once more each way
    "SampleDropout": (1.5, 1.5),
    "ResidualAdd": (1.0, 1.0),  # io = 3 x outputs: fwd reads two, writes one; bwd accumulates the identity path's gradient
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

SECANT = 4  # DeviceProfile's affine work: the secant between the profile's batch b0 and SECANT x b0


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
        """Device seconds of one call in `phase` on `batch` samples (floors + work, on the secant)."""
        return getattr(self, f"{phase}_fixed_s") + batch * getattr(self, f"{phase}_s")


def secant(c0: float, c1: float, b0: int) -> tuple[float, float]:
    """(fixed, per sample) of the line through (b0, c0) and (SECANT b0, c1), both >= 0: else the
    line through the origin and (b0, c0) (fixed < 0), or c0 flat (slope < 0: a fuller last wave)."""
    per = (c1 - c0) / ((SECANT - 1) * b0)
    if per < 0:
        return c0, 0.0
    fixed = c0 - b0 * per
    return (fixed, per) if fixed >= 0 else (0.0, c0 / b0)


def layer_cost(row: LayerRow, spec, first: bool = False, batch: int = 32) -> LayerCost:
    """Cost of one call of `row` on DeviceSpec `spec`; `first`: the first parameterised layer
    (its backward computes only the weight gradient); `batch`: the batch b0 the GEMM work is
    linearised at (module docstring)."""
    kf, kb = (0, 0) if row.kind in FREE_KINDS else KERNELS.get(row.kind, DEFAULT_KERNELS)
    if row.flops and row.out_values and row.kernel and spec.kernel_model < 3:  # kernel model 2 convolutions: linear in b
        kb = kb - 1 if first else kb
        (fwd, bwd), fixed_f, fixed_b = conv_work(row, spec, 1, first), 0.0, 0.0
    elif row.flops and row.out_values:  # Linear layers (and kernel model 3 convolutions): GEMMs at their shape, on the secant
        kb = kb - 1 if first else kb
        (f0, b0), (f1, b1) = gemm_work(row, spec, batch, first), gemm_work(row, spec, SECANT * batch, first)
        (fixed_f, fwd), (fixed_b, bwd) = secant(f0, f1, batch), secant(b0, b1, batch)
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


def layer_seconds(row: LayerRow, spec, batch: int = 32) -> tuple[float, float]:
    """(forward, backward) work seconds per sample of one layer on DeviceSpec `spec` (no floors;
    GEMMs: the secant slope at `batch`)."""
    c = layer_cost(row, spec, batch=batch)
    return c.fwd_s, c.bwd_s


def residual_rows(profile: Profile) -> list[tuple[int, LayerRow]]:
    """(index after which it runs, row) of each residual add `out += identity` of torchvision's
    Bottleneck/BasicBlock, which is not a module: a block X is recognised by X.conv1 and a ReLU
    X.relu called more than once; the add's outputs are those of X's last batch norm outside
    X.downsample."""
    rows, out = profile.layers, []
    names = {r.name for r in rows}
    for i, r in enumerate(rows):
        block = r.name[:-len(".relu")] if r.name.endswith(".relu") else None
        if r.kind != "ReLU" or r.calls < 2 or block is None or f"{block}.conv1" not in names:
            continue
        bns = [j for j, q in enumerate(rows) if q.name.startswith(block + ".") and q.kind.startswith("BatchNorm")
               and ".downsample" not in q.name]
        if not bns:
            continue
        last = max(j for j, q in enumerate(rows) if q.name.startswith(block + "."))
        v = rows[bns[-1]].out_values
        out.append((last, LayerRow(f"{block}.add", "ResidualAdd", r.part, 0, 0.0, v, 4 * v, 3 * v)))
    return out


def cost_rows(profile: Profile) -> list[LayerRow]:
    """The rows compute model v2.2 costs, in forward order: the profile's layers and the residual adds."""
    extra = dict(residual_rows(profile))
    out = []
    for i, r in enumerate(profile.layers):
        out.append(r)
        if i in extra:
            out.append(extra[i])
    return out


def layer_costs(profile: Profile, spec) -> list[tuple[LayerRow, LayerCost]]:
    """Every costed row (layers and residual adds) with its cost at the profile's batch, in forward order."""
    out, seen_params = [], False
    for r in cost_rows(profile):
        out.append((r, layer_cost(r, spec, first=not seen_params and r.params > 0, batch=profile.batch_size)))
        seen_params = seen_params or r.params > 0
    return out


def layer_times(profile: Profile, spec) -> list[dict]:
    """Per-row forward/backward work seconds per sample, in forward order (name, part, kind, fwd_s, bwd_s)."""
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
    """Kernels one forward+backward launches (layers, residual adds and loss)."""
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
# whether benchmarks/fit_compute_model.py fits to it (False: not fitted; a check only where no fitted
# figure shares its device and model).


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
