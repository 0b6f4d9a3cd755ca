"""Bytes each rank sends and receives per step, by category: the formulas of the traffic table
in docs/architecture.md, which the engine's measured counters must equal.

Roles (same words as the metrics JSON): "worker" (ddp, ps: every data worker computes the
whole model; under colocated ps, ranks 0..S-1 also hold one parameter shard each),
"ps_server" (ps with dedicated servers: the last S of the N ranks, one shard each, no
compute), "conv_worker" and "fc_worker" (stanza: ranks 0..Nc-1 and Nc..N-1), "local" (one
process, no traffic). `nodes` is always the world size: every rank, servers included.
A category with zero bytes is left out of a rank's `sent`/`recv` (nothing crossed a link).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction

from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

from .. import checks, registry
from ..anatomy import DTYPE_BYTES, LABEL_BYTES, Profile
from ..batchnorm import BN_LOCAL
from ..topology import Topology, hybrid_batches, plain_topology, resolve_layout
from ..variant import Variant, model_args
from ..errors import ConfigError


_COUNTS_CACHE: dict[int, tuple] = {}


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


WIRE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}  # bytes per value of each boundary / gradient dtype
POWERSGD_START = 2  # as comm.hooks.POWERSGD_START: steps of vanilla allreduce before PowerSGD compresses


@dataclasses.dataclass(frozen=True)
class StanzaOptions:
    """What the engine adds to the paper's Stanza (all defaults: the paper's Stanza)."""

    fc_batch: int = 0  # bh: samples each FC worker also runs the CONV body on (hybrid FC worker)
    micro_batches: int = 1  # M: chunks per worker batch (traffic unchanged; time only)
    boundary_dtype: str = "fp32"  # activations and activation gradients on the wire
    grad_compression: str = "none"  # CONV allreduce: none | fp16 | bf16 | powersgd

    def __post_init__(self):
        checks.one_of("boundary_dtype", self.boundary_dtype, WIRE_BYTES)
        checks.positive_int("micro_batches", self.micro_batches)

    @property
    def paper(self) -> bool:
        return self == StanzaOptions()


def powersgd_numel(shapes) -> int:
    """Values PowerSGD (rank 1, torch's default min_compression_rate 2) allreduces for tensors
    of these shapes: P and Q of each tensor it compresses, the others whole. The decision is
    torch's own `_should_compress`, as the hook applies it."""
    total = 0
    for shape in shapes:
        n = shape[0] if shape else 1
        m = 1
        for v in shape[1:]:
            m *= v
        ok, whole, compressed = _should_compress(n, m, min(n, m, 1), 2)
        total += compressed if ok else whole
    return total


def conv_grad_bytes(counts: "ModelCounts", compression: str, step: int | None = None) -> int:
    """Bytes of CONV gradients one member puts into the CONV allreduce per step (before the
    ring's 2(n-1)/n): fp32, 2-byte values, or PowerSGD's P, Q and uncompressed tensors (its
    first POWERSGD_START steps run vanilla fp32; step=None means the steady state)."""
    if compression == "none" or (compression == "powersgd" and step is not None and step < POWERSGD_START):
        return DTYPE_BYTES * counts.conv_params
    if compression in ("fp16", "bf16"):
        return 2 * counts.conv_params
    if not counts.conv_shapes:
        raise ValueError("PowerSGD traffic needs the CONV parameter shapes (a profile with conv_shapes)")
    return DTYPE_BYTES * powersgd_numel(counts.conv_shapes)


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


def layout(strategy: str, nodes: int, fc_workers: int | None, ps_servers: int = 0) -> Topology:
    """The engine's rank layout of a configuration (topology.Topology: who computes, who serves)."""
    return plain_topology(strategy, nodes, fc_workers, ps_servers)


def data_workers(strategy: str, nodes: int, fc_workers: int | None, ps_servers: int = 0) -> int:
    """How many ranks split the global batch (the layout's data workers: N, N - k for stanza,
    N - S for dedicated ps servers)."""
    return layout(strategy, nodes, fc_workers, ps_servers).data_workers


def split_batch(global_batch: int, workers: int) -> list[int]:
    """Per-worker batches (the first G % n workers take one more sample)."""
    return [global_batch // workers + (1 if i < global_batch % workers else 0) for i in range(workers)]


def check_config(strategy: str, nodes: int, fc_workers: int | None, ps_shards: int | None,
                 ps_servers: int = 0) -> tuple[int | None, int | None]:
    """Validate a configuration; return (k, S) resolved (S defaults to N: a shard on every
    rank; with dedicated servers S = ps_servers, one shard per server). The layout rules are the
    engine's (topology.resolve_layout), which options belong to which strategy the registry's;
    this adds the argument types."""
    registry.get(strategy)
    checks.positive_int("nodes", nodes)
    checks.positive_int("ps_servers", ps_servers, 0)
    registry.check_options(strategy, {k: v for k, v in (("fc_workers", fc_workers), ("ps_shards", ps_shards))
                                      if v is not None})
    has_k = registry.owns(strategy, "fc_workers")
    if has_k and nodes >= 2 and (isinstance(fc_workers, bool) or not isinstance(fc_workers, int)):
        raise ValueError(f"fc_workers must be an integer in 1..{nodes // 2} for {nodes} nodes, got {fc_workers!r}")
    if ps_shards is not None and (isinstance(ps_shards, bool) or not isinstance(ps_shards, int) or ps_shards < 1):
        raise ValueError(f"ps_shards must be an integer in 1..{nodes} (one shard per rank at most), "
                         f"got {ps_shards!r}")
    k, s = resolve_layout(strategy, nodes, fc_workers or 0, ps_shards or 0, ps_servers, unit="nodes", name=str)
    return (k if has_k else None), (s if registry.owns(strategy, "ps_shards") else None)


@dataclasses.dataclass(frozen=True)
class TrafficCase:
    """One configuration as a strategy's traffic formulas see it (its model module's
    `rank_rows` and `summary`)."""

    counts: ModelCounts
    topo: Topology  # the engine's layout: world size N, k, dedicated servers, who computes
    batches: list[int]  # each data worker's samples
    ps_shards: int | None
    options: StanzaOptions
    step: int | None = None  # PowerSGD's vanilla steps (None: the steady state)
    variant: "Variant | None" = None  # the configuration as given (a strategy's model reads its own options here)

    @property
    def nodes(self) -> int:
        return self.topo.world_size

    def bn_share(self, channels: int) -> Fraction:
        """A data worker's batch-norm statistics bytes for `channels` (among the data workers)."""
        return bn_stats_share(channels, self.topo.data_workers)


def clean(d: dict[str, Fraction | int]) -> dict[str, int]:
    """A rank's category -> bytes, in whole bytes, the categories with none left out."""
    return {c: report(v) for c, v in d.items() if v}


def _case(counts, strategy, nodes, fc_workers, batches, ps_shards, options, step, ps_servers, variant) -> TrafficCase:
    return TrafficCase(counts, layout(strategy, nodes, fc_workers, ps_servers), list(batches), ps_shards,
                       options or StanzaOptions(), step, variant)


def rank_bytes(counts: ModelCounts, strategy: str, nodes: int, fc_workers: int | None,
               batches: list[int], ps_shards: int | None, ranks=None, options: StanzaOptions | None = None,
               step: int | None = None, ps_servers: int = 0, variant: "Variant | None" = None) -> list[dict]:
    """Per-rank figures for given per-data-worker batches (the engine splits evenly: see
    expected_bytes); `ranks` limits the rows computed (default: all N). Each strategy's formulas
    are its model module's `rank_rows` (the registry names the module)."""
    case = _case(counts, strategy, nodes, fc_workers, batches, ps_shards, options, step, ps_servers, variant)
    return registry.get(strategy).model_module().rank_rows(case, range(nodes) if ranks is None else ranks)


def summary_bytes(counts: ModelCounts, strategy: str, nodes: int, fc_workers: int | None,
                  batches: list[int], ps_shards: int | None, options: StanzaOptions | None = None,
                  ps_servers: int = 0, variant: "Variant | None" = None) -> dict[str, int]:
    """`totals(rank_bytes(...))` in O(1) rows: the cluster's bytes per step and the busiest
    node's sent/received bytes (what sweeps over 1,000 nodes need, without 1,000 rows): the
    strategy's model module's `summary`."""
    if nodes == 1:
        return {"bytes_per_step": 0, "max_node_sent": 0, "max_node_recv": 0}
    case = _case(counts, strategy, nodes, fc_workers, batches, ps_shards, options, None, ps_servers, variant)
    return registry.get(strategy).model_module().summary(case)


def stanza_options(strategy: str, nodes: int, fc_workers: int | None, global_batch: int, fc_conv_share: float,
                   micro_batches: int, boundary_dtype: str, grad_compression: str,
                   ps_servers: int = 0) -> tuple[StanzaOptions, list[int]]:
    """Validated options and the CONV workers' batches, with the engine's own batch rule
    (topology.hybrid_batches) for a hybrid FC worker's share of the global batch."""
    registry.check_options(strategy, registry.set_options(
        {"fc_conv_share": fc_conv_share, "micro_batches": micro_batches, "boundary_dtype": boundary_dtype,
         "grad_compression": grad_compression}, dataclasses.asdict(StanzaOptions()) | {"fc_conv_share": 0.0}))
    if not registry.owns(strategy, "fc_workers"):  # StanzaOptions are the options of the strategy with k
        n = data_workers(strategy, nodes, fc_workers, ps_servers)
        return StanzaOptions(), split_batch(global_batch, n)
    nc = data_workers(strategy, nodes, fc_workers)
    try:
        bc, bh = hybrid_batches(global_batch, nc, fc_workers, fc_conv_share) if fc_conv_share else (None, 0)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    opt = StanzaOptions(bh, micro_batches, boundary_dtype, grad_compression)
    batches = [bc] * nc if bh else split_batch(global_batch, nc)
    if micro_batches > min(b for b in (min(batches), bh) if b):
        raise ValueError(f"micro_batches {micro_batches} exceeds the smallest worker batch {min(batches)}")
    return opt, batches


def expected_bytes(profile_or_counts, strategy: "str | Variant", nodes: int, fc_workers: int | None = None,
                   global_batch: int = 32, ps_shards: int | None = None, *, fc_conv_share: float = 0.0,
                   micro_batches: int = 1, boundary_dtype: str = "fp32", grad_compression: str = "none",
                   step: int | None = None, ps_servers: int = 0, bn_stats: str = "global", **options) -> list[dict]:
    """What every rank sends and receives per step: [{rank, role, sent: {cat: int}, recv: {cat: int}}].

    The global batch must split evenly over the data workers (N, N - k for stanza, N - S for
    ps with S dedicated servers), as in the engine (with a hybrid share: what the FC workers
    leave, over the N - k CONV workers). ps_shards defaults to N (colocated) or to ps_servers
    (dedicated). The overlapped push (ps_overlap) moves the same bytes in more messages, so
    it does not appear here. `step` matters for PowerSGD only (vanilla before its start step;
    None: the steady state). bn_stats as the engine's --bn-stats ("local": no batch-norm traffic).
    Another strategy's options as keywords (`options`: a plug-in's, by its options class's names).
    `strategy` may be a stanza_core.variant.Variant instead of a name: it then gives all its options
    (leave fc_workers, ps_servers, fc_conv_share and micro_batches at their defaults)."""
    strategy, fc_workers, o, make_variant = model_args(strategy, fc_workers, dict(
        ps_shards=ps_shards, fc_conv_share=fc_conv_share, micro_batches=micro_batches, boundary_dtype=boundary_dtype,
        grad_compression=grad_compression, ps_servers=ps_servers),
        {"fc_conv_share": 0.0, "micro_batches": 1, "ps_servers": 0}, options)
    ps_shards, fc_conv_share, micro_batches, boundary_dtype, grad_compression, ps_servers = (
        o["ps_shards"], o["fc_conv_share"], o["micro_batches"], o["boundary_dtype"], o["grad_compression"],
        o["ps_servers"])
    counts = ModelCounts.of(profile_or_counts)
    if bn_stats == BN_LOCAL:
        counts = counts.local_bn()
    fc_workers, ps_shards = check_config(strategy, nodes, fc_workers, ps_shards, ps_servers)
    n = data_workers(strategy, nodes, fc_workers, ps_servers)
    checks.positive_int("global_batch", global_batch, n, what="the data workers")
    if global_batch % n and not fc_conv_share:
        raise ValueError(f"global_batch {global_batch} does not split evenly over {n} data workers")
    variant = make_variant(fc_workers)  # its options' own checks
    opt, batches = stanza_options(strategy, nodes, fc_workers, global_batch, fc_conv_share, micro_batches,
                                  boundary_dtype, grad_compression, ps_servers)
    return rank_bytes(counts, strategy, nodes, fc_workers, batches, ps_shards, options=opt, step=step,
                      ps_servers=ps_servers, variant=variant)


def totals(rank_rows: list[dict]) -> dict[str, int]:
    """Cluster-wide sums: bytes_per_step (sum of bytes sent, the metrics JSON's figure) and the
    busiest node's sent and received bytes."""
    sent = [sum(r["sent"].values()) for r in rank_rows]
    recv = [sum(r["recv"].values()) for r in rank_rows]
    return {"bytes_per_step": sum(sent), "max_node_sent": max(sent), "max_node_recv": max(recv)}
