"""Shared by every test folder: the repository root, and a fixed torch seed per test so that
randomly initialised models and inputs are the same on every run."""
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(autouse=True)
def _torch_seed():
    torch.manual_seed(0)
    yield
