"""Model zoo: torchvision CNNs (random init, never downloaded) and small CNNs for fast tests.

Glossary (the paper's vocabulary, used across the package):
  CONV body  - the convolutional prefix of a CNN: little of the parameters, most of the compute.
  FC head    - the fully connected suffix: most of the parameters, little of the compute.
  boundary   - the single tensor passed from the CONV body to the FC head (its first module's name).

Every nn.Dropout is replaced by `SampleDropout`, which draws each sample's mask from a key
(seed, step, position of the sample in the global batch, layer). So a sample gets the same mask
whichever worker processes it, and distributed runs stay equal to the single-process oracle.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Callable

import torch
import torch.nn as nn
import torchvision.models as tvm

# ---------------------------------------------------------------------------------------------
# Per-sample dropout


_SAMPLE_KEYS: contextvars.ContextVar[tuple[int, int, torch.Tensor] | None] = contextvars.ContextVar(
    "stanza_sample_keys", default=None
)


@contextlib.contextmanager
def sample_keys(seed: int, step: int, positions: torch.Tensor):
    """Within this block, SampleDropout draws the mask of the sample at `positions[i]` of the
    global batch of `step` from a generator keyed by (seed, step, position, layer)."""
    token = _SAMPLE_KEYS.set((int(seed), int(step), positions.detach().to("cpu", torch.int64)))
    try:
        yield
    finally:
        _SAMPLE_KEYS.reset(token)


def keep_mask(seed: int, step: int, positions: torch.Tensor, layer_id: int, shape: tuple[int, ...], p: float,
              device: torch.device | str = "cpu") -> torch.Tensor:
    """Boolean keep-mask (len(positions), *shape) on `device`: row i from the generator keyed by
    (seed, step, positions[i], layer_id), drawn on the CPU so every device draws the same bits.

    For a CUDA device the uniforms are drawn into pinned host memory and copied without
    blocking the host (a pageable copy would stall every forward until the GPU caught up);
    the caching host allocator keeps the buffer alive until the copy is done."""
    device = torch.device(device)
    pinned = device.type == "cuda"
    u = torch.empty((positions.numel(), *shape), pin_memory=pinned)
    gen = torch.Generator(device="cpu")
    for i, pos in enumerate(positions.tolist()):
        # One generator stream per (seed, step, position, layer): a 64-bit mix of the four.
        gen.manual_seed((seed * 1_000_003 + step) * 1_000_033 + pos * 101 + layer_id)
        torch.rand(shape, generator=gen, out=u[i])
    if pinned:
        u = u.to(device, non_blocking=True)
    return u >= p


class SampleDropout(nn.Module):
    """nn.Dropout whose mask depends on the sample's key, not on the process's RNG state.

    Outside a `sample_keys` block it behaves exactly like nn.Dropout (torch's global RNG)."""

    def __init__(self, p: float = 0.5, layer_id: int = 0):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.layer_id = layer_id

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keys = _SAMPLE_KEYS.get()
        if keys is None:
            return nn.functional.dropout(x, self.p, True)
        seed, step, positions = keys
        if positions.numel() != x.shape[0]:
            raise RuntimeError(f"sample_keys holds {positions.numel()} positions, batch has {x.shape[0]}")
        keep = keep_mask(seed, step, positions, self.layer_id, tuple(x.shape[1:]), self.p, x.device)
        return x * keep.to(x.dtype) / (1.0 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}, layer_id={self.layer_id}"


def use_sample_dropout(model: nn.Module) -> nn.Module:
    """Replace every nn.Dropout of `model` in place by SampleDropout with a distinct layer id."""
    layer_id = 0
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, SampleDropout(child.p, layer_id))
                layer_id += 1
    return model


# ---------------------------------------------------------------------------------------------
# Small CNNs for tests (any image size; adaptive pooling fixes the FC head's input)


class TinyCNN(nn.Module):
    """Two conv layers and a two-layer FC head: for tests that must run in a second."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((4, 4))
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Linear(16 * 4 * 4, 128), nn.ReLU(inplace=True), nn.Linear(128, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))  # (B, 16, 4, 4)
        return self.classifier(torch.flatten(x, 1))  # (B, num_classes)


class CifarAlexNet(nn.Module):
    """AlexNet's shape at CIFAR size: 5 conv layers (~0.6 M params), FC head of ~3.2 M params."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(32, 96, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(96, 128, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(128, 96, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((4, 4))
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Linear(96 * 4 * 4, 1024), nn.ReLU(inplace=True),
            nn.Dropout(0.5), nn.Linear(1024, 1024), nn.ReLU(inplace=True),
            nn.Linear(1024, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))  # (B, 96, 4, 4)
        return self.classifier(torch.flatten(x, 1))


def tiny_sequential(num_classes: int = 10) -> nn.Sequential:
    """A flat nn.Sequential CNN: the split works on it without torch.fx."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d((4, 4)), nn.Flatten(),
        nn.Linear(8 * 16, 64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, num_classes),
    )


# ---------------------------------------------------------------------------------------------

_TORCHVISION = ["alexnet", "vgg11", "vgg13", "vgg16", "vgg19",
                "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn", "resnet18", "resnet50"]
_SMALL: dict[str, Callable[[int], nn.Module]] = {
    "tiny_cnn": TinyCNN, "cifar_alexnet": CifarAlexNet, "tiny_sequential": tiny_sequential,
}
MODEL_NAMES: tuple[str, ...] = tuple(_TORCHVISION) + tuple(_SMALL)
# Smallest square input each model accepts (AlexNet's stride-4 stem and three max-pools need 63,
# VGG's five 2x2 max-pools need 32).
MIN_IMAGE_SIZE = {"alexnet": 63, **{n: 32 for n in _TORCHVISION if n.startswith("vgg")}}


def get_model(name: str, num_classes: int = 1000) -> nn.Module:
    """A randomly initialised model by name (weights are never downloaded), with SampleDropout."""
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; expected one of: {', '.join(MODEL_NAMES)}")
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    if name in _SMALL:
        model = _SMALL[name](num_classes)
    else:
        model = getattr(tvm, name)(weights=None, num_classes=num_classes)
    return use_sample_dropout(model)
