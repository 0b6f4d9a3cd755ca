"""`stanza`'s bytes on the wire beyond the paper: the boundary's wire dtype and the CONV
gradient's compression (fp16/bf16 values, or PowerSGD's P, Q and uncompressed tensors), as the
engine's comm hooks send them. model.py's traffic formulas and timeline.py's schedule count
with them."""
from __future__ import annotations

from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

from ...anatomy import DTYPE_BYTES

WIRE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}  # bytes per value of each boundary / gradient dtype
POWERSGD_START = 2  # as comm.hooks.POWERSGD_START: steps of vanilla allreduce before PowerSGD compresses


def powersgd_numel(shapes) -> int:
    """Values PowerSGD (rank 1, torch's default min_compression_rate 2) allreduces for tensors
    of these shapes: P and Q of each tensor it compresses, the others whole. The decision is
    torch's own `_should_compress`, as the hook applies it."""
    total = 0
    for shape in shapes:
        n = shape[0] if shape else 1
        m = 1
        for v in shape[1:]:
            m *= v
        ok, whole, compressed = _should_compress(n, m, min(n, m, 1), 2)
        total += compressed if ok else whole
    return total


def conv_grad_bytes(counts: "ModelCounts", compression: str, step: int | None = None) -> int:
    """Bytes of CONV gradients one member puts into the CONV allreduce per step (before the
    ring's 2(n-1)/n): fp32, 2-byte values, or PowerSGD's P, Q and uncompressed tensors (its
    first POWERSGD_START steps run vanilla fp32; step=None means the steady state)."""
    if compression == "none" or (compression == "powersgd" and step is not None and step < POWERSGD_START):
        return DTYPE_BYTES * counts.conv_params
    if compression in ("fp16", "bf16"):
        return 2 * counts.conv_params
    if not counts.conv_shapes:
        raise ValueError("PowerSGD traffic needs the CONV parameter shapes (a profile with conv_shapes)")
    return DTYPE_BYTES * powersgd_numel(counts.conv_shapes)
