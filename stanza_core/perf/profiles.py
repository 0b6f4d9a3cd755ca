"""Profiles of named zoo models, built once per process on the meta device: a profile needs shapes,
parameter counts and FLOPs, never values (building VGG-16's 138 M parameters on the CPU takes ~3 s;
on meta, milliseconds, and the profile is the same field for field)."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from .. import checks
from ..anatomy import Profile, profile_model
from ..models import MIN_IMAGE_SIZE, MODEL_NAMES, get_model


def shape_model(name: str, num_classes: int = 1000) -> torch.nn.Module:
    """Model `name` for counting, not training: zoo models on the meta device (shapes, no values);
    a user's `package.module:factory` or pickled model on the CPU (it may need real tensors)."""
    return get_model(name, num_classes, device="meta" if name in MODEL_NAMES else None)


@functools.lru_cache(maxsize=32)
def named_profile(name: str, image_size: int = 224, num_classes: int = 1000, batch_size: int = 32) -> Profile:
    """FLOPs/params profile of zoo model `name` at image_size x image_size (no timings).

    batch_size only matters for the automatic split point (the per-worker batch it optimises
    for); AlexNet and VGG cut at `avgpool` at any batch."""
    checks.model_fits(name, None)
    checks.positive_int(f"image_size for {name}", image_size, MIN_IMAGE_SIZE.get(name, 8))
    try:
        return profile_model(shape_model(name, num_classes), (3, image_size, image_size), batch_size, name=name)
    except RuntimeError as e:  # e.g. VGG's five max-pools need at least 32x32
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{name} cannot take {image_size}x{image_size} images: {reason}") from None


def load_profile(path: str | Path) -> Profile:
    """A Profile saved as JSON by `Profile.to_dict()` (e.g. one measured with time=True)."""
    try:
        return Profile.from_dict(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        raise ValueError(f"profile file {path} does not exist") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"profile file {path} is not a Profile JSON ({type(e).__name__}: {e})") from None
