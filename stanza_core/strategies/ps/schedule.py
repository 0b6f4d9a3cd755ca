"""`ps`'s program (engine.py): every server rank posts the receives of its shard's pieces first;
a worker's forward and backward, its pushes of each piece to the piece's server with the pulls
posted beside them (after the backward, or bucket by bucket as the backward closes each bucket
with ps_overlap); a server updates each piece as soon as every worker's push of it has arrived and
sends it back to every worker at once; then the pushes, pulls and answers are waited for."""
from __future__ import annotations

from ...sim.build import Ops, emit
from ...topology import WORKER
from .engine import bucket_ranges, pieces_of, shard_sizes

ELEM = 4  # fp32


def layout(ctx):
    """The flat vector's shards, buckets and pieces, as the engine cuts them (made once)."""
    got = ctx.__dict__.get("_ps_layout")
    if got is None:
        numels = [p.numel() for p in ctx.work.params("model")]
        total = sum(numels)
        sizes = shard_sizes(total, ctx.topo.ps_shards)
        starts = [sum(sizes[:s]) for s in range(len(sizes))]
        ranges = [slice(a, a + n) for a, n in zip(starts, sizes)]
        buckets = bucket_ranges(numels, ctx.cap_bytes, ELEM) if ctx.options.ps_overlap else [slice(0, total)]
        offsets = [sum(numels[:k]) for k in range(len(numels))]
        bucket_of = {k: j for j, b in enumerate(buckets) for k in range(len(numels)) if b.start <= offsets[k] < b.stop}
        got = ctx.__dict__["_ps_layout"] = (numels, pieces_of(buckets, ranges), buckets, bucket_of)
    return got


def rank_step(ctx, rank: int) -> Ops:
    topo = ctx.topo
    numels, pieces, buckets, bucket_of = layout(ctx)
    owner = [topo.shard_owner(s) for s in range(topo.ps_shards)]
    owned = topo.shard_of(rank)
    mine = [i for i, (_, s, _) in enumerate(pieces) if s == owned]
    workers = topo.conv_ranks
    size = [(r.stop - r.start) * ELEM for _, _, r in pieces]
    ops = Ops()
    ops.compute("step", "overhead", ctx.work.step_overhead_s)
    recv = {i: ops.p2p([("recv", w, size[i], "grads", i) for w in workers if w != rank]) for i in mine}
    pushes, pulls = [], []
    if topo.role(rank) == WORKER:
        def push(j):
            out = [(i, s) for i, (b, s, _) in enumerate(pieces) if b == j and owner[s] != rank]
            pushes.extend(ops.p2p([("send", owner[s], size[i], "grads", i) for i, s in out]))
            pulls.extend(ops.p2p([("recv", owner[s], size[i], "params", i) for i, s in out]))

        if ctx.options.ps_overlap:
            pending = [sum(1 for k in bucket_of if bucket_of[k] == j) for j in range(len(buckets))]
        else:
            pending = [0]

        def ready(k):
            if not ctx.options.ps_overlap:
                return
            j = bucket_of[k]
            pending[j] -= 1
            if pending[j] == 0:
                pending[j] = -1
                push(j)

        fwd, bwd = ctx.trace("model", ctx.b)
        emit(ops, fwd)
        emit(ops, bwd, ready)
        for j, left in enumerate(pending):
            if left >= 0:
                push(j)
    sends = []
    if owned is not None:
        node = ops.as_completed([recv[i] for i in mine])
        for n, i in enumerate(mine):
            body = node.body(n)
            body.compute("optimizer", "update", ctx.work.update_seconds(size[i] // ELEM))
            sends += body.p2p([("send", w, size[i], "params", i) for w in workers if w != rank])
    ops.wait(pushes)
    ops.wait(pulls)
    ops.wait(sends)
    return ops
