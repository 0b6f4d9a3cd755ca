"""Iteration time of one BSP training step under ps, ddp or stanza: `predict(profile, cluster, ...)`.

Every step starts on all nodes at t = 0 and ends when the last node has applied its optimizer
step (no overlap across steps). Compute of a part on b samples takes
`DeviceProfile.time_s(part, phase, b)`; links follow cluster.py (alpha-beta, full duplex, one
message at a time per link direction). Per strategy (b: the largest per-worker batch):

ddp     forward, then backward with gradient buckets (reverse parameter order, 25 MiB cap);
        each bucket is ring-allreduced among N as soon as the backward has produced it and
        the previous bucket's allreduce is done. Step = fwd + max(bwd, end of the last
        allreduce) + optimizer step over P.
ps      fwd + bwd, then push (every data worker sends each shard's gradient slice to its
        owner), the owners' optimizer step, then pull (the mirror image). A phase lasts as
        long as the busiest link: a shard's owner takes in one shard-sized message per other
        data worker; a worker sends one message per shard it does not hold. Colocated
        (shards on N ranks that also compute) or dedicated (S server ranks of the N that
        compute nothing, whose links carry every worker's slice of their shard). With the
        overlapped push, the gradient goes in buckets (engine rule, 25 MiB cap): bucket j is
        pushed once the backward has produced it, its pieces are updated as they arrive and
        pulled back as soon as they are updated, while the backward may still run (`_ps`).
stanza  CONV workers forward b samples, send activations and labels (2 messages) to FC worker
        i % k. The FC worker serving m = ceil(Nc/k) CONV workers takes them in one after
        another on its ingress link, runs FC forward+backward per chunk, and returns each
        activation gradient on its egress link: a 3-stage pipeline of m identical jobs,
        span x_in + c + x_out + (m-1) max(x_in, c, x_out). The CONV workers then run their
        backward with bucketed CONV allreduce among Nc (as ddp); meanwhile, on their own
        links, the FC workers ring-allreduce the FC gradients among k (in buckets, after the
        last activation gradient has left) and step. Step = the later of the two sides.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any

from .. import checks
from ..variant import HoldsVariant, Variant, unset
from ..buckets import DEFAULT_BUCKET_MB
from ..anatomy import Profile
from ..topology import Topology
from .cluster import Cluster
from .devices import DeviceProfile
from .resolve import device_profile
from .blocks import (DEFAULT_BATCH_PER_WORKER, backward_units, bucketed_backward, layer_shares,  # noqa: F401 (perf.model's names)
                     layer_units)
from .traffic import ModelCounts, data_workers, model_layout, rank_bytes, summary_bytes

# The options a prediction's plain row holds whatever its strategy (as stored results have them).
ROW_OPTIONS = ("fc_workers", "ps_servers", "ps_overlap", "fc_conv_share", "micro_batches", "boundary_dtype",
               "grad_compression")

@dataclasses.dataclass
class Prediction(HoldsVariant):
    variant: Variant  # the configuration: its strategy and that strategy's options (as given)
    nodes: int
    fc_workers: int | None  # k resolved (None: a strategy without FC workers)
    ps_shards: int | None  # S resolved (None: a strategy without shards)
    global_batch: int
    batch_per_worker: int  # the largest per-data-worker batch (it sets the BSP step)
    bandwidth_gbps: float
    latency_s: float
    device: str
    iteration_s: float
    throughput: float  # samples per second: global_batch / iteration_s
    breakdown: dict[str, float]  # seconds each activity takes on its busiest node (activities overlap)
    exposed_comm_s: float  # what communication adds: iteration_s minus the step with free communication
    overlap: str  # what the model lets overlap, in words
    bytes_per_step: int  # sum over ranks of bytes sent per step (the metrics JSON's bytes_per_step)
    max_node_sent: int
    max_node_recv: int
    bytes_per_node: dict[str, dict]  # role -> {"sent": {cat: int}, "recv": {...}} of its busiest rank
    ranks: list[dict] | None = None  # every rank's figures (expected_bytes rows), when asked for
    fc_batch: int = 0  # stanza: each FC worker's share of the global batch on the CONV body, in samples (bh)

    @property
    def label(self) -> str:
        """labels.config_label of this configuration: "ddp", "ps S=2 overlap", "stanza k=1 share=0.25 M=4"."""
        return self.variant.label

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the strategy and the options of ROW_OPTIONS flat (another strategy's at how
        it reads here: unset, k = 0), this strategy's own, then the figures, k and S as resolved."""
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "variant"}
        layout = {"strategy": self.strategy, **{o: unset(o) for o in ROW_OPTIONS}, **self.variant.options.values()}
        return {**layout, **out, "fc_workers": self.fc_workers, "ps_shards": self.ps_shards}


def _resolve_batch(n: int, global_batch: int | None, batch_per_worker: int | None) -> int:
    if global_batch is not None and batch_per_worker is not None:
        raise ValueError("give global_batch or batch_per_worker, not both")
    if global_batch is None:
        b = DEFAULT_BATCH_PER_WORKER if batch_per_worker is None else batch_per_worker
        return checks.positive_int("batch_per_worker", b) * n
    return checks.positive_int("global_batch", global_batch, n, what="the data workers")


@dataclasses.dataclass(frozen=True)
class StepCase:
    """One configuration as a strategy's step-time model sees it (its model module's
    `step_time` and `overlap`)."""

    profile: Profile
    dev: DeviceProfile
    cluster: Cluster
    variant: Variant  # the configuration: its strategy and that strategy's options
    topo: Topology  # its layout on the cluster's nodes: k, S, dedicated servers, hybrid share resolved
    b: int  # the largest per-data-worker batch
    cap: int  # gradient bucket cap, bytes


def predict(profile: Profile, cluster: Cluster, variant: Variant, *, global_batch: int | None = None,
            batch_per_worker: int | None = None, bucket_mb: float = DEFAULT_BUCKET_MB,
            with_ranks: bool = True) -> Prediction:
    """Predicted step time, throughput, traffic and breakdown of `variant` (a
    stanza_core.variant.Variant: the strategy and all its options) on `cluster`.

    The batch is `global_batch` split over the data workers (N, or N - k for stanza; N - S with S
    dedicated ps servers, world size = data workers + S, as the engine's; an uneven split is
    modelled by its largest share) or `batch_per_worker` per data worker (default 32).
    `cluster.device` may be a DeviceProfile (e.g. measured here) or a device-table name;
    bucket_mb is the gradient bucket cap of ddp, of stanza's CONV allreduce and of the overlapped
    ps push (--bucket-mb)."""
    if not isinstance(cluster, Cluster):
        raise ValueError(f"cluster must be a Cluster, got {type(cluster).__name__}")
    if not isinstance(variant, Variant):
        raise ValueError(f"expected a stanza_core.variant.Variant, got {type(variant).__name__}")
    checks.positive_int("nodes", cluster.nodes)
    G = _resolve_batch(data_workers(variant, cluster.nodes), global_batch, batch_per_worker)
    topo, batches = model_layout(variant, cluster.nodes, G)
    checks.number("bucket_mb", bucket_mb, above=0)
    cap = int(bucket_mb * 2**20)
    b = batches[0]
    dev = device_profile(cluster.device, profile).profile  # a table row, or the DeviceProfile given
    model = variant.spec.model_module()
    case = StepCase(profile, dev, cluster, variant, topo, b, cap)
    total, crit, terms = model.step_time(case)
    if not total > 0:
        raise ValueError(f"predicted step time is {total} s: the device profile {dev.name!r} has no compute time")
    breakdown = {"conv_compute_s": dev.time_s("conv", "fwd", b) + dev.time_s("conv", "bwd", b),
                 "fc_compute_s": dev.time_s("fc", "fwd", b) + dev.time_s("fc", "bwd", b),
                 "step_overhead_s": dev.step_overhead_s, **terms}
    counts = ModelCounts.of(profile)
    summary = summary_bytes(counts, variant, topo, batches)
    n = topo.data_workers
    reps = [0, n] if n < cluster.nodes else [0]  # busiest rank of each role: a data worker, the first after them
    per_role = {r["role"]: {"sent": r["sent"], "recv": r["recv"]}
                for r in rank_bytes(counts, variant, topo, batches, ranks=reps)}
    ranks = rank_bytes(counts, variant, topo, batches) if with_ranks else None
    return Prediction(variant=variant, nodes=cluster.nodes, fc_workers=topo.fc_workers or None,
                      ps_shards=topo.ps_shards or None, global_batch=G, batch_per_worker=b,
                      bandwidth_gbps=cluster.bandwidth_gbps, latency_s=cluster.latency_s, device=dev.name,
                      iteration_s=total, throughput=G / total, breakdown=breakdown,
                      exposed_comm_s=max(total - crit, 0.0), overlap=model.overlap(case),
                      **summary, bytes_per_node=per_role, ranks=ranks, fc_batch=topo.fc_batch)
