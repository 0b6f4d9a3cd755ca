"""Model zoo: torchvision CNNs (random init, never downloaded) and small CNNs for fast tests.

Glossary (the paper's vocabulary, used across the package):
  CONV body  - the convolutional prefix of a CNN: little of the parameters, most of the compute.
  FC head    - the fully connected suffix: most of the parameters, little of the compute.
  boundary   - the single tensor passed from the CONV body to the FC head (its first module's name).

Every nn.Dropout is replaced by `SampleDropout`, which hashes each sample's mask from a key
(seed, step, position of the sample in the global batch, layer, element). So a sample gets the
same mask whichever worker processes it, on whatever device, and distributed runs stay equal to
the single-process oracle.
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib
import inspect
import math
import os
from typing import Callable

import torch
import torch.nn as nn

# ---------------------------------------------------------------------------------------------
# Per-sample dropout


# A 32-bit integer mixer (Chris Wellons' lowbias32: xor-shift, multiply, three times; a bijection
# of [0, 2^32) with near-ideal avalanche). Masks are hashed from their keys with it, in torch
# integer ops on the tensor's own device: integer arithmetic is exact on every device, so the
# CPU and every GPU draw the same bits. Values are held in int64 in [0, 2^32). A multiplier
# c >= 2^31 is applied as c - 2^32 (congruent mod 2^32, |c - 2^32| < 2^31): the product of a
# 32-bit value and it stays inside int64 (no signed overflow, exact on every device), and
# `& MASK32` of the two's-complement result is the product mod 2^32.
MASK32 = 0xFFFFFFFF
_MIX_MULTIPLIERS = tuple(c - (1 << 32) if c >= 1 << 31 else c for c in (0x7FEB352D, 0x846CA68B))
_SEED_SALT, _STEP_HI_SALT = 0x9E3779B9, 0x85EBCA6B  # fold the key fields apart from one another


def mix32(x):
    """lowbias32 of x in [0, 2^32): a Python int or an int64 tensor (elementwise), same bits.
    A tensor is mixed into a new tensor, in place after the first op (no large temporaries)."""
    if not isinstance(x, torch.Tensor):
        x = x ^ (x >> 16)
        x = (x * _MIX_MULTIPLIERS[0]) & MASK32
        x = x ^ (x >> 15)
        x = (x * _MIX_MULTIPLIERS[1]) & MASK32
        return x ^ (x >> 16)
    x = x ^ (x >> 16)
    x.mul_(_MIX_MULTIPLIERS[0]).bitwise_and_(MASK32)
    x.bitwise_xor_(x >> 15)
    x.mul_(_MIX_MULTIPLIERS[1]).bitwise_and_(MASK32)
    return x.bitwise_xor_(x >> 16)


def layer_key(seed: int, step: int, layer_id: int) -> int:
    """The 32-bit key of (seed, step, layer), folded on the host in Python integers."""
    k = mix32((int(seed) ^ _SEED_SALT) & MASK32)
    k = mix32(k ^ (int(step) & MASK32))
    k = mix32(k ^ ((int(step) >> 32) ^ _STEP_HI_SALT) & MASK32)
    return mix32(k ^ (int(layer_id) & MASK32))


_ELEMENT_KEYS: dict[tuple[int, str], torch.Tensor] = {}  # (elements per sample, device) -> mix32(arange)


def _element_keys(n: int, device: torch.device) -> torch.Tensor:
    """mix32(i) for i in [0, n) on `device`, made once per (n, device): the same every step."""
    key = (n, str(device))
    if key not in _ELEMENT_KEYS:
        if len(_ELEMENT_KEYS) >= 64:  # a bounded cache: models have few distinct dropout shapes
            _ELEMENT_KEYS.pop(next(iter(_ELEMENT_KEYS)))
        _ELEMENT_KEYS[key] = mix32(torch.arange(n, dtype=torch.int64, device=device))
    return _ELEMENT_KEYS[key]


def keep_threshold(p: float) -> int:
    """Keep an element iff its 32-bit hash h >= this: u = h / 2^32 is uniform on [0, 1) and
    u >= p  <=>  h >= ceil(p * 2^32) (exact: p * 2^32 is p with its exponent shifted)."""
    return math.ceil(p * 2.0**32)


def keep_uniforms(seed: int, step: int, positions: torch.Tensor, layer_id: int, n: int) -> torch.Tensor:
    """The 32-bit hashes (len(positions), n) of the elements of these samples, as int64 on the
    device of `positions`: row i, element j is

        mix32(element_key(j) ^ mix32(positions[i] ^ layer_key(seed, step, layer_id)))

    with element_key(j) = mix32(j). Vectorised over samples and elements; a row depends only on
    its own sample's key, never on which other samples share the batch."""
    k = layer_key(seed, step, layer_id)
    rows = mix32(positions.to(torch.int64).reshape(-1, 1) ^ k)  # (b, 1): one key per sample
    return mix32(_element_keys(n, positions.device).reshape(1, -1) ^ rows)  # (b, n)


def keep_mask(seed: int, step: int, positions: torch.Tensor, layer_id: int, shape: tuple[int, ...], p: float,
              device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean keep-mask (len(positions), *shape): row i keeps each element with probability 1 - p,
    from the hash of (seed, step, positions[i], layer_id, element index) (`keep_uniforms`).

    Computed on `device` (default: the device of `positions`) by torch integer ops, with no
    per-sample loop; positions on another device are moved there first (`sample_keys` hands
    SampleDropout positions already on the activations' device, made there without a copy)."""
    if device is not None and positions.device != torch.device(device):
        positions = positions.to(device)
    n = 1
    for d in shape:
        n *= int(d)
    h = keep_uniforms(seed, step, positions, layer_id, n)
    return (h >= keep_threshold(p)).reshape(positions.numel(), *shape)


class _Keys:
    """The keys of one `sample_keys` block, with its positions on each device they are asked for."""

    def __init__(self, seed: int, step: int, positions: torch.Tensor):
        self.seed, self.step = int(seed), int(step)
        self.positions = positions.detach()
        self._on: dict[torch.device, torch.Tensor] = {positions.device: self.positions}

    def positions_on(self, device: torch.device) -> torch.Tensor:
        """The positions on `device`. A run of consecutive positions (every strategy's slice of
        the global batch) is made there by arange: no host-to-device copy, no host sync."""
        if device not in self._on:
            pos, n = self.positions, self.positions.numel()
            first = int(pos[0]) if n and pos.device.type == "cpu" else None
            if first is not None and torch.equal(pos, torch.arange(first, first + n, dtype=pos.dtype)):
                self._on[device] = torch.arange(first, first + n, dtype=torch.int64, device=device)
            else:
                self._on[device] = pos.to(device)
        return self._on[device]


_SAMPLE_KEYS: contextvars.ContextVar[_Keys | None] = contextvars.ContextVar("stanza_sample_keys", default=None)


@contextlib.contextmanager
def sample_keys(seed: int, step: int, positions: torch.Tensor):
    """Within this block, SampleDropout draws the mask of the sample at `positions[i]` of the
    global batch of `step` from the hash of (seed, step, position, layer) (`keep_mask`)."""
    token = _SAMPLE_KEYS.set(_Keys(seed, step, positions))
    try:
        yield
    finally:
        _SAMPLE_KEYS.reset(token)


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
        if keys.positions.numel() != x.shape[0]:
            raise RuntimeError(f"sample_keys holds {keys.positions.numel()} positions, batch has {x.shape[0]}")
        keep = keep_mask(keys.seed, keys.step, keys.positions_on(x.device), self.layer_id, tuple(x.shape[1:]), self.p)
        return x * keep / (1.0 - self.p)  # bool promotes to x's dtype: x * 1.0 or x * 0.0

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
                "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn", "resnet18", "resnet50", "googlenet", "inception_v3"]
# GoogLeNet and Inception v3 are built without their auxiliary classifiers: those run only in
# training mode, return a tuple instead of the logits, and would sit in neither part of a split.
_TORCHVISION_KWARGS = {"googlenet": {"aux_logits": False, "init_weights": True},
                       "inception_v3": {"aux_logits": False, "init_weights": True}}
_SMALL: dict[str, Callable[[int], nn.Module]] = {
    "tiny_cnn": TinyCNN, "cifar_alexnet": CifarAlexNet, "tiny_sequential": tiny_sequential,
}
MODEL_NAMES: tuple[str, ...] = tuple(_TORCHVISION) + tuple(_SMALL)
# Smallest square input each model accepts (AlexNet's stride-4 stem and three max-pools need 63,
# Inception v3's stem and reductions need 75,
# VGG's five 2x2 max-pools need 32).
MIN_IMAGE_SIZE = {"alexnet": 63, "inception_v3": 75, **{n: 32 for n in _TORCHVISION if n.startswith("vgg")}}


PICKLED_SUFFIX = ".model.pkl"  # a model object saved by save_model_object (stanza_core.train_model)


def is_factory_spec(name: str) -> bool:
    """True for a `package.module:factory` model spec (a user's model, not a zoo name)."""
    return isinstance(name, str) and ":" in name and not name.endswith(PICKLED_SUFFIX)


def is_pickled_spec(name: str) -> bool:
    return isinstance(name, str) and name.endswith(PICKLED_SUFFIX)


def known_model(name: str) -> bool:
    """A zoo name, a package.module:factory spec, or a saved model object (checked when built)."""
    return isinstance(name, str) and (name in MODEL_NAMES or is_factory_spec(name) or is_pickled_spec(name))


def save_model_object(model: nn.Module, path: str) -> str:
    """Pickle `model` by value (cloudpickle: classes defined in a notebook travel too) to `path`,
    which must end in .model.pkl; every rank of a job given `--model PATH` loads this object."""
    import cloudpickle

    if not path.endswith(PICKLED_SUFFIX):
        raise ValueError(f"a saved model object's file name must end in {PICKLED_SUFFIX}, got {path!r}")
    with open(path, "wb") as fh:
        cloudpickle.dump(model, fh)
    return path


def load_model_object(path: str) -> nn.Module:
    import pickle

    if not os.path.isfile(path):
        raise ValueError(f"model {path!r}: no such file")
    try:
        with open(path, "rb") as fh:
            model = pickle.load(fh)  # the user's own file, written by save_model_object
    except Exception as e:
        raise ValueError(f"model {path!r}: cannot be loaded ({type(e).__name__}: {_one_line(e)})") from None
    if not isinstance(model, nn.Module):
        raise ValueError(f"model {path!r} holds a {type(model).__name__}, expected an nn.Module")
    return model


def load_factory(spec: str) -> Callable[..., nn.Module]:
    """The callable named by `package.module:factory` (the factory may be a dotted attribute,
    e.g. `pkg.mod:Class.build`). ValueError with one line on any failure."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr or ":" in attr:
        raise ValueError(f"model {spec!r}: expected package.module:factory")
    try:
        obj = importlib.import_module(module_name)
    except Exception as e:  # ImportError, or the module itself raising on import
        raise ValueError(f"model {spec!r}: cannot import {module_name!r} ({type(e).__name__}: {_one_line(e)})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"model {spec!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"model {spec!r}: {attr!r} is not callable (expected a function or class returning an nn.Module)")
    return obj


def _accepts_num_classes(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature
        return False
    return any(p.name == "num_classes" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def build_from_factory(spec: str, num_classes: int) -> nn.Module:
    """Call the factory of `spec` (with num_classes=... when its signature accepts it)."""
    factory = load_factory(spec)
    try:
        model = factory(num_classes=num_classes) if _accepts_num_classes(factory) else factory()
    except Exception as e:
        raise ValueError(f"model {spec!r}: the factory raised {type(e).__name__}: {_one_line(e)}") from None
    if not isinstance(model, nn.Module):
        raise ValueError(f"model {spec!r}: the factory returned {type(model).__name__}, expected an nn.Module")
    return model


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def get_model(name: str, num_classes: int = 1000) -> nn.Module:
    """A randomly initialised model (weights are never downloaded), with SampleDropout.

    `name` is a zoo name (MODEL_NAMES) or `package.module:factory`: a callable returning an
    nn.Module, given `num_classes=` when its signature accepts it (e.g. `torchvision.models:resnet34`
    or `mypkg.nets:build`). Every nn.Dropout becomes a SampleDropout in both cases."""
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    if is_factory_spec(name):
        return use_sample_dropout(build_from_factory(name, num_classes))
    if is_pickled_spec(name):
        return use_sample_dropout(load_model_object(name))
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; expected one of: {', '.join(MODEL_NAMES)} "
                         f"or package.module:factory")
    if name in _SMALL:
        model = _SMALL[name](num_classes)
    else:  # torchvision only when asked for: importing it costs ~3 s of CPU in every rank process
        import torchvision.models as tvm

        model = getattr(tvm, name)(weights=None, num_classes=num_classes, **_TORCHVISION_KWARGS.get(name, {}))
    return use_sample_dropout(model)


def check_model(model: nn.Module, input_shape, num_classes: int, name: str = "model") -> None:
    """One training-mode forward of 2 samples: the model must run on `input_shape` (C, H, W) and
    return logits of shape (2, num_classes). ValueError with one line otherwise. Leaves no trace:
    the RNG state, buffers (batch-norm running statistics) and gradients are as they were."""
    param = next(model.parameters(), None)
    if param is None:
        raise ValueError(f"{name} has no parameters to train")
    buffers = {k: v.detach().clone() for k, v in model.named_buffers()}
    was_training = model.training
    shape = "(2, " + ", ".join(str(v) for v in input_shape) + ")"
    try:
        with torch.random.fork_rng(devices=[param.device] if param.device.type == "cuda" else []), torch.no_grad():
            model.train()
            out = model(torch.zeros((2, *input_shape), device=param.device))
    except Exception as e:
        raise ValueError(f"{name} fails on an input of shape {shape} in training mode "
                         f"({type(e).__name__}: {_one_line(e)}); check --image-size") from None
    finally:
        model.train(was_training)
        with torch.no_grad():
            for k, v in model.named_buffers():
                v.copy_(buffers[k])
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"{name} returns a {type(out).__name__} in training mode, expected a logits tensor "
                         f"(auxiliary outputs? build it without them, e.g. aux_logits=False)")
    if tuple(out.shape) != (2, num_classes):
        raise ValueError(f"{name} maps {shape} to logits of shape {tuple(out.shape)}, expected (2, {num_classes}) "
                         f"(--num-classes {num_classes})")
