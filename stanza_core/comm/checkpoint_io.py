"""Checkpoint files through torch.distributed.checkpoint (DCP).

Every rank hands `save` a flat dict of tensors keyed by name. A key that several ranks hold (a
replicated tensor: a data-parallel model, its momentum) is written once, by one of them (DCP's
default save planner deduplicates keys across ranks), so a folder holds each logical tensor once,
whatever the world size, and any rank of any world size can `load` any key.

Only tensors are stored: a non-tensor value would be pickled into the folder and unpickled on
load. The folder's `.metadata` file is itself a pickle: `SafeReader` reads it with an unpickler
that accepts only the classes DCP's metadata is made of, so a crafted folder cannot run code.

With NCCL, DCP's own collectives (plans, results) go over a gloo group made at the first save or
load (every rank saves and loads at the same points, so the group forms in the same order)."""
from __future__ import annotations

import functools
import pickle
import warnings

import torch
import torch.distributed as dist

# torch.distributed.checkpoint is imported where it is used: it takes seconds to import, and
# most runs save no checkpoint.
_METADATA_MODULE = "torch.distributed.checkpoint.metadata"
_ALLOWED = {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
            ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),
            ("pathlib", "WindowsPath"), ("pathlib", "PureWindowsPath"), ("collections", "OrderedDict")}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module == _METADATA_MODULE or (module, name) in _ALLOWED or (
                module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint's metadata")


@functools.cache
def _safe_reader():
    """DCP's file reader, reading `.metadata` with an unpickler limited to DCP's metadata classes
    (tensor data is read with torch.load(weights_only=True) by DCP itself)."""
    from torch.distributed.checkpoint import FileSystemReader  # torch.distributed.checkpoint: ~700 more modules; only on save/load
    from torch.distributed.checkpoint.metadata import StorageMeta  # torch.distributed.checkpoint: ~700 more modules; only on save/load

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            rank = kwargs.get("rank")
            # newer torch names the (per-rank) metadata file by a method; torch 2.7 reads `.metadata`
            path = (self._get_metadata_path(rank) if hasattr(self, "_get_metadata_path")
                    else self.fs.concat_path(self.path, ".metadata"))
            with self.fs.create_stream(path, "rb") as fh:
                metadata = _MetadataUnpickler(fh).load()
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader


def _group(comm):
    """(process group, no_dist) for DCP's collectives on this rank."""
    if comm is None or comm.world_size == 1 or not dist.is_initialized():
        return None, True
    if comm.backend == "nccl":
        if comm.checkpoint_pg is None:
            comm.checkpoint_pg = dist.new_group(backend="gloo", timeout=comm.timeout)
        return comm.checkpoint_pg, False
    return None, False  # the default (gloo) group


def save(state: dict[str, torch.Tensor], folder: str, comm) -> None:
    """Collective: every rank's `state` into `folder` (made if missing; files fsynced). Returns
    once every rank's data and the coordinator's `.metadata` are written."""
    bad = [k for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise TypeError(f"checkpoint state holds non-tensor values (would be pickled): {bad[:3]}")
    import torch.distributed.checkpoint as dcp  # torch.distributed.checkpoint: ~700 more modules; only on save/load

    group, no_dist = _group(comm)
    with warnings.catch_warnings():  # no_dist on one process: DCP warns that it runs alone
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(state, storage_writer=dcp.FileSystemWriter(folder, sync_files=True), process_group=group,
                 no_dist=no_dist)


def tensors(folder: str) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """{key: (shape, dtype)} of the tensors stored in `folder` (read on this rank alone)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata  # torch.distributed.checkpoint: ~700 more modules; only on save/load

    md = _safe_reader()(folder).read_metadata()
    return {k: (tuple(m.size), m.properties.dtype) for k, m in md.state_dict_metadata.items()
            if isinstance(m, TensorStorageMetadata)}


def load(state: dict[str, torch.Tensor], folder: str, comm) -> None:
    """Collective: fill `state`'s tensors in place from `folder` (each rank asks for its own keys,
    any subset of what is stored)."""
    import torch.distributed.checkpoint as dcp  # torch.distributed.checkpoint: ~700 more modules; only on save/load

    group, no_dist = _group(comm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, storage_reader=_safe_reader()(folder), process_group=group, no_dist=no_dist)

