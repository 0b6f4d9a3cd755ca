"""A small CNN with batch norm in its CONV body, for tutorial T6 (`--model tutorials.t6_models:bn_cnn`).

Two conv + BatchNorm2d blocks (one call per BN layer and step), an FC head. Batch norm makes each
sample's output depend on the other samples of its batch: with `--bn-stats local` every CONV
worker normalises over its own slice only, and training is no longer single-process SGD on the
global batch.
"""
import torch.nn as nn


def bn_cnn(num_classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, num_classes),
    )
