"""Model zoo: torchvision CNNs (random init, never downloaded) and small CNNs for fast tests.

Glossary (the paper's vocabulary, used across the package):
  CONV body  - the convolutional prefix of a CNN: little of the parameters, most of the compute.
  FC head    - the fully connected suffix: most of the parameters, little of the compute.
  boundary   - the single tensor passed from the CONV body to the FC head (its first module's name).

Every nn.Dropout is replaced by `SampleDropout`, whose mask of a sample is row `position` of one
draw per (seed, step, layer) over the whole global batch. So a sample gets the same mask whichever
worker processes it, and distributed runs stay equal to the single-process oracle.
"""
from __future__ import annotations

import pickle
import contextlib
import contextvars
import importlib
import inspect
import os
from typing import Callable

import torch
import torch.nn as nn
import cloudpickle

# ---------------------------------------------------------------------------------------------
# Per-sample dropout
#
# Layer (seed, step, layer_id) draws one uniform per element of the whole global batch,
# (rows, *shape), from a generator seeded by a host hash of the three; the sample at position i
# of the global batch keeps element j iff u[i, j] >= p. Every rank draws the same tensor (same
# seed, same shape, same device kind) and multiplies its own samples by their rows, so a sample's
# mask never depends on which rank computes it, and a layer's masks cost torch's own handful of
# operator calls: per step one draw, one compare and one scale (cached for the step's later
# chunks), per forward one slice and one multiply, whatever the batch.
#
# The bits are the generator's: torch's CPU generator (mt19937, drawn serially: a row does not
# depend on how many rows are drawn, nor on the thread count) or the CUDA generator (Philox) of
# the activations' device. So a job's ranks, which share one device kind, draw the same masks; a
# CPU run and a GPU run draw different ones (as their arithmetic differs anyway).


# A 32-bit integer mixer (Chris Wellons' lowbias32: xor-shift, multiply, three times; a bijection
# of [0, 2^32) with near-ideal avalanche), used on the host to fold (seed, step, layer) into the
# generator's seed.
MASK32 = 0xFFFFFFFF
_MIX_MULTIPLIERS = (0x7FEB352D, 0x846CA68B)
_SEED_SALT, _STEP_HI_SALT, _LO_SALT = 0x9E3779B9, 0x85EBCA6B, 0x68E31DA4  # fold the key fields apart


def mix32(x: int) -> int:
    """lowbias32 of the Python int x in [0, 2^32)."""
    x ^= x >> 16
    x = (x * _MIX_MULTIPLIERS[0]) & MASK32
    x ^= x >> 15
    x = (x * _MIX_MULTIPLIERS[1]) & MASK32
    return x ^ (x >> 16)


def layer_key(seed: int, step: int, layer_id: int) -> int:
    """The 32-bit key of (seed, step, layer), folded on the host in Python integers."""
    k = mix32((int(seed) ^ _SEED_SALT) & MASK32)
    k = mix32(k ^ (int(step) & MASK32))
    k = mix32(k ^ ((int(step) >> 32) ^ _STEP_HI_SALT) & MASK32)
    return mix32(k ^ (int(layer_id) & MASK32))


def layer_seed(seed: int, step: int, layer_id: int) -> int:
    """The 63-bit generator seed of layer `layer_id` at `step` of a run seeded `seed`."""
    hi = layer_key(seed, step, layer_id)
    return ((hi << 32) | mix32(hi ^ _LO_SALT)) & ((1 << 63) - 1)


_GENERATORS: dict[torch.device, torch.Generator] = {}  # one per device, reseeded for every draw


def _generator(device: torch.device, seed: int) -> torch.Generator | None:
    """The device's generator, seeded (None on the meta device: nothing is drawn there)."""
    if device.type == "meta":
        return None
    if device not in _GENERATORS:
        _GENERATORS[device] = torch.Generator(device=device)
    return _GENERATORS[device].manual_seed(seed)


def keep_uniforms(seed: int, step: int, layer_id: int, rows: int, shape: tuple[int, ...],
                  device: torch.device | str = "cpu") -> torch.Tensor:
    """The uniforms (rows, *shape) of layer `layer_id` at `step`, float32 on `device`: row i
    belongs to the sample at position i of the global batch."""
    device = torch.device(device)
    return torch.rand((int(rows), *shape), generator=_generator(device, layer_seed(seed, step, layer_id)),
                      device=device)


def keep_scale(seed: int, step: int, layer_id: int, rows: int, shape: tuple[int, ...], p: float,
               device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(rows, *shape) in `dtype`: 1 / (1 - p) where the element is kept (uniform >= p), else 0."""
    u = keep_uniforms(seed, step, layer_id, rows, shape, device)
    scale = u.ge(p).mul(1.0 / (1.0 - p))  # bool * float: float32
    return scale if dtype == torch.float32 else scale.to(dtype)


def keep_mask(seed: int, step: int, positions, layer_id: int, shape: tuple[int, ...], p: float,
              device: torch.device | str | None = None, rows: int | None = None) -> torch.Tensor:
    """Boolean keep-mask (len(positions), *shape) of the samples at `positions` of the global
    batch (`rows` samples; default: the largest position + 1, which on the CPU gives the same rows
    as any larger count). Each element is kept with probability 1 - p."""
    keys = _Keys(seed, step, positions, rows)
    device = torch.device(device) if device is not None else keys.device
    return keys.rows_of(keep_scale(seed, step, layer_id, keys.rows, shape, p, device)) != 0


class _Keys:
    """The keys of one `sample_keys` block: seed, step, and where its samples sit in the global
    batch (`rows` of it), as a run start..stop (a `range`, made by every strategy) or as a tensor
    of scattered positions."""

    def __init__(self, seed: int, step: int, positions, rows: int | None = None):
        self.seed, self.step = int(seed), int(step)
        if isinstance(positions, range) and positions.step == 1:
            self.run, self.index, n, last = positions, None, len(positions), positions.stop - 1
        else:  # a tensor (or list): scattered positions, read on the host once here
            pos = torch.as_tensor(positions, dtype=torch.int64).detach().cpu().reshape(-1)
            values = pos.tolist()
            n, last = len(values), max(values, default=-1)
            first = values[0] if values else 0
            if values == list(range(first, first + n)):
                self.run, self.index = range(first, first + n), None
            else:
                self.run, self.index = None, pos
        self.count = n
        self.rows = int(rows) if rows is not None else last + 1
        if n and last >= self.rows:
            raise ValueError(f"sample position {last} is outside a global batch of {self.rows}")
        self.device = self.index.device if self.index is not None else torch.device("cpu")
        self._index_on: dict[torch.device, torch.Tensor] = {}

    def rows_of(self, t: torch.Tensor) -> torch.Tensor:
        """This block's rows of the global-batch tensor `t`: a slice (no copy) for a run."""
        if self.run is not None:
            return t[self.run.start:self.run.stop]
        if t.device not in self._index_on:
            self._index_on[t.device] = self.index.to(t.device)
        return t.index_select(0, self._index_on[t.device])


_SAMPLE_KEYS: contextvars.ContextVar[_Keys | None] = contextvars.ContextVar("stanza_sample_keys", default=None)


@contextlib.contextmanager
def sample_keys(seed: int, step: int, positions, rows: int | None = None):
    """Within this block, SampleDropout gives the sample at `positions[i]` of the global batch of
    `step` (`rows` samples: pass the global batch; default the largest position + 1) the mask of
    row positions[i] of the layer's draw (`keep_scale`). `positions`: a range (a strategy's slice)
    or a tensor / list of positions."""
    token = _SAMPLE_KEYS.set(_Keys(seed, step, positions, rows))
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
        self._scale: tuple[tuple, torch.Tensor] | None = None  # (key, keep_scale) of the last step drawn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keys = _SAMPLE_KEYS.get()
        if keys is None:
            return nn.functional.dropout(x, self.p, True)
        if keys.count != x.shape[0]:
            raise RuntimeError(f"sample_keys holds {keys.count} positions, batch has {x.shape[0]}")
        shape = tuple(x.shape[1:])
        key = (keys.seed, keys.step, keys.rows, shape, x.device, x.dtype, self.p)
        if self._scale is None or self._scale[0] != key:  # once per step: later chunks reuse it
            self._scale = (key, keep_scale(keys.seed, keys.step, self.layer_id, keys.rows, shape, self.p,
                                           x.device, x.dtype))
        return x * keys.rows_of(self._scale[1])

    def __getstate__(self):  # the step's cached draw is not part of the module
        state = dict(self.__dict__)
        state["_scale"] = None
        return state

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
    if not path.endswith(PICKLED_SUFFIX):
        raise ValueError(f"a saved model object's file name must end in {PICKLED_SUFFIX}, got {path!r}")
    with open(path, "wb") as fh:
        cloudpickle.dump(model, fh)
    return path


def load_model_object(path: str) -> nn.Module:
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


def get_model(name: str, num_classes: int = 1000, device: str | None = None) -> nn.Module:
    """A randomly initialised model (weights are never downloaded), with SampleDropout.

    `name` is a zoo name (MODEL_NAMES) or `package.module:factory`: a callable returning an
    nn.Module, given `num_classes=` when its signature accepts it (e.g. `torchvision.models:resnet34`
    or `mypkg.nets:build`). Every nn.Dropout becomes a SampleDropout in both cases. `device`
    ("meta": shapes, no values): the zoo model is built under that default device; torchvision
    is imported before it is set (under a meta default device, torch 2.7's import of
    torch._dynamo, which torchvision.ops pulls in, runs tensor ops and fails on a circular import)."""
    if device is not None:
        if name in MODEL_NAMES and name not in _SMALL:
            import torchvision.models  # noqa: F401 - before the default device (docstring); ~3 s, zoo models only
        with torch.device(device):
            return get_model(name, num_classes)
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
        import torchvision.models as tvm  # torchvision: ~1000 more modules; zoo models only

        model = getattr(tvm, name)(weights=None, num_classes=num_classes, **_TORCHVISION_KWARGS.get(name, {}))
    return use_sample_dropout(model)


def check_model(model: nn.Module, input_shape, num_classes: int, name: str = "model") -> tuple[str, int] | None:
    """One training-mode forward of 2 samples: the model must run on `input_shape` (C, H, W) and
    return logits of shape (2, num_classes). ValueError with one line otherwise. Leaves no trace:
    the RNG state, buffers (batch-norm running statistics) and gradients are as they were.

    Returns the batch-norm layer that sees the fewest values per channel per sample (its name and
    that count: its input's spatial size), or None for a model without batch norm: a training
    batch of b samples gives that layer b x count values per channel, and batch norm needs more
    than one (engine.config.check_model_layout)."""
    param = next(model.parameters(), None)
    if param is None:
        raise ValueError(f"{name} has no parameters to train")
    buffers = {k: v.detach().clone() for k, v in model.named_buffers()}
    was_training = model.training
    shape = "(2, " + ", ".join(str(v) for v in input_shape) + ")"
    per_sample: dict[str, int] = {}

    def seen(layer: str):
        def hook(_module, args):  # returns None: the input passes unchanged
            x = args[0]
            per_sample.setdefault(layer, x.numel() // max(1, x.shape[0] * x.shape[1]))
        return hook
    hooks = [m.register_forward_pre_hook(seen(n)) for n, m in model.named_modules()
             if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    try:
        with torch.random.fork_rng(devices=[param.device] if param.device.type == "cuda" else []), torch.no_grad():
            model.train()
            out = model(torch.zeros((2, *input_shape), device=param.device))
    except Exception as e:
        raise ValueError(f"{name} fails on an input of shape {shape} in training mode "
                         f"({type(e).__name__}: {_one_line(e)}); check --image-size") from None
    finally:
        for h in hooks:
            h.remove()
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
    return min(per_sample.items(), key=lambda kv: kv[1]) if per_sample else None
