"""Stanza's step time as an event schedule: hybrid FC workers, M micro-batches, compression.

The busiest FC worker (FC worker 0, serving m = ceil(Nc/k) CONV workers) is simulated chunk
by chunk; every CONV worker it serves runs the same schedule (identical batches):

  CONV worker      forward chunk j (b/M samples) at overhead + (j+1) f; its activations
                   (+ labels: 2 messages) leave as soon as they exist and the worker's link is free.
  FC ingress       one link: chunks cross it one after another in release order (x_in each).
  FC compute       a hybrid FC worker first runs its own CONV forward (M chunks of bh/M) and its
                   own chunks' FC work; then each arrived chunk: FC fwd+bwd (c), in arrival order.
  FC egress        each chunk's activation gradient (x_out), in the same order.
  CONV backward    chunk j's backward starts once the whole forward is done, chunk j-1's backward
                   is done and its gradient is back; a hybrid FC worker runs its own M backward
                   chunks after its last remote chunk.
  CONV allreduce   engine bucketing (GradBuckets) over the last backward chunk: a bucket goes out
                   once every member (the CONV workers, and the hybrid FC workers) has produced
                   it and the previous bucket is done; a member's link is free only after its
                   exchange (and, on an FC worker, its FC allreduce).
  FC allreduce     among k, after the last activation gradient has left FC worker 0.

Compression scales the wire bytes: boundary values 2 bytes in bf16/fp16; CONV buckets by the
ratio of compressed to fp32 gradient bytes (wire.conv_grad_bytes); PowerSGD runs three
allreduces per bucket (uncompressed tensors, P, Q: 3x the latency) and its matmuls are not
modelled. With M = 1, no share and fp32 this is the paper's 3-stage pipeline (model.py). The
CONV and FC backward units and the links are perf's building blocks (perf.blocks, perf.cluster).
"""
from __future__ import annotations

import math

from ...anatomy import DTYPE_BYTES, LABEL_BYTES
from .wire import WIRE_BYTES, conv_grad_bytes


def _buckets(units: list[tuple[int, float]], cap: int) -> list[tuple[float, int]]:
    """(ready fraction of the backward, fp32 bytes) per bucket, engine rule: a new bucket
    starts before one would exceed the cap; units are (params, seconds) in backward order."""
    total = sum(dt for _, dt in units) or 1.0
    t, size, out = 0.0, 0, []
    for params, dt in units:
        nbytes = DTYPE_BYTES * params
        if size and size + nbytes > cap:
            out.append((t / total, size))
            size = 0
        t += dt
        size += nbytes
    if size:
        out.append((t / total, size))
    return out


def stanza_schedule(case, counts, conv_units, fc_units, free: bool = False) -> tuple[float, dict]:
    """(step seconds, terms) of one stanza step (`case`: perf.model.StepCase, its variant's options
    and its layout's k and hybrid share); `free`: the same step with free communication.

    conv_units / fc_units: (params, seconds) per layer in backward order (perf.blocks.backward_units)."""
    profile, dev, cluster, bc, cap, opt = case.profile, case.dev, case.cluster, case.b, case.cap, case.variant.options
    N, k = cluster.nodes, case.topo.fc_workers
    nc, M, bh = N - k, opt.micro_batches, case.topo.fc_batch
    m = math.ceil(nc / k)
    A, w = profile.boundary_values, WIRE_BYTES[opt.boundary_dtype]
    lat = 0.0 if free else cluster.latency_s

    def xfer(nbytes, msgs):
        return 0.0 if free else cluster.transfer_s(nbytes, msgs)

    def ring(nbytes, n):
        return 0.0 if free else cluster.ring_allreduce_s(nbytes, n)

    o = dev.step_overhead_s
    cc = math.ceil(bc / M)  # the largest chunk paces the pipeline
    f, bw = dev.time_s("conv", "fwd", cc), dev.time_s("conv", "bwd", cc)
    c = dev.time_s("fc", "fwd", cc) + dev.time_s("fc", "bwd", cc)
    x_in, x_out = xfer(w * cc * A + LABEL_BYTES * cc, 2), xfer(w * cc * A, 1)

    compute = o  # FC worker 0's accelerator
    if bh:
        ch = math.ceil(bh / M)
        compute += M * (dev.time_s("conv", "fwd", ch) + dev.time_s("fc", "fwd", ch) + dev.time_s("fc", "bwd", ch))
    ingress = egress = 0.0
    conv_link = [0.0] * m
    back = [[0.0] * M for _ in range(m)]
    for j in range(M):  # chunk j of every served CONV worker is released at o + (j+1) f
        for i in range(m):
            start = max(o + (j + 1) * f, ingress, conv_link[i])
            ingress = conv_link[i] = start + x_in
            compute = max(ingress, compute) + c
            egress = max(compute, egress) + x_out
            back[i][j] = egress
    exchange_end = egress
    # CONV worker backward: after its forward, chunk by chunk as gradients return
    fwd_end = o + M * f
    last_start = 0.0
    for i in range(m):
        t = fwd_end
        for j in range(M):
            s = max(t, back[i][j])
            t = s + bw
        last_start = max(last_start, s)
    conv_bwd_end = last_start + bw
    # FC allreduce among k (zero-time units: all FC grads final after the last chunk)
    fc_ar, fc_end_link = 0.0, exchange_end
    if k > 1:
        for _, nbytes in _buckets(fc_units, cap):
            fc_ar += ring(nbytes, k)
        fc_end_link = exchange_end + fc_ar
    # hybrid FC worker: its own CONV backward after the remote chunks
    members = nc + (k if bh else 0)
    hyb_last_start = hyb_end = None
    if bh:
        bwh = dev.time_s("conv", "bwd", math.ceil(bh / M))
        hyb_last_start = compute + (M - 1) * bwh
        hyb_end = hyb_last_start + bwh
    # CONV allreduce, bucket by bucket
    ratio = conv_grad_bytes(counts, opt.grad_compression) / (DTYPE_BYTES * counts.conv_params) \
        if counts.conv_params else 1.0
    extra_lat = 2 * 2 * (members - 1) * lat if opt.grad_compression == "powersgd" else 0.0
    link = max(conv_link) if conv_link else 0.0
    if bh:
        link = max(link, fc_end_link)
    ar_end, conv_ar, nb = 0.0, 0.0, 0
    if members > 1:
        hyb_bw = (hyb_end - hyb_last_start) if bh else 0.0
        for frac, nbytes in _buckets(conv_units, cap):
            ready = last_start + frac * bw
            if bh:
                ready = max(ready, hyb_last_start + frac * hyb_bw)
            dur = ring(nbytes * ratio, members) + (extra_lat if not free else 0.0)
            link = max(ready, link) + dur
            conv_ar += dur
            nb += 1
        ar_end = link
    conv_update = counts.conv_params * dev.update_s_per_param
    fc_update = counts.fc_params * dev.update_s_per_param
    conv_end = max(conv_bwd_end, ar_end) + conv_update
    if bh:
        fc_end = max(hyb_end, ar_end, fc_end_link) + conv_update + fc_update
    else:
        fc_end = max(compute, fc_end_link) + fc_update
    total = max(conv_end, fc_end)
    terms = {"activation_ingress_s": m * M * x_in, "activation_egress_s": m * M * x_out,
             "exchange_span_s": exchange_end - o - f, "conv_allreduce_s": conv_ar, "fc_allreduce_s": fc_ar,
             "latency_s": m * M * 3 * lat + nb * 2 * (members - 1) * lat
             + (len(_buckets(fc_units, cap)) * 2 * (k - 1) * lat if k > 1 else 0.0),
             "fc_worker_compute_s": m * M * c, "conv_side_end_s": conv_end, "fc_side_end_s": fc_end,
             "allreduce_buckets": nb, "fc_allreduce_buckets": len(_buckets(fc_units, cap)) if k > 1 else 0,
             "update_s": conv_update if conv_end >= fc_end else fc_update}
    return total, terms
