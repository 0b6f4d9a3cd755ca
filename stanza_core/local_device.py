"""The device a job on this machine runs on: "auto" resolved once, before any job starts.

    local_device("auto") -> "cuda" when torch sees a GPU here, else "cpu"
    local_device("cuda") -> "cuda", or a one-line error when torch sees none

(train.rank_device picks each rank's torch.device inside a job; perf.device_profile turns a
device-table name into a DeviceProfile: three different questions, three names.)
"""
from __future__ import annotations

import torch

from . import checks
from .engine.config import DEVICES
from .errors import ConfigError


def local_device(device: str) -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'cpu'; 'cuda' without a GPU is an error."""
    checks.one_of("device", device, DEVICES)
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device='cuda' but torch sees no CUDA device; use device='cpu' or 'auto'")
    return device
