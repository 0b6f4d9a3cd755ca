"""`ps`: every data worker trains the whole model, pushes each shard's gradient slice to its
owner and pulls the updated parameters back. Colocated (S shards on S of the N ranks that also
compute) or dedicated (S server ranks beside the N - S data workers, one shard each, no
compute); with `ps_overlap`, the gradient is pushed in buckets as the backward produces them.
model.py's module docstring states the step-time rules."""
from __future__ import annotations

import bisect
import itertools

from ...anatomy import DTYPE_BYTES
from ...buckets import bucket_groups
from ...perf.blocks import backward_units, clean, data_workers, ps_shard_sizes, report
from ...variant import Variant


def rank_rows(case, ranks) -> list[dict]:
    c, N, servers = case.counts, case.nodes, case.topo.ps_servers
    P = c.params
    sizes = [DTYPE_BYTES * s for s in ps_shard_sizes(P, case.topo.ps_shards)]
    nw = case.topo.data_workers  # data workers; with dedicated servers, server s is rank nw + s
    bn = case.bn_share(c.bn_conv_channels + c.bn_fc_channels)  # among the data workers

    def row(r: int) -> dict:
        if servers and r >= nw:
            served = nw * sizes[r - nw]
            return {"rank": r, "role": "ps_server", "sent": clean({"params": served}), "recv": clean({"grads": served})}
        if servers:  # pushes every shard's slice, pulls every shard back
            return {"rank": r, "role": "worker", "sent": clean({"grads": DTYPE_BYTES * P, "bn_stats": bn}),
                    "recv": clean({"params": DTYPE_BYTES * P, "bn_stats": bn})}
        own = sizes[r] if r < case.topo.ps_shards else 0
        others = DTYPE_BYTES * P - own  # pushed to / pulled from the other ranks' shards
        served = (N - 1) * own  # what this rank's shard takes in (grads) and gives out (params)
        return {"rank": r, "role": "worker", "sent": clean({"grads": others, "params": served, "bn_stats": bn}),
                "recv": clean({"grads": served, "params": others, "bn_stats": bn})}

    return [row(r) for r in ranks]


def summary(case) -> dict[str, int]:
    c, N, servers = case.counts, case.nodes, case.topo.ps_servers
    P, bn_all = c.params, c.bn_conv_channels + c.bn_fc_channels
    if servers:
        # a worker moves 4P each way plus the batch-norm statistics among the workers (servers
        # run no forward pass); server 0 holds the largest shard and serves every worker
        nw = N - servers
        bn_w = report(case.bn_share(bn_all))
        server = nw * DTYPE_BYTES * ps_shard_sizes(P, servers)[0]
        busiest = max(DTYPE_BYTES * P + bn_w, server)
        return {"bytes_per_step": 2 * nw * DTYPE_BYTES * P + nw * bn_w, "max_node_sent": busiest,
                "max_node_recv": busiest}
    # rank r < S moves 4P - own + (N-1) own each way; rank 0 holds the largest shard
    bn = report(case.bn_share(bn_all))
    busiest = DTYPE_BYTES * P + (N - 2) * DTYPE_BYTES * ps_shard_sizes(P, case.topo.ps_shards)[0] + bn
    return {"bytes_per_step": 2 * (N - 1) * DTYPE_BYTES * P + N * bn, "max_node_sent": busiest,
            "max_node_recv": busiest}


def overlap(case) -> str:
    if case.variant.options.ps_overlap:
        return "gradient buckets pushed as the backward produces them; pieces updated and pulled as they arrive"
    return "none: compute, push, shard update, pull run one after another"


def candidates(space) -> list:
    """Colocated shards (space.ps_shards, default N) and dedicated servers S in space.ps_servers,
    each with and without the overlapped push (space.ps_overlaps)."""
    profile, cluster, batch = space.profile, space.cluster, space.batch
    predict = space.predict
    out = [predict(profile, cluster, Variant("ps", ps_shards=space.ps_shards, ps_overlap=o), **batch, with_ranks=False)
           for o in space.ps_overlaps]
    for s in space.ps_servers:
        if space.global_batch is not None and space.global_batch < data_workers(Variant("ps", ps_servers=s),
                                                                                cluster.nodes):
            continue
        out += [predict(profile, cluster, Variant("ps", ps_servers=s, ps_overlap=o), **batch, with_ranks=False)
                for o in space.ps_overlaps]
    return out


def _buckets(profile, dev, b, cap, overlap, bwd_total):
    """(ready time from the backward's start, flat range [lo, hi) in values) of each push
    bucket, in backward order; without overlap one bucket, the whole vector, after the backward."""
    P = profile.params
    if not overlap:
        return [(bwd_total, 0, P)]
    units = backward_units(profile, dev, ("conv", "fc"), b)
    ends = list(itertools.accumulate(dt for _, dt in units))
    out, hi = [], P
    for g in bucket_groups([params * DTYPE_BYTES for params, _ in units], cap):  # the engine's rule
        size = sum(units[i][0] for i in g)
        out.append((ends[g[-1]], hi - size, hi))
        hi -= size
    return out


def _pieces(lo, hi, starts, sizes):
    """Values of each shard inside [lo, hi): [(shard, values)] for the shards it touches."""
    first = bisect.bisect_right(starts, lo) - 1
    out = []
    for s in range(first, len(starts)):
        if starts[s] >= hi:
            break
        n = min(hi, starts[s] + sizes[s]) - max(lo, starts[s])
        if n > 0:
            out.append((s, n))
    return out


def step_time(case):
    """Push, update and pull of each bucket's pieces, link by link (module docstring).

    Links (each direction its own, one message at a time): every shard owner's egress and
    ingress, and those of a data worker that holds no shard (all workers alike). A bucket's
    push occupies each worker's egress (the bucket less the worker's own piece, one message
    per other owner) and each owner's ingress (its piece from every other data worker); it
    starts on a link at max(bucket ready, link free) and is in when every link is done. An
    owner updates its piece once the push is in (a colocated owner: not before its own
    backward ends), then the pull mirrors the push (the workers post it with the push, so it
    may flow during the backward). Colocated owners are workers too: their links carry pushes
    and pulls alike.
    Pushes and pulls are laid on the links in the order they become ready."""
    profile, dev, cluster, b, cap = case.profile, case.dev, case.cluster, case.b, case.cap
    shards, servers, overlap = case.topo.ps_shards, case.topo.ps_servers, case.variant.options.ps_overlap
    N = cluster.nodes
    nw = N - servers
    fwd = dev.step_overhead_s + dev.time_s("conv", "fwd", b) + dev.time_s("fc", "fwd", b)
    bwd = dev.time_s("conv", "bwd", b) + dev.time_s("fc", "bwd", b)
    sizes = ps_shard_sizes(profile.params, shards)
    starts = [0, *itertools.accumulate(sizes)][:-1]
    buckets = [(r, hi - lo, dict(_pieces(lo, hi, starts, sizes)))
               for r, lo, hi in _buckets(profile, dev, b, cap, overlap, bwd)]
    plain = servers or N > shards  # a data worker that holds no shard exists
    others = nw if servers else N - 1  # pushes an owner takes in per piece

    def run(xfer, free=False):
        out, inn, upd_free = [0.0] * shards, [0.0] * shards, [0.0] * shards
        w_out = w_in = 0.0
        busy = {}  # (direction, link) -> seconds of push or pull traffic it carries

        def lay(t0, owners_load, worker_load, direction):
            """Lay one push or pull from t0; return when its last link is done."""
            nonlocal w_out, w_in
            if free:
                return t0
            end = t0
            own_links, worker_link = (inn, out) if direction == "push" else (out, inn)
            for s, (own_t, work_t) in owners_load.items():
                if own_t:
                    own_links[s] = max(t0, own_links[s]) + own_t
                    end = max(end, own_links[s])
                    busy[direction, "owner", s, direction == "push"] = busy.get((direction, "owner", s, direction == "push"), 0.0) + own_t
                if work_t:  # a colocated owner is a worker too: its other link
                    worker_link[s] = max(t0, worker_link[s]) + work_t
                    end = max(end, worker_link[s])
                    busy[direction, "owner", s, direction != "push"] = busy.get((direction, "owner", s, direction != "push"), 0.0) + work_t
            if plain and worker_load:
                if direction == "push":
                    w_out = max(t0, w_out) + worker_load
                    end = max(end, w_out)
                else:
                    w_in = max(t0, w_in) + worker_load
                    end = max(end, w_in)
                busy[direction, "worker"] = busy.get((direction, "worker"), 0.0) + worker_load
            return end

        def loads(pieces, nbytes):
            m = len(pieces)
            worker_t = xfer(nbytes, m)
            owners = {s: (xfer(others * DTYPE_BYTES * n, others), 0.0) for s, n in pieces.items()}
            if not servers:  # every owner also sends (receives) the bucket less its own piece
                for s in range(shards):
                    own = pieces.get(s, 0)
                    owners[s] = (owners.get(s, (0.0, 0.0))[0],
                                 xfer(nbytes - DTYPE_BYTES * own, m - (1 if own else 0)))
            return owners, worker_t

        pull_ready, pulls, end, i, k = [], [], 0.0, 0, 0
        nb = len(buckets)
        while k < nb:
            if i < nb and (k >= i or buckets[i][0] <= pull_ready[k]):
                ready, nvals, pieces = buckets[i]
                owners, worker_t = loads(pieces, DTYPE_BYTES * nvals)
                pulls.append((owners, worker_t))
                t_in = lay(ready, owners, worker_t, "push")
                done = t_in
                for s, n in pieces.items():
                    upd_free[s] = max(t_in, upd_free[s], 0.0 if servers else bwd) + n * dev.update_s_per_param
                    done = max(done, upd_free[s])
                pull_ready.append(done)  # the workers posted its pull with its push (engine: ps._push)
                i += 1
            else:
                owners, worker_t = pulls[k]
                end = max(end, lay(pull_ready[k], owners, worker_t, "pull"))
                k += 1
        phases = {d: max([v for key, v in busy.items() if key[0] == d], default=0.0) for d in ("push", "pull")}
        return end, phases

    xfer = cluster.transfer_s if N > 1 else (lambda nbytes, msgs: 0.0)
    end, phases = run(xfer)
    free, _ = run(lambda nbytes, msgs: 0.0, free=True)  # the same step with free communication
    # per-message latency on the busiest link of each push and pull
    msgs = [max(len(p), others if N > 1 else 0) if N > 1 else 0 for _, _, p in buckets]
    lat = 2 * sum(msgs) * cluster.latency_s
    upd = max(sizes)  # values the busiest server updates per step
    return fwd + max(bwd, end), fwd + max(bwd, free), {
        "ps_push_s": phases["push"], "ps_pull_s": phases["pull"], "latency_s": lat,
        "update_s": upd * dev.update_s_per_param, "ps_buckets": len(buckets)}
