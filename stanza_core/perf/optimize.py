"""Node assignment: which strategy, and how many FC workers k, trains fastest on a cluster.

The paper's offline optimisation, solved exhaustively (the stanza splits k = 1..N//2, every
one the engine can run, since each FC worker must serve a CONV worker, plus two baselines,
all cheap to evaluate in closed form): rank every candidate by predicted throughput in
samples/s. ddp is always a candidate, so the winner is never predicted slower than ddp; on
a tie the simpler candidate wins (ddp, then ps, then stanza with the smaller k).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..anatomy import Profile
from .cluster import Cluster
from .model import DEFAULT_BUCKET_MB, Prediction, predict

_SIMPLICITY = {"ddp": 0, "ps": 1, "stanza": 2}


@dataclasses.dataclass
class Assignment:
    best: Prediction  # with every rank's bytes
    ranking: list[Prediction]  # all candidates, fastest first (ranks omitted)
    ddp: Prediction
    ps: Prediction

    @property
    def speedup_vs_ddp(self) -> float:
        return self.best.throughput / self.ddp.throughput

    @property
    def speedup_vs_ps(self) -> float:
        return self.best.throughput / self.ps.throughput

    def best_stanza(self) -> Prediction | None:
        return next((p for p in self.ranking if p.strategy == "stanza"), None)

    def to_dict(self) -> dict[str, Any]:
        return {"best": self.best.to_dict(), "speedup_vs_ddp": self.speedup_vs_ddp,
                "speedup_vs_ps": self.speedup_vs_ps, "ranking": [p.to_dict() for p in self.ranking]}


def _key(p: Prediction):
    # 12 significant digits: candidates equal up to float summation order count as a tie
    return (-float(f"{p.throughput:.12g}"), _SIMPLICITY[p.strategy], p.fc_workers or 0)


def best_assignment(profile: Profile, cluster: Cluster, global_batch: int | None = None, *,
                    batch_per_worker: int | None = None, ps_shards: int | None = None,
                    fc_workers: range | list[int] | None = None, bucket_mb: float = DEFAULT_BUCKET_MB) -> Assignment:
    """Evaluate ddp, ps (ps_shards, default N) and stanza k = 1..N//2 (or the given k values)
    with the same batch rule, and return the fastest with the full ranking."""
    batch = {"global_batch": global_batch, "batch_per_worker": batch_per_worker, "bucket_mb": bucket_mb}
    ddp = predict(profile, cluster, "ddp", **batch, with_ranks=False)
    ps = predict(profile, cluster, "ps", **batch, ps_shards=ps_shards, with_ranks=False)
    ks = range(1, cluster.nodes // 2 + 1) if fc_workers is None else fc_workers
    cands = [ddp, ps]
    for k in ks:
        if global_batch is not None and global_batch < cluster.nodes - k:
            continue  # fewer samples than CONV workers: not a valid configuration
        cands.append(predict(profile, cluster, "stanza", k, **batch, with_ranks=False))
    ranking = sorted(cands, key=_key)
    top = ranking[0]
    best = predict(profile, cluster, top.strategy, top.fc_workers, **batch,
                   ps_shards=top.ps_shards if top.strategy == "ps" else None)
    return Assignment(best=best, ranking=ranking, ddp=ddp, ps=ps)
