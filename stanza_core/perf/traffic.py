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

from .. import checks
from ..anatomy import DTYPE_BYTES, LABEL_BYTES, Profile
from ..topology import Topology, resolve_layout

STRATEGIES = ("local", "ddp", "ps", "stanza")


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
GRAD_COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")
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
        checks.one_of("grad_compression", self.grad_compression, GRAD_COMPRESSIONS)
        checks.positive_int("micro_batches", self.micro_batches)

    @property
    def paper(self) -> bool:
        return self == StanzaOptions()


def powersgd_numel(shapes) -> int:
    """Values PowerSGD (rank 1, torch's default min_compression_rate 2) allreduces for tensors
    of these shapes: P and Q of each tensor it compresses, the others whole. The decision is
    torch's own `_should_compress`, as the hook applies it."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

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
    return Topology(strategy, nodes, fc_workers or 0 if strategy == "stanza" else 0, 0,
                    ps_servers=ps_servers if strategy == "ps" else 0)


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
    engine's (topology.resolve_layout); this adds the argument types and the arguments that only
    one strategy takes."""
    checks.one_of("strategy", strategy, STRATEGIES)
    checks.positive_int("nodes", nodes)
    checks.positive_int("ps_servers", ps_servers, 0)
    if strategy == "stanza":
        if nodes >= 2 and (isinstance(fc_workers, bool) or not isinstance(fc_workers, int)):
            raise ValueError(f"fc_workers must be an integer in 1..{nodes // 2} for {nodes} nodes, got {fc_workers!r}")
    elif fc_workers is not None:
        raise ValueError(f"fc_workers applies to stanza only, not {strategy}")
    if strategy == "ps":
        if ps_shards is not None and (isinstance(ps_shards, bool) or not isinstance(ps_shards, int) or ps_shards < 1):
            raise ValueError(f"ps_shards must be an integer in 1..{nodes} (one shard per rank at most), "
                             f"got {ps_shards!r}")
    elif ps_shards is not None:
        raise ValueError(f"ps_shards applies to ps only, not {strategy}")
    k, s = resolve_layout(strategy, nodes, fc_workers or 0, ps_shards or 0, ps_servers, unit="nodes", name=str)
    return (k if strategy == "stanza" else None), (s if strategy == "ps" else None)


def _clean(d: dict[str, Fraction | int]) -> dict[str, int]:
    return {c: report(v) for c, v in d.items() if v}


def rank_bytes(counts: ModelCounts, strategy: str, nodes: int, fc_workers: int | None,
               batches: list[int], ps_shards: int | None, ranks=None, options: StanzaOptions | None = None,
               step: int | None = None, ps_servers: int = 0) -> list[dict]:
    """Per-rank figures for given per-data-worker batches (the engine splits evenly: see
    expected_bytes); `ranks` limits the rows computed (default: all N). Stanza `options`: a
    hybrid FC worker joins the CONV allreduce (its own activations never cross a link), the
    boundary travels in its wire dtype, the CONV allreduce in its compressed size at `step`."""
    opt = options or StanzaOptions()
    N, P, A = nodes, counts.params, counts.boundary_values
    k = fc_workers
    topo = layout(strategy, N, k, ps_servers)
    nc = topo.data_workers  # the ranks that run the CONV body on data
    if strategy == "ps":
        sizes = [DTYPE_BYTES * s for s in ps_shard_sizes(P, ps_shards)]
    conv_members = nc + (k if strategy == "stanza" and opt.fc_batch else 0)
    conv_ar = ring_share(conv_grad_bytes(counts, opt.grad_compression, step), conv_members) if strategy == "stanza" \
        else 0
    fc_ar = ring_share(DTYPE_BYTES * counts.fc_params, k or 1)
    w = WIRE_BYTES[opt.boundary_dtype]
    # batch-norm statistics over the global batch: among the data workers (stanza: CONV side only)
    bn = bn_stats_share(counts.bn_conv_channels + (0 if strategy == "stanza" else counts.bn_fc_channels), nc)

    def row(r: int) -> dict:
        if strategy == "local":
            return {"rank": r, "role": "local", "sent": {}, "recv": {}}
        if strategy == "ddp":
            g = ring_share(DTYPE_BYTES * P, N)
            return {"rank": r, "role": "worker", "sent": _clean({"grads": g, "bn_stats": bn}),
                    "recv": _clean({"grads": g, "bn_stats": bn})}
        if strategy == "ps" and ps_servers:
            nw = nc  # data workers; server s is rank nw + s
            if r < nw:  # pushes every shard's slice, pulls every shard back
                bn_w = bn_stats_share(counts.bn_conv_channels + counts.bn_fc_channels, nw)  # among the workers
                return {"rank": r, "role": "worker", "sent": _clean({"grads": DTYPE_BYTES * P, "bn_stats": bn_w}),
                        "recv": _clean({"params": DTYPE_BYTES * P, "bn_stats": bn_w})}
            served = nw * sizes[r - nw]
            return {"rank": r, "role": "ps_server", "sent": _clean({"params": served}),
                    "recv": _clean({"grads": served})}
        if strategy == "ps":
            own = sizes[r] if r < ps_shards else 0
            others = DTYPE_BYTES * P - own  # pushed to / pulled from the other ranks' shards
            served = (N - 1) * own  # what this rank's shard takes in (grads) and gives out (params)
            return {"rank": r, "role": "worker", "sent": _clean({"grads": others, "params": served, "bn_stats": bn}),
                    "recv": _clean({"grads": served, "params": others, "bn_stats": bn})}
        if r < nc:
            b = batches[r]
            return {"rank": r, "role": "conv_worker",
                    "sent": _clean({"activations": w * b * A, "labels": LABEL_BYTES * b,
                                    "conv_grads": conv_ar, "bn_stats": bn}),
                    "recv": _clean({"activation_grads": w * b * A, "conv_grads": conv_ar, "bn_stats": bn})}
        served = sum(batches[i] for i in topo.served_by(r))  # its CONV workers' samples
        hybrid = conv_ar if opt.fc_batch else 0
        return {"rank": r, "role": "fc_worker",
                "sent": _clean({"activation_grads": w * served * A, "conv_grads": hybrid, "fc_grads": fc_ar}),
                "recv": _clean({"activations": w * served * A, "labels": LABEL_BYTES * served,
                                "conv_grads": hybrid, "fc_grads": fc_ar})}

    return [row(r) for r in (range(N) if ranks is None else ranks)]


def summary_bytes(counts: ModelCounts, strategy: str, nodes: int, fc_workers: int | None,
                  batches: list[int], ps_shards: int | None, options: StanzaOptions | None = None,
                  ps_servers: int = 0) -> dict[str, int]:
    """`totals(rank_bytes(...))` in O(1) rows: the cluster's bytes per step and the busiest
    node's sent/received bytes (what sweeps over 1,000 nodes need, without 1,000 rows)."""
    N, P, A = nodes, counts.params, counts.boundary_values
    if strategy == "local" or N == 1:
        return {"bytes_per_step": 0, "max_node_sent": 0, "max_node_recv": 0}
    bn_all = counts.bn_conv_channels + counts.bn_fc_channels
    if strategy == "ddp":
        g = report(ring_share(DTYPE_BYTES * P, N)) + report(bn_stats_share(bn_all, N))
        return {"bytes_per_step": N * g, "max_node_sent": g, "max_node_recv": g}
    if strategy == "ps" and ps_servers:
        # a worker moves 4P each way plus the batch-norm statistics among the workers (servers
        # run no forward pass); server 0 holds the largest shard and serves every worker
        nw = N - ps_servers
        bn_w = report(bn_stats_share(bn_all, nw))
        server = nw * DTYPE_BYTES * ps_shard_sizes(P, ps_servers)[0]
        busiest = max(DTYPE_BYTES * P + bn_w, server)
        return {"bytes_per_step": 2 * nw * DTYPE_BYTES * P + nw * bn_w, "max_node_sent": busiest,
                "max_node_recv": busiest}
    if strategy == "ps":
        # rank r < S moves 4P - own + (N-1) own each way; rank 0 holds the largest shard
        bn = report(bn_stats_share(bn_all, N))
        busiest = DTYPE_BYTES * P + (N - 2) * DTYPE_BYTES * ps_shard_sizes(P, ps_shards)[0] + bn
        return {"bytes_per_step": 2 * (N - 1) * DTYPE_BYTES * P + N * bn, "max_node_sent": busiest,
                "max_node_recv": busiest}
    opt = options or StanzaOptions()
    k = fc_workers
    topo = layout("stanza", N, k)
    nc = topo.data_workers
    G = sum(batches)  # samples crossing the boundary (a hybrid FC worker's own never do)
    members = nc + (k if opt.fc_batch else 0)
    conv_ar = report(ring_share(conv_grad_bytes(counts, opt.grad_compression), members))
    fc_ar = report(ring_share(DTYPE_BYTES * counts.fc_params, k))
    fc_conv = conv_ar if opt.fc_batch else 0
    bn = report(bn_stats_share(counts.bn_conv_channels, nc))  # CONV workers' batch-norm statistics
    # rank 0 and the first FC worker carry the most (the first b % nc workers take one more sample)
    b0, s0 = batches[0], sum(batches[i] for i in topo.served_by(topo.fc_ranks[0]))
    act = WIRE_BYTES[opt.boundary_dtype] * A
    return {"bytes_per_step": 2 * act * G + LABEL_BYTES * G + members * conv_ar + k * fc_ar + nc * bn,
            "max_node_sent": max(act * b0 + LABEL_BYTES * b0 + conv_ar + bn, act * s0 + fc_ar + fc_conv),
            "max_node_recv": max(act * b0 + conv_ar + bn, act * s0 + LABEL_BYTES * s0 + fc_ar + fc_conv)}


def stanza_options(strategy: str, nodes: int, fc_workers: int | None, global_batch: int, fc_conv_share: float,
                   micro_batches: int, boundary_dtype: str, grad_compression: str,
                   ps_servers: int = 0) -> tuple[StanzaOptions, list[int]]:
    """Validated options and the CONV workers' batches, with the engine's own batch rule
    (topology.hybrid_batches) for a hybrid FC worker's share of the global batch."""
    from ..errors import ConfigError
    from ..topology import hybrid_batches

    if strategy != "stanza":
        if (fc_conv_share, micro_batches, boundary_dtype, grad_compression) != (0.0, 1, "fp32", "none"):
            raise ValueError(f"share, micro-batches and compression apply to stanza only, not {strategy}")
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


def expected_bytes(profile_or_counts, strategy: str, nodes: int, fc_workers: int | None = None,
                   global_batch: int = 32, ps_shards: int | None = None, *, fc_conv_share: float = 0.0,
                   micro_batches: int = 1, boundary_dtype: str = "fp32", grad_compression: str = "none",
                   step: int | None = None, ps_servers: int = 0, bn_stats: str = "global") -> list[dict]:
    """What every rank sends and receives per step: [{rank, role, sent: {cat: int}, recv: {cat: int}}].

    The global batch must split evenly over the data workers (N, N - k for stanza, N - S for
    ps with S dedicated servers), as in the engine (with a hybrid share: what the FC workers
    leave, over the N - k CONV workers). ps_shards defaults to N (colocated) or to ps_servers
    (dedicated). The overlapped push (ps_overlap) moves the same bytes in more messages, so
    it does not appear here. `step` matters for PowerSGD only (vanilla before its start step;
    None: the steady state). bn_stats as the engine's --bn-stats ("local": no batch-norm traffic)."""
    counts = ModelCounts.of(profile_or_counts)
    if bn_stats == "local":
        counts = counts.local_bn()
    fc_workers, ps_shards = check_config(strategy, nodes, fc_workers, ps_shards, ps_servers)
    n = data_workers(strategy, nodes, fc_workers, ps_servers)
    checks.positive_int("global_batch", global_batch, n, what="the data workers")
    if global_batch % n and not fc_conv_share:
        raise ValueError(f"global_batch {global_batch} does not split evenly over {n} data workers")
    opt, batches = stanza_options(strategy, nodes, fc_workers, global_batch, fc_conv_share, micro_batches,
                                  boundary_dtype, grad_compression, ps_servers)
    return rank_bytes(counts, strategy, nodes, fc_workers, batches, ps_shards, options=opt, step=step,
                      ps_servers=ps_servers)


def totals(rank_rows: list[dict]) -> dict[str, int]:
    """Cluster-wide sums: bytes_per_step (sum of bytes sent, the metrics JSON's figure) and the
    busiest node's sent and received bytes."""
    sent = [sum(r["sent"].values()) for r in rank_rows]
    recv = [sum(r["recv"].values()) for r in rank_rows]
    return {"bytes_per_step": sum(sent), "max_node_sent": max(sent), "max_node_recv": max(recv)}
