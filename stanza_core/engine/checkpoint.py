"""Checkpoints through torch.distributed.checkpoint (comm/checkpoint_io.py), one folder per save:

    DIR/latest                 the name of the newest complete checkpoint (written atomically)
    DIR/step-00000040/         DCP's files (.metadata, __<rank>_0.distcp) and stanza.json (step,
                               layout, world size)

Each rank's state is a flat dict keyed by fully qualified names (strategies/state.py): a tensor
several ranks hold (a data-parallel model and its momentum, stanza's CONV body on every CONV
worker) is stored once, so a checkpoint made at world size N loads at world size M wherever the
strategy's state is the same logical tensors. State that belongs to one rank is keyed
`per_rank.<why>.rank<r>.*`; a checkpoint holding any is resumed only at its own world size.

Atomic: DCP itself overwrites files in place, so every rank writes into `DIR/.step-....tmp`
(made empty by rank 0 before a barrier); once DCP's save returns (every rank's data and the
`.metadata` are written and fsynced), rank 0 adds stanza.json, renames the folder into place,
points `latest` at it (temporary file and rename, atomic.py) and then removes the older folders.
A reader follows `latest`, so it sees the previous checkpoint or the new one, never half of one.

A checkpoint records the layout it was made with; resuming under another layout (LAYOUT_FIELDS)
is refused in one line before any training, as is a world-size change the state does not allow.
The global batch is a layout field: a resumed run draws the same global batches (the data
position is the step) whatever its world size."""
from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil

from .. import atomic
from ..comm import checkpoint_io
from ..errors import ConfigError

# Fields that must match for a resumed run to continue the same training (bn_stats: batch-norm
# statistics over the global batch or per worker train differently). The world size may differ
# (see `locate`); ps_shards 0 (one shard per rank) follows it.
LAYOUT_FIELDS = ("strategy", "model", "num_classes", "image_size", "global_batch", "seed", "fc_workers",
                 "ps_shards", "ps_servers", "ps_overlap", "dataset", "lr", "momentum", "weight_decay", "boundary", "bucket_mb",
                 "bn_stats")
LATEST, INFO = "latest", "stanza.json"
PER_RANK = "per_rank."
# why a state is kept per rank, for the refusal of another world size
PER_RANK_WHY = {
    "bn_stats": "batch-norm statistics are per data worker (--bn-stats local: a worker's batch, and so the "
                "training, depends on the world size)",
    "powersgd": "PowerSGD error feedback is per rank (--grad-compression powersgd)",
}


def per_rank_key(why: str, rank: int, name: str) -> str:
    return f"{PER_RANK}{why}.rank{rank:04d}.{name}"


def folder_name(step: int) -> str:
    return f"step-{step:08d}"


def save(directory: str, comm, world_size: int, step: int, cfg_dict: dict, state: dict):
    """Collective: every rank's `state` (a flat dict of tensors) as the checkpoint of `step`."""
    name = folder_name(step)
    tmp, target = os.path.join(directory, f".{name}.tmp"), os.path.join(directory, name)
    if comm.rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # a crashed save's leftovers
        os.makedirs(directory, exist_ok=True)
    comm.barrier()
    checkpoint_io.save(state, tmp, comm)
    if comm.rank != 0:
        return
    info = {"step": step, "world_size": world_size, "layout": {k: cfg_dict[k] for k in LAYOUT_FIELDS}}
    atomic.write_text(os.path.join(tmp, INFO), json.dumps(info, indent=1))
    atomic.fsync_dir(tmp)  # the folder's entries, before it moves into place
    if os.path.exists(target):  # the same step saved again (--overwrite, or resumed at the end)
        trash = os.path.join(directory, f".{name}.old")
        shutil.rmtree(trash, ignore_errors=True)
        os.replace(target, trash)
    os.replace(tmp, target)
    atomic.fsync_dir(directory)
    atomic.write_text(os.path.join(directory, LATEST), name + "\n")
    # only now, with `latest` moved: the other folders (older steps, leftovers of a crashed save)
    for old in os.listdir(directory):
        if old != name and old.startswith(("step-", ".step-")):
            shutil.rmtree(os.path.join(directory, old), ignore_errors=True)


def existing(directory: str | None) -> str | None:
    """The checkpoint `directory` already holds (its `latest` name), or None."""
    if not directory:
        return None
    try:
        with open(os.path.join(directory, LATEST)) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


@dataclasses.dataclass(frozen=True)
class Resume:
    folder: str
    step: int  # the next step to train
    world_size: int  # the world size it was made at


def locate(directory: str, world_size: int, cfg_dict: dict) -> Resume:
    """The checkpoint to resume from, checked before any process group forms: ConfigError if
    missing, incomplete, of another layout, or of another world size its state does not allow."""
    name = existing(directory)
    if name is None:
        found = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
        old = " (per-rank .pt files of an older version are not read)" if any(f.endswith(".pt") for f in found) else ""
        raise ConfigError(f"--resume: no checkpoint in {directory}: no {LATEST} file (found: "
                          f"{', '.join(found[:6]) or 'nothing'}){old}", scope="rank")
    folder = os.path.join(directory, name)
    try:
        with open(os.path.join(folder, INFO)) as fh:
            info = json.load(fh)
        keys = checkpoint_io.tensors(folder)
    except (OSError, ValueError, EOFError, pickle.UnpicklingError) as e:
        raise ConfigError(f"--resume: checkpoint {folder} is unreadable ({type(e).__name__}: {e})",
                          scope="rank") from None
    layout = {k: cfg_dict[k] for k in LAYOUT_FIELDS}
    diff = [k for k in LAYOUT_FIELDS if info["layout"].get(k) != layout[k]]
    if diff:
        k = diff[0]
        raise ConfigError(f"--resume: checkpoint was made with {k}={info['layout'].get(k)!r}, "
                          f"this run has {layout[k]!r}")
    made = int(info["world_size"])
    if made != world_size:
        whys = sorted({k[len(PER_RANK):].split(".", 1)[0] for k in keys if k.startswith(PER_RANK)})
        if whys:
            raise ConfigError(f"--resume: checkpoint was made at world size {made}, this run has {world_size}, and its "
                              f"{PER_RANK_WHY.get(whys[0], whys[0])}: resume at world size {made}")
    return Resume(folder, int(info["step"]), made)


class Reader:
    """What a strategy loads its state from: `keys` {name: (shape, dtype)} of the stored tensors,
    `load(state)` (collective: every rank calls it once) fills `state`'s tensors in place."""

    def __init__(self, resume: Resume, comm):
        self.folder, self.comm, self.world_size = resume.folder, comm, resume.world_size
        self.keys = checkpoint_io.tensors(resume.folder)

    def load(self, state: dict):
        checkpoint_io.load(state, self.folder, self.comm)  # a key not stored fails on every rank (DCP)
