"""T1 solutions: the anatomy of a CNN and the split."""
from __future__ import annotations

import torch

from stanza_core import get_model, split_model


def fc_param_share(model_name: str, image_size: int = 224) -> float:
    """Exercise 1: the FC head's share of all parameters, from the split alone."""
    split = split_model(get_model(model_name, 1000), input_shape=(3, image_size, image_size))
    fc = sum(p.numel() for p in split.fc.parameters())
    conv = sum(p.numel() for p in split.conv.parameters())
    return fc / (fc + conv)


def why_resnet_gains_little() -> str:
    """Exercise 2, in words (the test checks the number it rests on)."""
    return ("ResNet-50 keeps only ~8 % of its parameters in its FC head (one 2048x1000 layer after "
            "global pooling), so keeping the head off the network saves little traffic.")


def boundary_bytes_per_step(model_name: str, image_size: int, b: int) -> tuple[int, int]:
    """Exercise 3: (bytes sent, bytes received) across the boundary by one CONV worker per step."""
    split = split_model(get_model(model_name, 1000), input_shape=(3, image_size, image_size), batch_size=b)
    with torch.no_grad():
        values = split.conv(torch.zeros(1, 3, image_size, image_size)).numel()  # A, per sample
    return 4 * b * values + 8 * b, 4 * b * values  # fp32 activations + int64 labels; fp32 gradients back
