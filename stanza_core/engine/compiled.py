"""`--compile`: torch.compile of the model pieces a rank runs (opt-in).

On a GPU an eager step issues one kernel launch per operator call from the host, so a short step
(AlexNet at batch 32 on an H100: about 4 ms for about 170 calls) is bound by the host, not the GPU.
torch.compile (TorchInductor) traces each piece once and fuses its element-wise work into fewer,
larger kernels; with `--compile-mode reduce-overhead` on CUDA it also records each piece's launches
as a CUDA graph, replayed by one launch per step.

What is compiled: the modules this rank runs forward and backward through, in place
(`nn.Module.compile`, lazily at the first step): the whole model under local, ddp (inside torch's
DDP, which keeps its gradient hooks) and ps; the CONV body and the FC head of the split under
stanza. The engine around them (communication, buckets, the optimizer) stays eager.

What it keeps: the same algorithm step for step (the same samples, dropout masks, gradients summed
over the same global batch: BSP), so a compiled run follows the eager one within fp32 rounding.
It is not bitwise equal: fused kernels round and sum in another order (tests/unit/test_compile.py
bounds the difference after a few steps on CPU). SampleDropout runs eagerly between compiled
regions: its mask is drawn from a generator seeded per step, which a traced graph would freeze.
The first step or two pay the compilation (tens of seconds on a CPU): leave them out with --warmup.
"""
from __future__ import annotations

import torch

from ..models import SampleDropout


def compile_pieces(model: torch.nn.Module, split, mode: str) -> int:
    """Compile in place the pieces this rank runs (`split`'s two parts, else `model`); the number
    of pieces compiled."""
    for m in model.modules():
        if isinstance(m, SampleDropout):  # keyed masks stay eager (a graph break, by design)
            m.forward = torch.compiler.disable(m.forward)
    pieces = [split.conv, split.fc] if split is not None else [model]
    for piece in pieces:
        piece.compile(mode=mode)
    return len(pieces)
