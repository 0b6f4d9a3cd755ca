"""Batch normalisation over the global batch: SyncBatchNorm's semantics on gloo and NCCL.

With `--bn-stats global` (the default) every batch-norm layer that data workers run computes
its batch mean and variance over the whole global batch, not over the worker's slice, so a
BN model trains exactly as in one process (`local`), running statistics included.
(torch.nn.SyncBatchNorm refuses CPU tensors, so the engine does it itself, through comm/,
where the bytes are counted under `bn_stats`.)

Per layer and step, on each of the n data workers (b samples each, C channels):
  forward   S1 = allreduce(sum of x over the batch and spatial dims)     C values
            mean = S1 / M (M = n * b * H * W)
            S2 = allreduce(sum of (x - mean)^2)                          C values
            var = S2 / M ; y = (x - mean) / sqrt(var + eps) * weight + bias
  backward  the gradients of S2 and S1 are allreduced (the transpose of a sum is a broadcast
            of the summed gradient)                                      2 x C values
so 4 allreduces of 4*C bytes: 2(n-1)/n * 16*C bytes sent and received per layer call. The
running statistics get the global mean and unbiased global variance, as nn.BatchNorm does.

The layers are switched in place (their class becomes a subclass of their own class), so every
reference to them (the model, the parts of a split) sees the change and the state_dict keys
do not move. `--bn-stats local` leaves torch's per-worker statistics: not equal to `local`.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

BN_STATS = ("global", "local")  # --bn-stats: over the global batch (SyncBatchNorm's) | per data worker
BN_GLOBAL, BN_LOCAL = BN_STATS

BN_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


class _AllReduceSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t: torch.Tensor, reduce: Callable[[torch.Tensor], None]) -> torch.Tensor:
        ctx.reduce = reduce
        out = t.clone()
        reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous().clone()
        ctx.reduce(grad)
        return grad, None


class _GlobalBatchNorm:
    """Mixin put in front of a BatchNorm class: training-mode statistics over `_stanza_workers`
    equal slices, summed by `_stanza_reduce` (an in-place sum allreduce)."""

    _stanza_reduce: Callable[[torch.Tensor], None]
    _stanza_workers: int

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(x)
        self._check_input_dim(x)
        dims = [0, *range(2, x.dim())]
        shape = [1, -1] + [1] * (x.dim() - 2)
        m = (x.numel() // x.shape[1]) * self._stanza_workers  # values per channel in the global batch
        if m <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {tuple(x.shape)}")
        mean = _AllReduceSum.apply(x.sum(dims), self._stanza_reduce) / m
        xc = x - mean.view(shape)
        var = _AllReduceSum.apply((xc * xc).sum(dims), self._stanza_reduce) / m
        y = xc * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                f = (1.0 / float(self.num_batches_tracked)) if self.momentum is None else self.momentum
                self.running_mean.mul_(1 - f).add_(mean.detach(), alpha=f)
                self.running_var.mul_(1 - f).add_(var.detach() * (m / (m - 1)), alpha=f)
        return y


_CLASSES: dict[type, type] = {}


def _global_class(cls: type) -> type:
    if cls not in _CLASSES:
        _CLASSES[cls] = type(cls.__name__, (_GlobalBatchNorm, cls), {"__module__": cls.__module__})
    return _CLASSES[cls]


def bn_layers(module: nn.Module) -> list[tuple[str, nn.Module]]:
    """The batch-norm layers of `module` (named), in module order."""
    return [(n, m) for n, m in module.named_modules() if isinstance(m, BN_TYPES)]


def bn_channels(module: nn.Module) -> int:
    """Channels summed over the batch-norm layers of `module` that track batch statistics in
    training (what one step's statistics allreduces carry, per layer call)."""
    return sum(m.num_features for _, m in bn_layers(module))


def use_global_batch_stats(module: nn.Module, reduce: Callable[[torch.Tensor], None], workers: int) -> int:
    """Switch every batch-norm layer of `module` in place to global-batch statistics over
    `workers` equal slices, summed by `reduce(tensor)` (in place). Returns how many switched."""
    layers = bn_layers(module)
    for _, m in layers:
        if not isinstance(m, _GlobalBatchNorm):
            m.__class__ = _global_class(type(m))
        m._stanza_reduce, m._stanza_workers = reduce, workers
    return len(layers)

