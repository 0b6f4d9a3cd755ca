"""The V100 row of compute model v3 and the version of every device row.

The V100 row's kernel constants are FITTED by benchmarks/fit_v100_deepbench.py to Baidu
DeepBench's V100 FP32 training kernels (../shared/measurements/deepbench: 160 cuBLAS GEMMs, 62
cuDNN convolutions, forward / data gradient / weight gradient, algorithms chosen by search;
measured by DeepBench's authors), on the train half of a split chosen before the fit and written
beside it (benchmarks/results/deepbench_v100_fit.json: the split, the parameters, both halves'
errors). `--check` refits and fails if these drift. No training step, record or published figure
was used.

A PyTorch training step adds to those kernels what DeepBench leaves out; the V100 row takes it
from the H200-fitted constants (devices.FITTED), measured there and ASSUMED to carry to a V100
host: launch_s (host seconds per kernel launched), reduce_efficiency (batch norm, pooling) and the
hand-set mem_efficiency (element-wise layers, the optimizer step, the GEMM roofline).
Not modelled (assumed 1): cuDNN's heuristic algorithm choice (PyTorch's default,
cudnn.benchmark = False) against DeepBench's search. docs/performance-model.md says which is which.

Row versions: "v2" is compute model v2.2 (constants devices.FITTED, kernel model 2); the V100's
v2 row, the one the stored replayed runs of benchmarks/results/full were replayed with, stays
reachable as the table row "v100-v2".
"""
from __future__ import annotations

# FITTED by benchmarks/fit_v100_deepbench.py (kernel model 3, kernels.py); peaks, bandwidth and
# SM count are the datasheet's (devices.DATASHEETS["v100"]).
V100_V3: dict[str, float] = {
    "gemm_efficiency": 0.934572,  # FP32 GEMMs: 14.7 TFLOP/s of the 15.7 peak on a large GEMM
    "tile_exponent": 0.223766,  # operand-reuse loss of a smaller tile, (r / 64) ** this (kernels.py)
    "kernel_s": 2.00425e-05,  # device floor per kernel
    "conv_efficiency": 0.866301,  # FP32 convolutions (implicit GEMM at the chosen tile)
    "winograd_factor": 1.70648,  # 3x3 and 5x5 stride-1 forward and data gradient
    "conv_half_k": 9.42549,  # reduction length of half efficiency
    "conv_dgrad_ratio": 0.979111,  # data gradient seconds per FLOP / the forward's at its shape
    "conv_dgrad_stride_ratio": 1.9649,  # a strided convolution's data gradient, a further factor
    "conv_wgrad_ratio": 0.98665,  # weight gradient seconds per FLOP / a saturated forward's
}
# Set by hand, not fitted: the GEMM roofline's share of the bandwidth (devices.FITTED's prior).
V100_V3_FIXED = ("mem_efficiency",)
# Taken from the H200 fit (devices.FITTED), assumed to carry to a V100 host: the step's overheads.
V100_V3_FROM_H200 = ("launch_s", "reduce_efficiency", "mem_efficiency")

V100_V3_VERSION = "v100 row v3 (DeepBench V100 kernels)"
V2_VERSION = "row v2 (compute model v2.2)"


def row_version(name: str) -> str:
    """The version string of the device table row `name`."""
    return V100_V3_VERSION if name == "v100" else f"{name.removesuffix('-v2')} {V2_VERSION}"
