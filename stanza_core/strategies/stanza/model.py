"""`stanza`: N - k CONV workers train the CONV body on their slices of the global batch and send
the boundary activations (and labels) to FC worker i % k, which trains the FC head on them and
returns the activation gradients; the CONV workers allreduce the CONV gradient among themselves,
the FC workers the FC gradient among the k. Extensions beyond the paper (its Options): hybrid
FC workers that also run the CONV body on a share of the batch, micro-batches, the boundary's
wire dtype, CONV gradient compression (their bytes: wire.py). perf/model.py's module docstring
states the step-time rules; the schedule itself is timeline.py's."""
from __future__ import annotations

from ...anatomy import DTYPE_BYTES, LABEL_BYTES
from ...perf.blocks import (DEFAULT_BATCH_PER_WORKER, ModelCounts, backward_units, clean, data_workers, layer_units,
                            report, ring_share, share_grid)
from ...variant import Variant
from .timeline import stanza_schedule
from .wire import WIRE_BYTES, conv_grad_bytes


def _allreduces(case, step):
    """(one member's CONV allreduce bytes and its members, an FC worker's FC allreduce bytes)."""
    c, topo, opt = case.counts, case.topo, case.variant.options
    members = topo.data_workers + (topo.fc_workers if topo.fc_batch else 0)  # hybrid FC workers join
    conv_ar = ring_share(conv_grad_bytes(c, opt.grad_compression, step), members)
    return conv_ar, members, ring_share(DTYPE_BYTES * c.fc_params, topo.fc_workers)


def rank_rows(case, ranks) -> list[dict]:
    c, topo, opt, batches = case.counts, case.topo, case.variant.options, case.batches
    A, nc = c.boundary_values, topo.data_workers
    conv_ar, _, fc_ar = _allreduces(case, case.step)
    w = WIRE_BYTES[opt.boundary_dtype]
    bn = case.bn_share(c.bn_conv_channels)  # the CONV side's batch-norm statistics only

    def row(r: int) -> dict:
        if r < nc:
            b = batches[r]
            return {"rank": r, "role": "conv_worker",
                    "sent": clean({"activations": w * b * A, "labels": LABEL_BYTES * b,
                                   "conv_grads": conv_ar, "bn_stats": bn}),
                    "recv": clean({"activation_grads": w * b * A, "conv_grads": conv_ar, "bn_stats": bn})}
        served = sum(batches[i] for i in topo.served_by(r))  # its CONV workers' samples
        hybrid = conv_ar if topo.fc_batch else 0
        return {"rank": r, "role": "fc_worker",
                "sent": clean({"activation_grads": w * served * A, "conv_grads": hybrid, "fc_grads": fc_ar}),
                "recv": clean({"activations": w * served * A, "labels": LABEL_BYTES * served,
                               "conv_grads": hybrid, "fc_grads": fc_ar})}

    return [row(r) for r in ranks]


def summary(case) -> dict[str, int]:
    c, topo, opt, batches = case.counts, case.topo, case.variant.options, case.batches
    k, nc = topo.fc_workers, topo.data_workers
    G = sum(batches)  # samples crossing the boundary (a hybrid FC worker's own never do)
    conv, members, fc = _allreduces(case, None)
    conv_ar, fc_ar = report(conv), report(fc)
    fc_conv = conv_ar if topo.fc_batch else 0
    bn = report(case.bn_share(c.bn_conv_channels))  # CONV workers' batch-norm statistics
    # rank 0 and the first FC worker carry the most (the first b % nc workers take one more sample)
    b0, s0 = batches[0], sum(batches[i] for i in topo.served_by(topo.fc_ranks[0]))
    act = WIRE_BYTES[opt.boundary_dtype] * c.boundary_values
    return {"bytes_per_step": 2 * act * G + LABEL_BYTES * G + members * conv_ar + k * fc_ar + nc * bn,
            "max_node_sent": max(act * b0 + LABEL_BYTES * b0 + conv_ar + bn, act * s0 + fc_ar + fc_conv),
            "max_node_recv": max(act * b0 + conv_ar + bn, act * s0 + LABEL_BYTES * s0 + fc_ar + fc_conv)}


def step_time(case):
    """The paper's stanza and its extensions (hybrid FC workers, micro-batches, compression):
    an event schedule (timeline.py); the free-communication step runs the same schedule."""
    profile, dev, b = case.profile, case.dev, case.b
    counts = ModelCounts.of(profile)
    conv_units = backward_units(profile, dev, ("conv",), b)
    fc_units = [(p, 0.0) for p, _ in reversed(layer_units(profile, "fc"))]
    args = (case, counts, conv_units, fc_units)
    total, terms = stanza_schedule(*args)
    crit, _ = stanza_schedule(*args, free=True)
    return total, crit, terms


def overlap(case) -> str:
    return "activation exchange pipelined with FC compute; CONV backward+allreduce overlaps FC allreduce"


def candidates(space) -> list:
    """k = 1..N//2 (or space.fc_workers), each with the shares, micro-batch counts and
    compressions of the space. Stanza keeps the global batch of the paper's stanza at each k
    (b x (N - k) with batch_per_worker): a share moves samples onto the FC workers, it does not
    add any."""
    profile, cluster = space.profile, space.cluster
    can_psgd = bool(getattr(profile, "conv_shapes", None))
    out = []
    for k in space.fc_workers:
        nc = data_workers(Variant("stanza", fc_workers=k), cluster.nodes)
        if space.global_batch is not None and space.global_batch < nc:
            continue  # fewer samples than CONV workers: not a valid configuration
        G = space.global_batch if space.global_batch is not None else \
            (space.batch_per_worker or DEFAULT_BATCH_PER_WORKER) * nc
        for share in (share_grid(G, cluster.nodes, Variant("stanza", fc_workers=k)) if space.shares == "auto" else space.shares):
            for M in space.micro_batches:
                for dtype, comp in space.compressions:
                    if comp == "powersgd" and not can_psgd:
                        continue
                    try:
                        v = Variant("stanza", fc_workers=k, fc_conv_share=share, micro_batches=M,
                                    boundary_dtype=dtype, grad_compression=comp)
                        out.append(space.predict(profile, cluster, v, global_batch=G, bucket_mb=space.bucket_mb,
                                                 with_ranks=False))
                    except ValueError:
                        continue  # a share or M this batch cannot take: not a valid configuration
    return out
