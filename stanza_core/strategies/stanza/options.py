"""`stanza`'s options as labels and keys name them (labels.py): k, then what goes beyond the paper."""
from __future__ import annotations


def label_parts(fc_workers: int | None = 1, fc_conv_share: float = 0.0, micro_batches: int = 1,
                boundary_dtype: str = "fp32", grad_compression: str = "none", **_) -> list[tuple[str, str]]:
    """k = FC workers, share = each FC worker's share of the global batch on the CONV body, M =
    micro-batches, then "boundary dtype|gradient compression" when either is not exact."""
    out = [("k", str(fc_workers or 1))]
    if fc_conv_share:
        out.append(("share", f"{fc_conv_share:.3g}"))
    if micro_batches > 1:
        out.append(("M", str(micro_batches)))
    if (boundary_dtype, grad_compression) != ("fp32", "none"):
        out.append((f"{boundary_dtype}|{grad_compression}", ""))
    return out
