"""Rank layout: pure functions, no process groups, tested on their own.

Roles (named, never magic rank numbers):
  LOCAL        the single process of the `local` oracle
  WORKER       a data-parallel worker of ddp / ps (colocated ps: also the server of its shard, if any)
  PS_SERVER    ps with dedicated servers: holds one parameter shard, computes nothing
  CONV_WORKER  stanza: trains the CONV body on its slice of the global batch
  FC_WORKER    stanza: trains the FC head on the activations of the CONV workers it serves

Stanza layout with N ranks and k FC workers: CONV workers are ranks 0..N-k-1, FC workers are
ranks N-k..N-1, and CONV worker i is served by FC worker i % k, which balances the load to
within one CONV worker. Every rank creates every process group in the order of `groups()`.

Parameter-server layouts, S shards:
  colocated (ps_servers = 0)  N ranks, all data workers; shard s lives on rank s (S <= N).
  dedicated (ps_servers = S)  world size N + S: data workers are ranks 0..N-1, server s is
                              rank N + s and holds shard s (one shard per server).

Hybrid FC workers (`fc_batch` > 0): each FC worker also computes the CONV body on `fc_batch`
samples of the global batch G and joins the CONV allreduce. The global batch is laid out in
rank order: CONV worker i takes positions [i*bc, (i+1)*bc), FC worker j (rank Nc + j) takes
[Nc*bc + j*bh, Nc*bc + (j+1)*bh), with bh = fc_batch = share * G and bc = (G - k*bh) / Nc;
both must be whole numbers (`hybrid_batches`, in strategies/stanza/layout.py). Micro-batches split a worker's slice into M
contiguous chunks, the first b % M one sample larger (`chunk_slices`).

Each layout is its strategy's: the record names a `Layout` subclass (StrategySpec.layout, in the
strategy's folder: strategies/<name>/layout.py), which says its ranks' roles, its groups and its
rules; `Topology` and `resolve_layout` ask it and branch on no strategy name. A record that names
none gets `Layout`, plain data parallelism (every rank a WORKER).

The k that fit N ranks, `fc_worker_choices(N)` = 1..N//2, is the one statement of the rule
k <= N - k (with CONV worker i served by FC worker i % k, a larger k leaves an FC worker with no
CONV worker); the engine, the performance model, the optimiser and every experiment ask it.
The rules that tie a strategy, N, k, S and dedicated servers together are `resolve_layout`'s
alone, given the configuration as one variant.Variant: the engine's `make_topology` and the
performance model's `perf.traffic.model_layout` both call it (the model words its errors for its
arguments and allows an uneven split).
"""
from __future__ import annotations

import dataclasses

from . import registry
from .errors import ConfigError

LOCAL, WORKER, CONV_WORKER, FC_WORKER, PS_SERVER = "local", "worker", "conv_worker", "fc_worker", "ps_server"


class Layout:
    """A strategy's rank layout; this base is plain data parallelism: every rank a WORKER that
    computes the whole model on an equal slice of the global batch, no process group beyond WORLD.
    A strategy's own layout overrides what differs (strategies/<name>/layout.py)."""

    def resolve(self, variant, world_size: int, unit: str, name) -> tuple[int, int]:
        """(k, S) of `variant` (a variant.Variant: its strategy and options) on `world_size` ranks as
        the engine lays them out, or a one-line ConfigError (see resolve_layout)."""
        return 0, 0

    def fc_batch(self, variant, global_batch: int, world_size: int, k: int) -> int:
        """Samples each FC worker also runs the CONV body on (hybrid FC workers), else 0."""
        return 0

    def check(self, topo: "Topology", global_batch: int, variant) -> None:
        """The layout's rules on a built topology beyond the batch's split (one-line ConfigError)."""

    def conv_ranks(self, t: "Topology") -> list[int]:
        return list(range(t.world_size - t.ps_servers))

    def fc_ranks(self, t: "Topology") -> list[int]:
        return list(range(t.world_size - t.ps_servers))

    def conv_group(self, t: "Topology") -> list[int]:
        return t.conv_ranks

    def role(self, t: "Topology", rank: int) -> str:
        return WORKER

    def groups(self, t: "Topology") -> dict[str, list[int]]:
        return {}


_DEFAULT = Layout()
_layouts: dict[str, Layout] = {}


def layout_of(strategy: str) -> Layout:
    """The layout of `strategy`, from its record (one instance per layout class)."""
    path = registry.get(strategy).layout
    if not path:
        return _DEFAULT
    if path not in _layouts:
        _layouts[path] = registry.load(path)()
    return _layouts[path]


@dataclasses.dataclass(frozen=True)
class Topology:
    strategy: str
    world_size: int  # N
    fc_workers: int  # k (stanza), else 0
    ps_shards: int  # S (ps), else 0
    fc_batch: int = 0  # bh: samples each FC worker also runs the CONV body on (stanza, hybrid), else 0
    ps_servers: int = 0  # dedicated server ranks (ps), the last ones; 0: shards colocated with workers

    @property
    def layout(self) -> Layout:
        return layout_of(self.strategy)

    @property
    def conv_ranks(self) -> list[int]:
        """Ranks that compute the CONV body on data (every data worker for local/ddp/ps)."""
        return self.layout.conv_ranks(self)

    @property
    def fc_ranks(self) -> list[int]:
        return self.layout.fc_ranks(self)

    @property
    def server_ranks(self) -> list[int]:
        """Ranks that hold a parameter-server shard, in shard order (ps), else []."""
        return [self.shard_owner(s) for s in range(self.ps_shards)]

    @property
    def data_workers(self) -> int:
        """How many ranks the global batch is split over."""
        return len(self.conv_ranks)

    def worker_batch(self, global_batch: int) -> int:
        """Samples each CONV (data) worker computes per step: G over the data workers, or with
        hybrid FC workers what their shares leave, (G - k bh) / Nc."""
        return (global_batch - self.fc_workers * self.fc_batch) // self.data_workers

    @property
    def conv_group(self) -> list[int]:
        """Ranks whose CONV gradients are allreduced together (hybrid FC workers included)."""
        return self.layout.conv_group(self)

    def role(self, rank: int) -> str:
        self._check_rank(rank)
        return self.layout.role(self, rank)

    def fc_worker_of(self, conv_rank: int) -> int:
        """The FC worker that serves CONV worker `conv_rank` (stanza)."""
        n_conv = self.world_size - self.fc_workers
        if not 0 <= conv_rank < n_conv:
            raise ValueError(f"rank {conv_rank} is not a CONV worker (CONV workers: 0..{n_conv - 1})")
        return n_conv + conv_rank % self.fc_workers

    def served_by(self, fc_rank: int) -> list[int]:
        """CONV workers served by FC worker `fc_rank`, in rank order (stanza)."""
        if self.role(fc_rank) != FC_WORKER:
            raise ValueError(f"rank {fc_rank} is not an FC worker")
        n_conv = self.world_size - self.fc_workers
        return list(range(fc_rank - n_conv, n_conv, self.fc_workers))

    def batch_slice(self, rank: int, global_batch: int) -> slice:
        """Positions of the global batch that data worker `rank` (or hybrid FC worker) computes."""
        b = self.worker_batch(global_batch)
        if self.fc_batch and rank in self.fc_ranks:
            start = self.data_workers * b + self.fc_ranks.index(rank) * self.fc_batch
            return slice(start, start + self.fc_batch)
        i = self.conv_ranks.index(rank)
        return slice(i * b, (i + 1) * b)

    def groups(self) -> dict[str, list[int]]:
        """Process groups beyond WORLD, by name, in creation order (identical on every rank): the
        layout's (stanza's: strategies/stanza/layout.py)."""
        return self.layout.groups(self)

    def pair_group(self, conv_rank: int) -> str:
        """Name of the process group of CONV worker `conv_rank` and the FC worker serving it."""
        return f"pair{conv_rank}"

    def shard_owner(self, shard: int) -> int:
        """Rank that serves parameter-server shard `shard` (colocated: rank s; dedicated: N + s)."""
        if not 0 <= shard < self.ps_shards:
            raise ValueError(f"shard {shard} out of range 0..{self.ps_shards - 1}")
        return self.world_size - self.ps_servers + shard if self.ps_servers else shard

    def shard_of(self, rank: int) -> int | None:
        """The shard `rank` serves (ps), or None."""
        self._check_rank(rank)
        first = self.world_size - self.ps_servers if self.ps_servers else 0
        return rank - first if first <= rank < first + self.ps_shards else None

    def _check_rank(self, rank: int):
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} out of range for world size {self.world_size}")


def plain_topology(variant, nodes: int) -> Topology:
    """The layout of `variant` (a variant.Variant) on `nodes` ranks without its checks (the model's,
    the optimiser's): its k and its dedicated servers, as its options say (0 where it has none)."""
    opts = variant.options.values()
    return Topology(variant.strategy, nodes, opts.get("fc_workers", 0) or 0, 0, ps_servers=opts.get("ps_servers", 0))


def global_batch_for(variant, nodes: int, batch_per_worker: int) -> int:
    """G that gives each data worker of `variant` (a variant.Variant) `batch_per_worker` samples
    (k counts for stanza only; dedicated ps servers are nodes beside the `nodes` workers)."""
    return batch_per_worker * dataclasses.replace(plain_topology(variant, nodes), ps_servers=0).data_workers


def fc_worker_choices(nodes: int) -> range:
    """The k FC workers that fit `nodes` ranks: 1..N//2 (k <= N - k, see the module docstring)."""
    return range(1, nodes // 2 + 1)


def chunk_slices(s: slice, chunks: int) -> list[slice]:
    """`s` cut into `chunks` contiguous chunks (stanza's micro-batches), the first len % chunks one
    sample larger."""
    n = s.stop - s.start
    if not 1 <= chunks <= n:
        raise ValueError(f"cannot cut {n} samples into {chunks} micro-batches")
    base, extra = divmod(n, chunks)
    out, start = [], s.start
    for j in range(chunks):
        stop = start + base + (1 if j < extra else 0)
        out.append(slice(start, stop))
        start = stop
    return out


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def resolve_layout(variant, world_size: int, *, unit: str = "ranks", name=_flag) -> tuple[int, int]:
    """The layout rules, stated once per strategy (its Layout.resolve): one-line ConfigError for a
    `variant` (a variant.Variant: strategy, k, S, dedicated servers) that does not fit `world_size`;
    else (k, S) as the engine lays them out (k = 0 unless stanza; S = 0 unless ps, S = N when not
    given, S = ps_servers with dedicated servers). `unit` and `name` only word the message: the
    engine's flags and ranks (make_topology), or the performance model's arguments and nodes."""
    if world_size < 1:
        raise ConfigError(f"world size must be >= 1, got {world_size}")
    return layout_of(variant.strategy).resolve(variant, world_size, unit, name)


def make_topology(variant, world_size: int, global_batch: int) -> Topology:
    """The engine's rank layout of `variant` (a variant.Variant) on `world_size` ranks with
    `global_batch` samples per step; every error is one line saying what is wrong and what is expected."""
    k, ps_shards = resolve_layout(variant, world_size)
    layout = layout_of(variant.strategy)
    fc_batch = layout.fc_batch(variant, global_batch, world_size, k)
    servers = variant.options.values().get("ps_servers", 0)
    topo = Topology(variant.strategy, world_size, k, ps_shards, fc_batch, ps_servers=servers)
    if not fc_batch and global_batch % topo.data_workers:
        said = f" ({topo.ps_servers} of them dedicated servers)" if topo.ps_servers else ""
        raise ConfigError(f"--global-batch {global_batch} is not divisible by the {topo.data_workers} data "
                          f"workers of {variant.strategy} on {world_size} ranks{said}")
    layout.check(topo, global_batch, variant)
    return topo


def unused_part(topo, rank: int) -> str | None:
    """The part of the split a stanza rank never computes: "fc" on a CONV worker, "conv" on an FC
    worker that is not hybrid (a hybrid one trains both), else None."""
    if topo.role(rank) == CONV_WORKER:
        return "fc"
    return None if topo.fc_batch else "conv"
