"""Node assignment: which strategy, and how many FC workers k, trains fastest on a cluster.

The paper's offline optimisation, solved exhaustively (the stanza splits k = 1..N//2, every
one the engine can run, since each FC worker must serve a CONV worker, plus the baselines,
all cheap to evaluate): rank every candidate by predicted throughput in samples/s. The
baselines are ddp and every parameter-server variant on the same N nodes: colocated shards
and dedicated servers (S of the N nodes serve, N - S compute; S = 1, 2, 4, ... <= N//2 by
default), each with and without the overlapped push, so the ps baseline is its strongest
deployment, never a strawman. ddp is always a candidate, so the winner is never predicted
slower than ddp; on a tie the simpler candidate wins (ddp, then colocated ps, then
dedicated ps with fewer servers, no overlap before overlap, then stanza with the smaller k).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .. import registry
from ..anatomy import Profile
from ..topology import fc_worker_choices
from ..variant import Variant
from .blocks import MAX_SHARES, share_grid  # noqa: F401 (perf.optimize's names)
from .cluster import Cluster
from .model import DEFAULT_BUCKET_MB, Prediction, predict

@dataclasses.dataclass
class Assignment:
    best: Prediction  # with every rank's bytes
    ranking: list[Prediction]  # all candidates, fastest first (ranks omitted)
    ddp: Prediction
    ps: Prediction  # colocated shards, no overlap (the engine's default ps)
    best_ps: Prediction | None = None  # the fastest parameter-server variant among the candidates

    @property
    def speedup_vs_ddp(self) -> float:
        return self.best.throughput / self.ddp.throughput

    @property
    def speedup_vs_ps(self) -> float:
        return self.best.throughput / self.ps.throughput

    @property
    def speedup_vs_best_ps(self) -> float:
        return self.best.throughput / (self.best_ps or self.ps).throughput

    def best_stanza(self) -> Prediction | None:
        return next((p for p in self.ranking if registry.owns(p.strategy, "fc_workers")), None)

    def paper_stanza(self) -> Prediction | None:
        """The fastest stanza as the paper runs it (no share, M = 1, fp32, no compression)."""
        return next((p for p in self.ranking if registry.owns(p.strategy, "fc_workers") and not p.fc_batch
                     and p.variant.get("micro_batches", 1) == 1
                     and _wire(p) == ("fp32", "none")), None)

    def to_dict(self) -> dict[str, Any]:
        return {"best": self.best.to_dict(), "speedup_vs_ddp": self.speedup_vs_ddp,
                "speedup_vs_ps": self.speedup_vs_ps, "speedup_vs_best_ps": self.speedup_vs_best_ps,
                "ranking": [p.to_dict() for p in self.ranking]}


PAPER = (("fp32", "none"),)  # boundary dtype, CONV gradient compression: exact training
COMPRESSIONS = (("fp32", "none"), ("bf16", "none"), ("fp32", "bf16"), ("bf16", "bf16"), ("bf16", "powersgd"))
MICRO_BATCHES = (1, 2, 4, 8)


def _key(p: Prediction):
    # 12 significant digits: candidates equal up to float summation order count as a tie;
    # then the simpler one wins: fewer FC workers, no share, fewer chunks, no compression;
    # for ps: colocated, then fewer servers, no overlap before overlap
    v = p.variant
    comp = COMPRESSIONS.index(_wire(p))  # (fp32, none) outside stanza
    return (-float(f"{p.throughput:.12g}"), registry.get(p.strategy).simplicity, v.get("ps_servers", 0),
            v.get("ps_overlap", False), p.fc_workers or 0, p.fc_batch, v.get("micro_batches", 1), comp)


def _wire(p: Prediction) -> tuple[str, str]:
    """(boundary dtype, CONV gradient compression) of a candidate: (fp32, none) outside stanza."""
    return p.variant.get("boundary_dtype", "fp32"), p.variant.get("grad_compression", "none")


def default_ps_servers(nodes: int) -> list[int]:
    """Dedicated-server counts tried by default: 1, 2, 4, ... up to N//2 (powers of two keep a
    1,024-node sweep fast; a list passed to best_assignment replaces them)."""
    out, s = [], 1
    while s <= nodes // 2:
        out.append(s)
        s *= 2
    return out


@dataclasses.dataclass(frozen=True)
class Space:
    """What the optimiser searches: each strategy's model module turns it into its candidates
    (`candidates(space)`: the configurations of that strategy worth ranking, each predicted by
    `space.predict`, perf.predict itself, handed over so that no strategy model imports perf's
    front end)."""

    profile: Profile
    cluster: Cluster
    batch: dict[str, Any]  # predict's batch arguments: global_batch, batch_per_worker, bucket_mb
    global_batch: int | None
    batch_per_worker: int | None
    bucket_mb: float
    ps_shards: int | None  # colocated ps: shards (None: N)
    ps_servers: tuple[int, ...]  # dedicated ps: server counts tried
    ps_overlaps: tuple[bool, ...]  # ps: with and/or without the overlapped push
    fc_workers: tuple[int, ...]  # stanza: the k tried
    shares: Any  # stanza: "auto" or the shares tried
    micro_batches: tuple[int, ...]
    compressions: tuple[tuple[str, str], ...]
    predict: Callable[..., Prediction] = predict  # perf.predict(profile, cluster, variant, **batch)


def best_assignment(profile: Profile, cluster: Cluster, global_batch: int | None = None, *,
                    batch_per_worker: int | None = None, ps_shards: int | None = None,
                    fc_workers: range | list[int] | None = None, bucket_mb: float = DEFAULT_BUCKET_MB,
                    shares: str | list[float] = (0.0,), micro_batches=(1,), compressions=PAPER,
                    ps_servers: range | list[int] | None = None, ps_overlap: bool | None = None) -> Assignment:
    """Evaluate ddp, ps and stanza k = 1..N//2 (or the given k values) with the same batch rule,
    and return the fastest with the full ranking.

    ps candidates: colocated (ps_shards, default N) and dedicated servers S in ps_servers
    (default 1, 2, 4, ... <= N//2; [] for colocated only), each with and without the
    overlapped push (ps_overlap=False or True: only that one).

    Beyond the paper (defaults: the paper's space): `shares` ("auto": share_grid per k, or the
    FC workers' shares to try), `micro_batches` (M values; MICRO_BATCHES for all), `compressions`
    ((boundary dtype, gradient compression) pairs; COMPRESSIONS when the user allows them).
    Stanza keeps the global batch of the paper's stanza at each k (b x (N - k) with
    batch_per_worker): a share moves samples onto the FC workers, it does not add any."""
    batch = {"global_batch": global_batch, "batch_per_worker": batch_per_worker, "bucket_mb": bucket_mb}
    space = Space(profile, cluster, batch, global_batch, batch_per_worker, bucket_mb, ps_shards,
                  tuple(default_ps_servers(cluster.nodes) if ps_servers is None else ps_servers),
                  (False, True) if ps_overlap is None else (bool(ps_overlap),),
                  tuple(fc_worker_choices(cluster.nodes) if fc_workers is None else fc_workers),
                  shares, tuple(micro_batches), tuple(compressions))
    cands = [p for name in registry.compared() for p in registry.get(name).model_module().candidates(space)]
    ranking = sorted(cands, key=_key)
    top = ranking[0]
    best = predict(profile, cluster, top.variant, global_batch=top.global_batch, bucket_mb=bucket_mb)
    ddp = next(p for p in cands if p.strategy == "ddp")
    ps_cands = [p for p in cands if registry.owns(p.strategy, "ps_servers")]
    ps = next((p for p in ps_cands if not p.variant.get("ps_servers") and not p.variant.get("ps_overlap")), None) or \
        predict(profile, cluster, Variant("ps", ps_shards=ps_shards), **batch, with_ranks=False)
    best_ps = min(ps_cands, key=_key) if ps_cands else None
    return Assignment(best=best, ranking=ranking, ddp=ddp, ps=ps, best_ps=best_ps)
