"""Rank layout: pure functions, no process groups, tested on their own.

Roles (named, never magic rank numbers):
  LOCAL        the single process of the `local` oracle
  WORKER       a data-parallel worker of ddp / ps (ps: also the server of its shard, if any)
  CONV_WORKER  stanza: trains the CONV body on its slice of the global batch
  FC_WORKER    stanza: trains the FC head on the activations of the CONV workers it serves

Stanza layout with N ranks and k FC workers: CONV workers are ranks 0..N-k-1, FC workers are
ranks N-k..N-1, and CONV worker i is served by FC worker i % k, which balances the load to
within one CONV worker. Every rank creates every process group in the order of `groups()`.
"""
from __future__ import annotations

import dataclasses

from .config import STRATEGIES, ConfigError

LOCAL, WORKER, CONV_WORKER, FC_WORKER = "local", "worker", "conv_worker", "fc_worker"


@dataclasses.dataclass(frozen=True)
class Topology:
    strategy: str
    world_size: int  # N
    fc_workers: int  # k (stanza), else 0
    ps_shards: int  # S (ps), else 0

    @property
    def conv_ranks(self) -> list[int]:
        """Ranks that compute the CONV body on data (every data worker for local/ddp/ps)."""
        if self.strategy == "stanza":
            return list(range(self.world_size - self.fc_workers))
        return list(range(self.world_size))

    @property
    def fc_ranks(self) -> list[int]:
        if self.strategy == "stanza":
            return list(range(self.world_size - self.fc_workers, self.world_size))
        return list(range(self.world_size))

    @property
    def data_workers(self) -> int:
        """How many ranks the global batch is split over."""
        return len(self.conv_ranks)

    def role(self, rank: int) -> str:
        self._check_rank(rank)
        if self.strategy == "local":
            return LOCAL
        if self.strategy in ("ddp", "ps"):
            return WORKER
        return CONV_WORKER if rank < self.world_size - self.fc_workers else FC_WORKER

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
        """Positions of the global batch that data worker `rank` computes."""
        b = global_batch // self.data_workers
        i = self.conv_ranks.index(rank)
        return slice(i * b, (i + 1) * b)

    def groups(self) -> dict[str, list[int]]:
        """Process groups beyond WORLD, by name, in creation order (identical on every rank).

        Stanza also gets one two-rank group per CONV-FC pair (`pair_group`), which carries that
        pair's activations and activation gradients: on NCCL each group is its own
        communicator and stream, so an FC worker's exchanges with different CONV workers do
        not run in posting order behind each other."""
        if self.strategy != "stanza":
            return {}
        pairs = {self.pair_group(i): [i, self.fc_worker_of(i)] for i in self.conv_ranks}
        return {"conv": self.conv_ranks, "fc": self.fc_ranks, **pairs}

    def pair_group(self, conv_rank: int) -> str:
        """Name of the process group of CONV worker `conv_rank` and the FC worker serving it."""
        return f"pair{conv_rank}"

    def shard_owner(self, shard: int) -> int:
        """Rank that serves parameter-server shard `shard` (ps: shard s on rank s)."""
        if not 0 <= shard < self.ps_shards:
            raise ValueError(f"shard {shard} out of range 0..{self.ps_shards - 1}")
        return shard

    def _check_rank(self, rank: int):
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} out of range for world size {self.world_size}")


def make_topology(strategy: str, world_size: int, global_batch: int, fc_workers: int = 1,
                  ps_shards: int = 0) -> Topology:
    """Validate a layout; every error is one line saying what is wrong and what is expected."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if world_size < 1:
        raise ConfigError(f"world size must be >= 1, got {world_size}")
    if strategy == "local" and world_size != 1:
        raise ConfigError(f"strategy local runs in one process, got world size {world_size} (use ddp, ps or stanza)")
    if strategy == "stanza":
        if world_size < 2:
            raise ConfigError("stanza needs at least 2 ranks (1 CONV worker + 1 FC worker), got 1")
        if fc_workers < 1:
            raise ConfigError(f"--fc-workers must be >= 1 with stanza, got {fc_workers}")
        if fc_workers >= world_size:
            raise ConfigError(f"--fc-workers {fc_workers} leaves no CONV worker with {world_size} ranks; "
                              f"expected 1 <= k <= {world_size // 2}")
        if fc_workers > world_size - fc_workers:
            raise ConfigError(f"--fc-workers {fc_workers} on {world_size} ranks leaves an FC worker with no CONV "
                              f"worker to serve; expected k <= N - k, i.e. k <= {world_size // 2}")
    else:
        fc_workers = 0
    if strategy == "ps":
        ps_shards = ps_shards or world_size
        if ps_shards > world_size:
            raise ConfigError(f"--ps-shards {ps_shards} exceeds the {world_size} ranks that serve them")
    else:
        ps_shards = 0
    topo = Topology(strategy, world_size, fc_workers, ps_shards)
    if global_batch % topo.data_workers:
        raise ConfigError(f"--global-batch {global_batch} is not divisible by the {topo.data_workers} data "
                          f"workers of {strategy} on {world_size} ranks")
    return topo
