"""A strategy's checkpoint state as flat dicts of tensors keyed by the unsplit model's fully
qualified names (engine/checkpoint.py stores them through torch.distributed.checkpoint):

    model.<fqn>                 a parameter or buffer of the model
    momentum.<fqn>              SGD's momentum buffer of that parameter
    per_rank.bn_stats.rank<r>.model.<fqn>   a batch-norm buffer under --bn-stats local
    momentum_flat.<start>-<stop>   ps: a server's momentum of one piece of the flat parameter
                                vector, cut anew for another shard layout (SGD is elementwise)

Every rank that holds a tensor writes it under the same key (equal values, by BSP: a data-parallel
model, stanza's CONV body on each CONV worker), so it is stored once and any rank of another
world size that holds it reads it back. Batch-norm statistics under --bn-stats local differ by
data worker: they are kept per rank, which ties the checkpoint to its world size."""
from __future__ import annotations

import io

import torch

from ..engine.checkpoint import per_rank_key
from ..errors import ConfigError

MODEL, MOMENTUM, FLAT_MOMENTUM = "model.", "momentum.", "momentum_flat."


def tensor_names(model: torch.nn.Module) -> dict[int, str]:
    """id(tensor) -> its name in the unsplit model's state_dict (the first, for a shared one)."""
    names: dict[int, str] = {}
    for k, v in model.state_dict(keep_vars=True).items():
        names.setdefault(id(v), k)
    return names


def _bn_buffers(parts) -> set[int]:
    return {id(b) for part in parts for m in part.modules()
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for b in m.buffers(recurse=False)}


def _model_key(v, names, per_rank_bn: set[int], rank: int) -> str:
    key = MODEL + names[id(v)]
    return per_rank_key("bn_stats", rank, key) if id(v) in per_rank_bn else key


def module_state(parts, names: dict[int, str], optimizer, rank: int, bn_local: bool) -> dict[str, torch.Tensor]:
    """The parameters and buffers of `parts` (modules of the model) and the momentum of
    `optimizer`'s parameters, keyed by name."""
    per_rank_bn = _bn_buffers(parts) if bn_local else set()
    out = {_model_key(v, names, per_rank_bn, rank): v.detach()
           for part in parts for v in part.state_dict(keep_vars=True).values()}
    for group in optimizer.param_groups:
        for p in group["params"]:
            buf = optimizer.state.get(p, {}).get("momentum_buffer")
            if buf is not None:
                out[MOMENTUM + names[id(p)]] = buf
    return out


def module_targets(parts, names: dict[int, str], rank: int, bn_local: bool,
                   params_only: bool = False) -> dict[str, torch.Tensor]:
    """Where `module_state`'s model entries load: the parts' own tensors (filled in place)."""
    per_rank_bn = _bn_buffers(parts) if bn_local else set()
    tensors = [p for part in parts for p in part.parameters()] if params_only else \
        [v for part in parts for v in part.state_dict(keep_vars=True).values()]
    return {_model_key(v, names, per_rank_bn, rank): v.detach() for v in tensors}


def momentum_targets(optimizer, names: dict[int, str], stored) -> dict[str, torch.Tensor]:
    """New tensors for the stored momentum of `optimizer`'s parameters (those with none stored,
    e.g. momentum 0, get none); `set_momentum` puts them in the optimizer once loaded."""
    return {MOMENTUM + names[id(p)]: torch.empty_like(p, memory_format=torch.contiguous_format)
            for g in optimizer.param_groups for p in g["params"] if MOMENTUM + names[id(p)] in stored}


def set_momentum(optimizer, names: dict[int, str], loaded: dict[str, torch.Tensor]):
    for g in optimizer.param_groups:
        for p in g["params"]:
            key = MOMENTUM + names[id(p)]
            if key in loaded:
                optimizer.state[p]["momentum_buffer"] = loaded[key]


def load_modules(reader, parts, names, optimizer, rank: int, bn_local: bool, extra: dict | None = None) -> dict:
    """Load `module_state`'s entries of `parts` and `optimizer` (and `extra` targets) in one
    collective read; returns the loaded dict."""
    targets = module_targets(parts, names, rank, bn_local)
    targets.update(momentum_targets(optimizer, names, reader.keys))
    targets.update(extra or {})
    with torch.no_grad():
        reader.load(targets)
    set_momentum(optimizer, names, targets)
    return targets


def flat_momentum_key(r: slice) -> str:
    return f"{FLAT_MOMENTUM}{r.start}-{r.stop}"


def flat_momentum_targets(stored_keys, ranges: dict[int, slice], dtype) -> tuple[dict, dict]:
    """(new tensors for the stored momentum pieces that overlap `ranges`, by key; {piece: its
    cover, the (key, start, stop) of those pieces}). Empty covers where none is stored (momentum 0)."""
    stored = {}
    for k in stored_keys:
        if k.startswith(FLAT_MOMENTUM):
            a, b = k[len(FLAT_MOMENTUM):].split("-")
            stored[k] = int(a), int(b)
    covers, targets = {}, {}
    for i, r in ranges.items():
        covers[i] = [(k, a, b) for k, (a, b) in stored.items() if a < r.stop and b > r.start]
        if stored and sum(min(b, r.stop) - max(a, r.start) for _, a, b in covers[i]) != r.stop - r.start:
            raise ConfigError(f"--resume: the checkpoint's momentum does not cover parameters {r.start}-{r.stop}")
        for k, a, b in covers[i]:
            targets.setdefault(k, torch.empty(b - a, dtype=dtype))
    return targets, covers


def cut(r: slice, cover, loaded: dict, like: torch.Tensor) -> torch.Tensor:
    """The momentum of flat range `r` from the loaded pieces that cover it (shaped and placed
    as `like`, the piece's parameter)."""
    out = torch.empty_like(like)
    for k, a, b in cover:
        lo, hi = max(a, r.start), min(b, r.stop)
        out[lo - r.start:hi - r.start] = loaded[k][lo - a:hi - a]
    return out


def to_bytes(obj) -> torch.Tensor:
    """Plain values (tensors, numbers, strings, lists, dicts) as a uint8 tensor: a checkpoint
    stores tensors only, and `from_bytes` reads them back with torch.load(weights_only=True)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def from_bytes(t: torch.Tensor):
    return torch.load(io.BytesIO(t.numpy().tobytes()), weights_only=True)
