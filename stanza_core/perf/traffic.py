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
from fractions import Fraction

from .. import checks, registry
from ..batchnorm import BN_LOCAL
from ..errors import ConfigError
from ..topology import Topology, layout_of, plain_topology, resolve_layout
from ..variant import Variant
from .blocks import (ModelCounts, bn_stats_share, clean, data_workers, ps_shard_sizes, report,  # noqa: F401 (perf.traffic's names)
                     ring_share, split_batch)


def model_layout(variant: Variant, nodes: int, global_batch: int) -> tuple[Topology, list[int]]:
    """The rank layout of `variant` on `nodes` nodes (k and S resolved, a hybrid FC worker's
    samples) and each data worker's batch, by the engine's rules (topology.resolve_layout, the
    strategy's Layout.fc_batch and Layout.check), worded for the model's arguments (one-line
    ValueError). An uneven split is modelled by its shares (the first G % n workers take one more)."""
    if not isinstance(variant, Variant):
        raise ValueError(f"expected a stanza_core.variant.Variant, got {type(variant).__name__}")
    checks.positive_int("nodes", nodes)
    layout = layout_of(variant.strategy)
    try:
        k, shards = resolve_layout(variant, nodes, unit="nodes", name=str)
        topo = Topology(variant.strategy, nodes, k, shards, ps_servers=plain_topology(variant, nodes).ps_servers)
        checks.positive_int("global_batch", global_batch, topo.data_workers, what="the data workers")
        fc_batch = layout.fc_batch(variant, global_batch, nodes, k)
        topo = dataclasses.replace(topo, fc_batch=fc_batch)
        layout.check(topo, global_batch, variant)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    n = topo.data_workers
    return topo, ([topo.worker_batch(global_batch)] * n if fc_batch else split_batch(global_batch, n))


@dataclasses.dataclass(frozen=True)
class TrafficCase:
    """One configuration as a strategy's traffic formulas see it (its model module's
    `rank_rows` and `summary`)."""

    counts: ModelCounts
    variant: Variant  # the configuration: its strategy and that strategy's options
    topo: Topology  # the engine's layout: world size N, k, S, dedicated servers, hybrid share, who computes
    batches: list[int]  # each data worker's samples
    step: int | None = None  # PowerSGD's vanilla steps (None: the steady state)

    @property
    def nodes(self) -> int:
        return self.topo.world_size

    def bn_share(self, channels: int) -> Fraction:
        """A data worker's batch-norm statistics bytes for `channels` (among the data workers)."""
        return bn_stats_share(channels, self.topo.data_workers)


def rank_bytes(counts: ModelCounts, variant: Variant, topo: Topology, batches: list[int], *, ranks=None,
               step: int | None = None) -> list[dict]:
    """Per-rank figures of `variant` laid out as `topo` (model_layout) for given per-data-worker
    batches (the engine splits evenly: see expected_bytes); `ranks` limits the rows computed
    (default: all N). Each strategy's formulas are its model module's `rank_rows` (the registry
    names the module)."""
    case = TrafficCase(counts, variant, topo, list(batches), step)
    return registry.get(variant.strategy).model_module().rank_rows(case, range(topo.world_size) if ranks is None else ranks)


def summary_bytes(counts: ModelCounts, variant: Variant, topo: Topology, batches: list[int]) -> dict[str, int]:
    """`totals(rank_bytes(...))` in O(1) rows: the cluster's bytes per step and the busiest
    node's sent/received bytes (what sweeps over 1,000 nodes need, without 1,000 rows): the
    strategy's model module's `summary`."""
    if topo.world_size == 1:
        return {"bytes_per_step": 0, "max_node_sent": 0, "max_node_recv": 0}
    return registry.get(variant.strategy).model_module().summary(TrafficCase(counts, variant, topo, list(batches)))


def expected_bytes(profile_or_counts, variant: Variant, nodes: int, *, global_batch: int = 32,
                   step: int | None = None, bn_stats: str = "global") -> list[dict]:
    """What every rank sends and receives per step: [{rank, role, sent: {cat: int}, recv: {cat: int}}].

    `variant` (a stanza_core.variant.Variant) says the strategy and all its options. The global
    batch must split evenly over the data workers (N, N - k for stanza, N - S for ps with S
    dedicated servers), as in the engine (with a hybrid share: what the FC workers leave, over the
    N - k CONV workers). The overlapped push (ps_overlap) moves the same bytes in more messages,
    so it does not appear here. `step` matters for PowerSGD only (vanilla before its start step;
    None: the steady state). bn_stats as the engine's --bn-stats ("local": no batch-norm traffic)."""
    counts = ModelCounts.of(profile_or_counts)
    if bn_stats == BN_LOCAL:
        counts = counts.local_bn()
    topo, batches = model_layout(variant, nodes, global_batch)
    if global_batch % topo.data_workers and not topo.fc_batch:
        raise ValueError(f"global_batch {global_batch} does not split evenly over {topo.data_workers} data workers")
    return rank_bytes(counts, variant, topo, batches, step=step)


def totals(rank_rows: list[dict]) -> dict[str, int]:
    """Cluster-wide sums: bytes_per_step (sum of bytes sent, the metrics JSON's figure) and the
    busiest node's sent and received bytes."""
    sent = [sum(r["sent"].values()) for r in rank_rows]
    recv = [sum(r["recv"].values()) for r in rank_rows]
    return {"bytes_per_step": sum(sent), "max_node_sent": max(sent), "max_node_recv": max(recv)}
