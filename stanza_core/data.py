"""Datasets and the global batch sequence shared by every strategy and world size.

Step t's global batch holds the samples at positions t*G .. t*G+G-1 of an endless stream that
walks a seeded permutation of the dataset, a new permutation each epoch. A data worker loads
only its slice of positions, so every strategy sees the same samples in the same places.

Datasets: `synthetic` (class-dependent patterns plus noise, made on demand from the sample's
index), `digits` (scikit-learn's 8x8 handwritten digits, shipped as `digits.npz`, upsampled),
`cifar10:PATH` (the python-pickle batches data_batch_1..5), `imagefolder:PATH` (torchvision
ImageFolder layout).
"""
from __future__ import annotations

import functools
import os
import pickle

import numpy as np
import torch
import torch.nn.functional as F

from .errors import ConfigError

SYNTHETIC_SIZE = 50_000
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class Dataset:
    num_classes: int
    size: int

    def get(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Images (n, 3, H, W) float32 and labels (n,) int64 of these dataset indices."""
        raise NotImplementedError


class Synthetic(Dataset):
    def __init__(self, image_size: int, num_classes: int, seed: int):
        self.size, self.num_classes, self.image_size, self.seed = SYNTHETIC_SIZE, num_classes, image_size, seed
        g = torch.Generator().manual_seed(seed + 7)
        # One low-resolution template per class: learnable, yet noisy enough to train for a while.
        self.templates = torch.randn(num_classes, 3, 4, 4, generator=g)

    def get(self, indices):
        g = torch.Generator()
        xs, ys = [], []
        for i in indices:
            g.manual_seed(self.seed * 1_000_003 + int(i))
            y = int(torch.randint(self.num_classes, (1,), generator=g))
            noise = torch.randn(3, self.image_size, self.image_size, generator=g)
            xs.append(noise)
            ys.append(y)
        y = torch.tensor(ys, dtype=torch.int64)
        pattern = F.interpolate(self.templates[y], size=self.image_size, mode="nearest")
        return torch.stack(xs) + pattern, y


class _InMemory(Dataset):
    """Small uint8/float image arrays held in memory, resized per batch to the model's input."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, image_size: int):
        self.images, self.labels, self.image_size = images, labels, image_size  # images (n, 3, h, w) in [0, 1]
        self.size, self.num_classes = len(labels), int(labels.max()) + 1
        self.mean = torch.tensor(MEAN).view(1, 3, 1, 1)
        self.std = torch.tensor(STD).view(1, 3, 1, 1)

    def get(self, indices):
        idx = torch.as_tensor(indices, dtype=torch.int64)
        x = self.images[idx].float()
        if x.shape[-1] != self.image_size:
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False)
        return (x - self.mean) / self.std, self.labels[idx]


# scikit-learn's load_digits (1797 images of 8x8 pixels in 0..16, labels 0-9, in its order), saved once
# so that training needs no scikit-learn (tests/unit/test_packaging.py compares the two):
#   python -c "import numpy as np; from sklearn.datasets import load_digits; d = load_digits(); np.savez_compressed(
#   'stanza_core/digits.npz', images=d.images.astype(np.uint8), labels=d.target.astype(np.uint8))"
# The data: the test set of "Optical Recognition of Handwritten Digits" (E. Alpaydin, C. Kaynak, 1998),
# UCI Machine Learning Repository, https://doi.org/10.24432/C50P49, licensed CC BY 4.0.
DIGITS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits.npz")


def _digits(image_size: int) -> Dataset:
    with np.load(DIGITS_FILE, allow_pickle=False) as d:
        images, labels = d["images"], d["labels"]
    img = torch.from_numpy(images.astype(np.float32) / 16.0).unsqueeze(1).expand(-1, 3, -1, -1)
    return _InMemory(img.contiguous(), torch.from_numpy(labels.astype(np.int64)), image_size)


def _cifar10(path: str, image_size: int) -> Dataset:
    files = [os.path.join(path, f"data_batch_{i}") for i in range(1, 6)]
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise ConfigError(f"cifar10:{path}: missing {os.path.basename(missing[0])}; expected the python-pickle "
                          f"batches data_batch_1..data_batch_5 (cifar-10-batches-py)")
    xs, ys = [], []
    for f in files:
        with open(f, "rb") as fh:
            d = pickle.load(fh, encoding="bytes")
        xs.append(np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(d[b"labels"], dtype=np.int64))
    img = torch.from_numpy(np.concatenate(xs)).float().div_(255.0)
    return _InMemory(img, torch.from_numpy(np.concatenate(ys)), image_size)


class _ImageFolder(Dataset):
    def __init__(self, path: str, image_size: int):
        import torchvision.datasets as tvd  # torchvision: ~1000 more modules; only a torchvision dataset needs it
        import torchvision.transforms as T  # torchvision: ~1000 more modules; only a torchvision dataset needs it

        tf = T.Compose([T.Resize(image_size), T.CenterCrop(image_size), T.ToTensor(), T.Normalize(MEAN, STD)])
        try:
            self.ds = tvd.ImageFolder(path, transform=tf)
        except (FileNotFoundError, OSError) as e:
            raise ConfigError(f"imagefolder:{path}: {str(e).splitlines()[0]}; expected PATH/<class>/<image files>") from None
        self.size, self.num_classes = len(self.ds), len(self.ds.classes)

    def get(self, indices):
        items = [self.ds[int(i)] for i in indices]
        return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items], dtype=torch.int64)


def open_dataset(spec: str, image_size: int, num_classes: int, seed: int) -> Dataset:
    """Open a dataset by its CLI spec; every bad spec is a one-line ConfigError."""
    kind, _, path = spec.partition(":")
    if kind == "synthetic" and not path:
        ds: Dataset = Synthetic(image_size, num_classes, seed)
    elif kind == "digits" and not path:
        ds = _digits(image_size)
    elif kind in ("cifar10", "imagefolder"):
        if not path:
            raise ConfigError(f"--dataset {kind} needs a path: {kind}:PATH")
        if not os.path.isdir(path):
            raise ConfigError(f"--dataset {spec}: {path} is not a directory")
        ds = _cifar10(path, image_size) if kind == "cifar10" else _ImageFolder(path, image_size)
    else:
        raise ConfigError(f"unknown dataset {spec!r}; expected synthetic, digits, cifar10:PATH or imagefolder:PATH")
    if ds.num_classes > num_classes:
        raise ConfigError(f"--dataset {spec} has {ds.num_classes} classes but --num-classes is {num_classes}")
    return ds


@functools.lru_cache(maxsize=4)
def _permutation(size: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(size)


def batch_indices(ds: Dataset, step: int, global_batch: int, seed: int, positions: slice) -> list[int]:
    """Dataset indices of `positions` (a slice of 0..G-1) in step `step`'s global batch."""
    out = []
    for p in range(step * global_batch + positions.start, step * global_batch + positions.stop):
        epoch, offset = divmod(p, ds.size)
        out.append(int(_permutation(ds.size, seed, epoch)[offset]))
    return out
