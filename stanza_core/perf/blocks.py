"""The performance model's building blocks, which every strategy's model module (its folder's
model.py) builds on: a model's counts (ModelCounts), ring shares and batch-norm statistics bytes,
even splits of a vector or a batch, whole-byte reporting, the layout's data workers, the layer
shares of a part's time, the backward in gradient buckets with their allreduces (bucketed_backward),
the hybrid shares a batch allows (share_grid). The links and their costs are cluster.py's.

perf's front end (predict, expected_bytes, best_assignment, sweep) reaches a strategy's model
only through the registry; a strategy's model imports these blocks, never the front end (it is
handed `space.predict` to rank its candidates), so no loop runs between the two.
"""
from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from fractions import Fraction

from ..anatomy import DTYPE_BYTES, Profile
from ..buckets import bucket_groups
from ..topology import plain_topology
from ..variant import Variant
from .cluster import Cluster
from .devices import DeviceProfile

DEFAULT_BATCH_PER_WORKER = 32
_COUNTS_CACHE: dict[int, tuple] = {}
MAX_SHARES = 9  # share values tried per k (evenly spread over the valid ones, 0 and the largest kept)


@dataclasses.dataclass(frozen=True)
class ModelCounts:
    """The three numbers traffic depends on."""

    conv_params: int  # Pc
    fc_params: int  # Pf
    boundary_values: int  # A, values per sample crossing the CONV|FC cut
    conv_shapes: tuple[tuple[int, ...], ...] = ()  # CONV parameter shapes (only PowerSGD's sizes need them)
    bn_conv_channels: int = 0  # batch-norm channels on the CONV side (global statistics: stanza_core.batchnorm)
    bn_fc_channels: int = 0  # batch-norm channels on the FC side

    def local_bn(self) -> "ModelCounts":
        """The same model with per-worker batch-norm statistics (--bn-stats local): no BN traffic."""
        return dataclasses.replace(self, bn_conv_channels=0, bn_fc_channels=0)

    @property
    def params(self) -> int:
        return self.conv_params + self.fc_params

    @classmethod
    def of(cls, obj) -> "ModelCounts":
        """From a Profile, a ModelCounts, or a mapping with the three field names."""
        if isinstance(obj, ModelCounts):
            return obj
        if isinstance(obj, Profile):
            hit = _COUNTS_CACHE.get(id(obj))  # optimiser loops ask for the same profile's counts often
            if hit is not None and hit[0] is obj and hit[1].conv_params == obj.conv.params:
                return hit[1]
            shapes = tuple(tuple(int(v) for v in sh) for sh in (obj.conv_shapes or ()))
            counts = cls(obj.conv.params, obj.fc.params, obj.boundary_values, shapes,
                         getattr(obj, "bn_conv_channels", 0), getattr(obj, "bn_fc_channels", 0))
            if len(_COUNTS_CACHE) > 64:
                _COUNTS_CACHE.clear()
            _COUNTS_CACHE[id(obj)] = (obj, counts)
            return counts
        if isinstance(obj, Mapping):
            missing = [f for f in ("conv_params", "fc_params", "boundary_values") if f not in obj]
            if missing:
                raise ValueError(f"model counts need {', '.join(missing)}")
            shapes = tuple(tuple(int(v) for v in sh) for sh in obj.get("conv_shapes") or ())
            return cls(int(obj["conv_params"]), int(obj["fc_params"]), int(obj["boundary_values"]), shapes,
                       int(obj.get("bn_conv_channels", 0)), int(obj.get("bn_fc_channels", 0)))
        raise ValueError(f"expected a Profile, ModelCounts or mapping, got {type(obj).__name__}")


def bn_stats_share(channels: int, n: int) -> Fraction:
    """Global batch-norm statistics among n data workers: per layer call, 4 allreduces of C fp32
    values (sum, centred sum of squares, and their gradients): 2(n-1)/n * 16 * C bytes."""
    return ring_share(4 * DTYPE_BYTES * channels, n)


def ring_share(nbytes: int, n: int) -> Fraction:
    """Bytes one member of an n-rank ring allreduce of nbytes sends (and receives): 2(n-1)/n * S."""
    return Fraction(2 * (n - 1) * nbytes, n) if n > 1 else Fraction(0)


def report(x: Fraction | int) -> int:
    """Exact byte fractions become whole bytes only when reported (Python's round: half to even)."""
    return int(round(Fraction(x)))


def ps_shard_sizes(params: int, shards: int) -> list[int]:
    """Even flat split: shard s holds P//S values, plus one for the first P % S shards."""
    return [params // shards + (1 if s < params % shards else 0) for s in range(shards)]


def data_workers(variant: Variant, nodes: int) -> int:
    """How many ranks of `nodes` split the global batch under `variant` (the layout's data
    workers: N, N - k for stanza, N - S for dedicated ps servers)."""
    return plain_topology(variant, nodes).data_workers


def split_batch(global_batch: int, workers: int) -> list[int]:
    """Per-worker batches (the first G % n workers take one more sample)."""
    return [global_batch // workers + (1 if i < global_batch % workers else 0) for i in range(workers)]


def clean(d: dict[str, Fraction | int]) -> dict[str, int]:
    """A rank's category -> bytes, in whole bytes, the categories with none left out."""
    return {c: report(v) for c, v in d.items() if v}


def layer_shares(profile: Profile, part: str) -> list[tuple[str | None, int, float]]:
    """(layer name, params, share of the part's time) per parameterised layer, in forward order.

    A layer's share is its forward FLOPs over the part's (an even split when no FLOPs are
    known); without layer rows the whole part is one unit (name None). The replay engine
    (stanza_core/engine/replay.py) waits these same shares, so model and replay agree on compute."""
    rows = [r for r in profile.layers if r.part == part and (r.params or r.flops)]
    totals = getattr(profile, part)
    if not rows:
        return [(None, totals.params, 1.0)]
    flops = sum(r.flops for r in rows)
    return [(r.name, r.params, (r.flops / flops) if flops else 1.0 / len(rows)) for r in rows]


def layer_units(profile: Profile, part: str) -> list[tuple[int, float]]:
    """(params, share of the part's backward time) per parameterised layer (see layer_shares)."""
    return [(params, share) for _, params, share in layer_shares(profile, part)]


def bucketed_backward(units: list[tuple[int, float]], cluster: Cluster, n: int, cap_bytes: int,
                      close_at_cap: bool) -> tuple[float, float, float, int]:
    """Backward over `units` (params, seconds), given in the order backward visits them, with
    gradients allreduced among n ranks in buckets; a bucket's allreduce starts once its last
    gradient exists and the previous bucket's allreduce is done (one link, one at a time).

    Bucketing rule: torch DDP closes a bucket once it holds >= cap (close_at_cap=True); the
    engine's GradBuckets (stanza) starts a new bucket before one would exceed cap.
    Returns (backward end, allreduce end, total allreduce time, buckets), from the backward's start."""
    ends = list(itertools.accumulate(dt for _, dt in units))
    t = ends[-1] if ends else 0.0
    nbytes = [DTYPE_BYTES * params for params, _ in units]
    # each bucket ready when its last unit's gradient exists
    buckets = [(ends[g[-1]], sum(nbytes[i] for i in g))
               for g in bucket_groups(nbytes, cap_bytes, close_at_cap=close_at_cap)]
    buckets = [(ready, size) for ready, size in buckets if size]
    if n <= 1:
        return t, 0.0, 0.0, 0
    link_free, busy = 0.0, 0.0
    for ready, nbytes in buckets:
        dur = cluster.ring_allreduce_s(nbytes, n)
        link_free = max(ready, link_free) + dur
        busy += dur
    return t, link_free, busy, len(buckets)


def backward_units(profile: Profile, dev: DeviceProfile, parts: tuple[str, ...], b: int):
    """(params, seconds) per layer in backward order (last layer first) over `parts` (forward order)."""
    units = []
    for part in parts:
        total = dev.time_s(part, "bwd", b)
        units += [(p, share * total) for p, share in layer_units(profile, part)]
    return units[::-1]


def share_grid(global_batch: int, nodes: int, variant, limit: int = MAX_SHARES) -> list[float]:
    """Shares of the global batch a hybrid FC worker of `variant` (stanza with its k) can take
    (whole samples on every worker, strategies/stanza/layout.hybrid_batches), from 0 up to an even
    split over all N nodes, at most `limit` values."""
    nc, k = data_workers(variant, nodes), variant.options.fc_workers
    # 0 (the paper's stanza) is always a candidate: an uneven split over the CONV workers is fine there
    valid = [0] + [bh for bh in range(1, global_batch // nodes + 1) if (global_batch - k * bh) % nc == 0
                   and global_batch - k * bh >= nc]
    if len(valid) > limit:
        idx = sorted({round(i * (len(valid) - 1) / (limit - 1)) for i in range(limit)})
        valid = [valid[i] for i in idx]
    return [bh / global_batch for bh in valid]
