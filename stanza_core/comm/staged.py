"""Staged point-to-point: gloo with CUDA tensors (several ranks sharing one GPU, which NCCL
refuses). gloo's send/recv read and write host memory only, so each P2P transfer goes through a
host copy; gloo's collectives take CUDA tensors directly and are not staged.

`STAGED_P2P_ENV=1` stages CPU tensors too: the tests run this GPU path's logic on CPU.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

STAGED_P2P_ENV = "STANZA_STAGED_P2P"


class StagedWork:
    """A gloo P2P transfer of a CUDA tensor through a host copy. A receive copies into the CUDA
    tensor once it has completed."""

    def __init__(self, work, host: torch.Tensor, target: torch.Tensor | None):
        self.work, self.host, self.target = work, host, target

    def wait(self, timeout=None):
        ok = self.work.wait() if timeout is None else self.work.wait(timeout)
        if self.target is not None:
            self.target.copy_(self.host)
            self.target = None
        return ok

    def is_completed(self) -> bool:
        return self.work.is_completed()


def staged(op: dist.P2POp) -> StagedWork:
    """Post `op` on a host copy of its tensor."""
    if op.op is dist.irecv:  # a receive lands in host memory first
        host = torch.empty(op.tensor.shape, dtype=op.tensor.dtype)
    else:  # a send's payload, copied out (synchronously) before gloo reads it
        host = op.tensor.detach().to("cpu", copy=True)
    work = op.op(host, op.peer, group=op.group, tag=op.tag)
    return StagedWork(work, host, op.tensor if op.op is dist.irecv else None)
