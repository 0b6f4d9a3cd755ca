"""Floating-point settings of a run, set once before any model is built, recorded in the metrics.

Default (exact=False): PyTorch's own defaults. On Ampere and later GPUs cuDNN runs fp32
convolutions in TF32 (10-bit mantissa) and picks algorithms freely, so a GPU run differs from
a CPU run by far more than summation order, and two GPU runs may differ from each other.

exact=True: TF32 off for matmuls and convolutions, cuDNN deterministic with autotuning off, and
torch's deterministic-algorithms switch on in warn-only mode (adaptive average pooling, used
by AlexNet and VGG, has no deterministic CUDA backward; an error-raising mode would refuse
those models). With it, every strategy equals `local` on the same GPU within the same fp32
tolerance as on CPU (EXACT_TOLERANCE), and a GPU run follows a CPU run within
GPU_VS_CPU_TOLERANCE over a few steps (different kernels, same fp32 arithmetic).
"""
from __future__ import annotations

import os

import torch

# Strategy vs local on one device (CPU, or a GPU in exact mode): parameters after the run.
EXACT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
# A GPU run in exact mode vs the same run on CPU (kernels differ; a few steps of SGD).
GPU_VS_CPU_TOLERANCE = {"rtol": 1e-3, "atol": 1e-4}


def set_numerics(exact: bool) -> dict:
    """Apply the exact mode (if asked) and return the record written into the metrics JSON."""
    if exact:
        # cuBLAS needs a fixed workspace to be deterministic; read at its initialisation.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True, warn_only=True)
    return numerics_record(exact)


def numerics_record(exact: bool) -> dict:
    """What the run's arithmetic actually was (read back from torch, not from the flag)."""
    return {"exact": bool(exact),
            "matmul_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_tf32": bool(torch.backends.cudnn.allow_tf32),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "deterministic_algorithms": ("warn_only" if torch.is_deterministic_algorithms_warn_only_enabled()
                                         else True) if torch.are_deterministic_algorithms_enabled() else False,
            "tolerance_vs_local": EXACT_TOLERANCE if exact else None,
            "tolerance_gpu_vs_cpu": GPU_VS_CPU_TOLERANCE if exact else None}
