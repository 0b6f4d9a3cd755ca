"""T4 solutions: reading the engine's timeline."""
from __future__ import annotations

from stanza_core import get_model, split_model
from stanza_core.viz import timeline_intervals


def hidden_fraction(bars: list[dict]) -> float:
    """Exercise 1: share of the allreduce time (summed over buckets) that lies inside the backward."""
    backward = [b for b in bars if b["what"] == "backward"]
    if not backward:
        return 0.0
    b0, b1 = backward[0]["start"], backward[0]["end"]
    total = hidden = 0.0
    for b in bars:
        if b["what"] == "allreduce":
            total += b["end"] - b["start"]
            hidden += max(0.0, min(b["end"], b1) - max(b["start"], b0))
    return hidden / total if total else 0.0


def pipeline_order(metrics: dict, step: int) -> list[int]:
    """Exercise 2: CONV ranks in the order the (first) FC worker computed their chunks."""
    fc = next(r for r in metrics["ranks"] if r["role"] == "fc_worker")
    bars = [b for b in timeline_intervals(fc, step) if b["what"] == "FC forward + backward"]
    return [b["peer"] for b in sorted(bars, key=lambda b: b["start"])]


def bucket_count(model: str, bucket_mb: float, image_size: int = 32, num_classes: int = 10) -> int:
    """Exercise 3: GradBuckets' rule over the CONV body's parameters, last layer first."""
    split = split_model(get_model(model, num_classes), input_shape=(3, image_size, image_size))
    cap = int(bucket_mb * 2**20)
    buckets, size = 1, 0
    for p in reversed(list(split.conv.parameters())):
        nbytes = p.numel() * p.element_size()
        if size and size + nbytes > cap:
            buckets, size = buckets + 1, 0
        size += nbytes
    return buckets
