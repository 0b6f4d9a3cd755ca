"""Kernel pricing of compute model v3: the GEMMs of Linear layers and convolutions on one device.

compute.py costs a layer from these; benchmarks/fit_compute_model.py (H200 steps) and
benchmarks/fit_v100_deepbench.py (V100 kernels) fit the constants of a device row through them.
The functions on arrays (`gemm_utilisation`, `gemm_seconds`, `conv_pass_seconds`) are
numpy-vectorised: a fit evaluates them on every GEMM of every point at once.

A device row has a kernel model version (DeviceSpec.kernel_model):

  2  (compute model v2.2, the Hopper/Ampere rows) one output tile per GEMM, its edges the next power
     of two of M and N clipped to [MIN_TILE, TILE]; a convolution's backward = (data gradient +
     weight gradient) at conv_bwd_ratio x the forward's seconds per FLOP.
  3  (the V100 row, fitted to DeepBench's V100 kernels) the tile is chosen as a library's heuristic
     chooses it: the (tm, tn) of TILES x TILES with the highest utilisation (reuse x padding x wave
     fill, split-K when tiles < SMs); a convolution's three passes are priced apart, each as an
     implicit GEMM at its own shape (`conv_pass_shapes`) with the chosen tile and the size factor of
     its reduction length; the data gradient at conv_dgrad_ratio (x conv_dgrad_stride_ratio for a
     strided convolution), the weight gradient at conv_wgrad_ratio without the Winograd factor.
"""
from __future__ import annotations

import numpy as np

from ..anatomy import DTYPE_BYTES, LayerRow

TILE = 128  # the largest output tile edge (cuBLAS/cuDNN FP32 and TF32 kernels: 128 x 128)
MIN_TILE = 16  # the smallest tile edge a kernel shrinks to for a small M or N
TILES = (32, 64, 128)  # kernel model 3: the tile edges a library chooses among (cuBLAS/cuDNN SGEMM: 32 to 128)
SPLIT_K_MIN = 256  # the shortest reduction slice split-K gives one CTA


def is_winograd(row: LayerRow, kernel_model: int = 2) -> bool:
    """Stride-1 convolutions where cuDNN's Winograd/FFT algorithms apply: 3x3 (kernel model 2);
    3x3 and 5x5 (kernel model 3: cuDNN 7's WINOGRAD_NONFUSED and FFT_TILING take 5x5 too)."""
    return row.stride == 1 and row.kernel in ((9, 25) if kernel_model >= 3 else (9,))


def reduction_length(row: LayerRow) -> float:
    """K of a convolution's (or Linear's) GEMM: FLOPs = 2 x outputs x K (C_in / groups x kernel area)."""
    return row.flops / (2 * row.out_values) if row.out_values else 0.0


def out_channels(row: LayerRow) -> float:
    """C_out of a convolution (N of its GEMM) from its parameters (C_out x K, + C_out with a bias);
    a Linear layer's output features."""
    if not row.kernel:
        return float(row.out_values)
    k = reduction_length(row)
    if k <= 0:
        return float(row.out_values)
    kk = round(k)
    return float(row.params // (kk + 1) if row.params % (kk + 1) == 0 else row.params / k)


def gemms(row: LayerRow, batch: int, first: bool = False) -> list[tuple[str, float, float, float, float]]:
    """(phase, FLOPs, M, N, K) of each GEMM one call of a convolution (implicit GEMM) or Linear
    layer runs on `batch` samples: forward (M = b x pixels, N = C_out, K = C_in x kernel area);
    backward, data gradient (M = b x pixels, N = K, K = C_out; not for the first layer) and weight
    gradient (M = C_out, N = K, K = b x pixels)."""
    k, n = reduction_length(row), out_channels(row)
    m = batch * row.out_values / n
    flops = batch * row.flops
    out = [("fwd", flops, m, n, k)]
    if not first:
        out.append(("bwd", flops, m, k, n))
    out.append(("bwd", flops, n, k, m))
    return out


def _utilisation(m, n, k, tm, tn, sms, tile_exponent):
    reuse = (tm * tn / (tm + tn) / (TILE / 2)) ** tile_exponent
    tiles = np.ceil(m / tm) * np.ceil(n / tn)
    pad = m * n / (tiles * tm * tn)
    if not sms or sms <= 0:
        return reuse * pad
    split = np.where(tiles >= sms, 1.0, np.maximum(1.0, np.minimum(np.floor(sms / tiles), np.floor(k / SPLIT_K_MIN))))
    ctas = tiles * split
    return reuse * pad * ctas / (np.ceil(ctas / sms) * sms)


def gemm_utilisation(m, n, k, sms, tile_exponent, choose: bool = False):
    """Share of the device's math a GEMM of M x N outputs (reduction K) can use (numpy arrays or
    scalars): tile reuse x padding x wave fill, with split-K when tiles < SMs. sms <= 0: no waves.
    `choose` False (kernel model 2): the tile's edges are M and N rounded up to a power of two in
    [MIN_TILE, TILE]; True (kernel model 3): the best tile of TILES x TILES."""
    m, n, k = (np.asarray(v, dtype=float) for v in (m, n, k))
    if not choose:
        tm = np.clip(2.0 ** np.ceil(np.log2(np.maximum(m, 1.0))), MIN_TILE, TILE)
        tn = np.clip(2.0 ** np.ceil(np.log2(np.maximum(n, 1.0))), MIN_TILE, TILE)
        return _utilisation(m, n, k, tm, tn, sms, tile_exponent)
    return np.max([_utilisation(m, n, k, float(a), float(b), sms, tile_exponent) for a in TILES for b in TILES], axis=0)


def gemm_seconds(flops, m, n, k, rate, sms, tile_exponent, mem_rate, choose: bool = False):
    """Seconds of GEMMs (numpy arrays or scalars): the roofline max of FLOPs at `rate` x the shape
    utilisation and fp32 operands and result (M K + K N + M N values) at `mem_rate` bytes/s."""
    util = gemm_utilisation(m, n, k, sms, tile_exponent, choose)
    moved = DTYPE_BYTES * (np.asarray(m) * k + np.asarray(k) * n + np.asarray(m) * n)
    return np.maximum(np.asarray(flops) / (np.asarray(rate) * util), moved / mem_rate)


def conv_rate(k, winograd, spec):
    """FLOP/s of convolution GEMMs of reduction length `k` (arrays or scalars; None: long enough to
    saturate) before any tile utilisation: conv peak x efficiency x size factor K / (K + conv_half_k
    x conv peak / FP32 peak) x winograd_factor where `winograd`."""
    half = spec.conv_half_k * spec.conv_peak_flops / spec.fc_peak_flops  # tensor cores: longer K to saturate
    if k is None:
        size = 1.0
    else:
        k = np.asarray(k, dtype=float)
        size = np.where(k > 0, k / np.maximum(k + half, 1e-30), 1.0)
    return spec.conv_peak_flops * spec.conv_efficiency * np.where(winograd, spec.winograd_factor, 1.0) * size


def conv_pass_seconds(phase, flops, m, n, k, winograd, spec):
    """Kernel model 3: seconds of one convolution pass (arrays or scalars, no floor) of `flops` run
    as an implicit GEMM of M x N outputs, reduction K (`conv_pass_shapes`): at conv_rate(K) x its
    tile utilisation (the chosen tile: `gemm_utilisation(choose=True)`); "dgrad" x conv_dgrad_ratio
    (x conv_dgrad_stride_ratio where `stride` > 1: passed in `winograd`'s place as (winograd, strided));
    "wgrad" x conv_wgrad_ratio, at the saturated rate (its reduction, b x pixels, is long) and
    without the Winograd factor."""
    flops = np.asarray(flops, dtype=float)
    util = gemm_utilisation(m, n, k, spec.sms, spec.tile_exponent, True)
    if phase == "wgrad":
        return spec.conv_wgrad_ratio * flops / (conv_rate(None, False, spec) * util)
    wino, strided = winograd if phase == "dgrad" else (winograd, False)
    t = flops / (conv_rate(k, wino, spec) * util)
    if phase == "dgrad":
        t = t * spec.conv_dgrad_ratio * np.where(strided, spec.conv_dgrad_stride_ratio, 1.0)
    return t


def conv_pass_shapes(c_in, c_out, area, stride, out_pixels):
    """Kernel model 3: {pass: (M, N, K)} of a convolution's implicit GEMMs (arrays or scalars;
    `out_pixels` = b x output pixels): forward (b x out pixels, C_out, C_in x area); data gradient
    over the input grid (b x out pixels x stride, C_in, C_out x area / stride: a strided
    convolution's gradient reaches each input pixel from area / stride taps); weight gradient
    (C_out, C_in x area, b x out pixels)."""
    return {"fwd": (out_pixels, c_out, c_in * area), "dgrad": (out_pixels * stride, c_in, c_out * area / stride),
            "wgrad": (c_out, c_in * area, out_pixels)}


def gemm_rate(row: LayerRow, spec) -> float:
    """FLOP/s of `row`'s GEMMs before the shape utilisation: peak x efficiency x size x algorithm."""
    if not row.kernel:
        return spec.fc_peak_flops * spec.fc_efficiency
    return float(conv_rate(reduction_length(row), is_winograd(row, spec.kernel_model), spec))


def conv_work(row: LayerRow, spec, batch: int, first: bool = False) -> tuple[float, float]:
    """(forward, backward) seconds of one convolution call on `batch` samples (no floors). Kernel
    model 2: FLOPs at `gemm_rate`; the backward's 2 x FLOPs (first layer: 1 x) at conv_bwd_ratio x
    the forward's seconds per FLOP. Kernel model 3: each pass by `conv_pass_seconds`."""
    if spec.kernel_model < 3:
        fwd = batch * row.flops / gemm_rate(row, spec)
        return fwd, (1 if first else 2) * fwd * spec.conv_bwd_ratio
    w = is_winograd(row, spec.kernel_model)
    kk, c_out = reduction_length(row), out_channels(row)
    area, stride = max(1, row.kernel), max(1, row.stride)
    shapes = conv_pass_shapes(kk / area, c_out, area, stride, batch * row.out_values / c_out)
    flops = batch * row.flops
    fwd = float(conv_pass_seconds("fwd", flops, *shapes["fwd"], w, spec))
    bwd = float(conv_pass_seconds("wgrad", flops, *shapes["wgrad"], w, spec))
    if not first:
        bwd += float(conv_pass_seconds("dgrad", flops, *shapes["dgrad"], (w, stride > 1), spec))
    return fwd, bwd


def gemm_work(row: LayerRow, spec, batch: int, first: bool = False) -> tuple[float, float]:
    """(forward, backward) seconds of one call of a Linear layer `row` on `batch` samples: its
    GEMMs at their shape on the roofline (no floors); a convolution: `conv_work`."""
    if row.kernel:
        return conv_work(row, spec, batch, first)
    g = gemms(row, batch, first)
    t = gemm_seconds([x[1] for x in g], [x[2] for x in g], [x[3] for x in g], [x[4] for x in g],
                     gemm_rate(row, spec), spec.sms, spec.tile_exponent, spec.mem_bytes_per_s * spec.mem_efficiency,
                     spec.kernel_model >= 3)
    return (float(sum(s for (ph, *_), s in zip(g, t) if ph == "fwd")),
            float(sum(s for (ph, *_), s in zip(g, t) if ph == "bwd")))
