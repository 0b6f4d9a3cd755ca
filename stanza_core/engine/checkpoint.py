"""Per-rank checkpoints, written atomically (atomic.py: temporary file, fsync, rename) and loaded with
weights_only=True. A checkpoint records the layout it was made with; resuming under another
layout is refused with a one-line error instead of silently training something else."""
from __future__ import annotations

import os

import torch

from .. import atomic
from ..errors import ConfigError

# Fields that must match for a resumed run to continue the same training (bn_stats: batch-norm
# statistics over the global batch or per worker train differently).
LAYOUT_FIELDS = ("strategy", "model", "num_classes", "image_size", "global_batch", "seed", "fc_workers",
                 "ps_shards", "ps_servers", "ps_overlap", "dataset", "lr", "momentum", "weight_decay", "boundary", "bucket_mb",
                 "bn_stats")


def path_for(directory: str, rank: int, world_size: int) -> str:
    return os.path.join(directory, f"rank{rank:04d}-of-{world_size:04d}.pt")


def save(directory: str, rank: int, world_size: int, step: int, cfg_dict: dict, state: dict):
    layout = {k: cfg_dict[k] for k in LAYOUT_FIELDS}
    # atomic: a reader sees the old checkpoint or the new one, never half
    atomic.torch_save({"step": step, "layout": layout, "world_size": world_size, "state": state},
                      path_for(directory, rank, world_size))


def load(directory: str, rank: int, world_size: int, cfg_dict: dict) -> tuple[int, dict]:
    """(next step, strategy state) of this rank; ConfigError if missing or of another layout."""
    path = path_for(directory, rank, world_size)
    if not os.path.isfile(path):
        found = sorted(f for f in os.listdir(directory) if f.endswith(".pt")) if os.path.isdir(directory) else []
        raise ConfigError(f"--resume: no checkpoint {os.path.basename(path)} in {directory} for world size "
                          f"{world_size} (found: {', '.join(found) or 'nothing'})", scope="rank")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    layout = {k: cfg_dict[k] for k in LAYOUT_FIELDS}
    diff = [k for k in LAYOUT_FIELDS if ckpt["layout"].get(k) != layout[k]]
    if diff:
        k = diff[0]
        raise ConfigError(f"--resume: checkpoint was made with {k}={ckpt['layout'].get(k)!r}, this run has {layout[k]!r}")
    return int(ckpt["step"]), ckpt["state"]
