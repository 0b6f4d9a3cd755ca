"""Runs in the paper's regime with replayed compute (notebooks 03, 04, 05, 07).

Every byte is real: each configuration trains on the emulated cluster, its tensors crossing the
shaped links. Only the arithmetic is replayed (`stanza_core.replay`): each layer waits D x its
time on the replay device (a perf device-table row), so AlexNet and VGG-16 at 224x224 run on a
2-core machine. Links run at target / D (perf.emulated_bandwidth with t_here = D x t_target),
so every transfer takes the fraction of a step it takes on the target cluster.

Dilation rule: D = max(dilation, perf.replay_dilation(target, N)) (dilation.replay_link), the
smallest D at which this machine keeps up with the emulated cluster: one link within netem's
fastest link, all N links at once within the aggregate this machine sustains
(netem.facts.MAX_AGGREGATE_MBIT).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..labels import run_key, run_label
from . import checks
from .dilation import replay_link
from .run import measure_or_skip
from .spec import MeasureSpec

PAPER_IMAGE, PAPER_CLASSES = 224, 1000


@dataclasses.dataclass(kw_only=True)
class ReplaySet:
    """The replayed runs of one notebook: every model x cluster size x target, checked on creation."""

    models: list[str]  # zoo models (224x224, 1000 classes: the paper's ImageNet setting)
    nodes: list[int]  # emulated cluster sizes
    strategies: list[str]  # among ps, ddp, stanza
    fc_workers: list[int]  # stanza's k (those that fit N run at each N)
    target_gbps: list[float]  # target bandwidths
    replay_device: str = "v100"  # the device the compute follows (perf device table)
    dilation: float = 1.0  # the smallest D (see the module docstring)
    mtu: int = 9000  # link MTU of the replayed runs (jumbo frames, as the bench)
    batch_per_worker: int = 32  # samples per data worker (the paper's per-GPU batch)
    steps: int = 3  # steps per run, warmup included
    warmup: int = 1  # steps left out of the throughput
    repeats: int = 1  # runs per configuration
    image_size: int = PAPER_IMAGE
    num_classes: int = PAPER_CLASSES
    specs: list[MeasureSpec] = dataclasses.field(init=False)

    def __post_init__(self):
        self.models = checks.model_names(self.models, self.image_size, name="replay_models") if self.models else []
        sizes = checks.int_list("replay_nodes", self.nodes, 2) if self.nodes else []
        ks = checks.int_list("replay_fc_workers", self.fc_workers)
        gbps = checks.positive_floats("replay_gbps", self.target_gbps)
        checks.positive_floats("dilation", [self.dilation])
        self.specs = []
        for m in self.models:
            for n in sizes:
                fit = [k for k in ks if 1 <= k <= n // 2]
                if "stanza" in self.strategies and not fit:
                    raise ValueError(f"replay_fc_workers {ks} leave no k in 1..{n // 2} for {n} nodes")
                for g in gbps:
                    d = self.dilation_for(g, n)
                    self.specs.append(MeasureSpec(
                        model=m, image_size=self.image_size, num_classes=self.num_classes, nodes=n,
                        strategies=self.strategies, fc_workers=fit or [1], batch_per_worker=self.batch_per_worker,
                        steps=self.steps, warmup=self.warmup, repeats=self.repeats, target_gbps=[g],
                        compute="replay", replay_device=self.replay_device, dilation=d, mtu=self.mtu,
                        max_link_mbit=1.000001 * 1000 * g / d))  # the rule already keeps the link within reach

    def dilation_for(self, target_gbps: float, nodes: int) -> float:
        return float(replay_link(target_gbps, nodes, mtu=self.mtu, min_dilation=self.dilation).dilation)


@dataclasses.dataclass(kw_only=True)
class ReplayParams:
    """The paper-regime parameters notebooks 03, 04, 05 and 07 share (their `parameters` cells
    name them alike), and the switch of every measured cell. A subclass has `warmup` and
    `batch_per_worker` fields and sets `replay` in its __post_init__ (replay_set)."""

    replay_models: list[str] = dataclasses.field(default_factory=list)  # paper regime, replayed compute
    replay_nodes: list[int] = dataclasses.field(default_factory=list)  # their emulated cluster sizes
    replay_gbps: list[float] = dataclasses.field(default_factory=lambda: [10.0])  # their targets
    replay_device: str = "v100"  # device profile the replayed compute follows
    dilation: float = 1.0  # smallest D (the module docstring: perf.replay_dilation decides)
    replay_steps: int = 2  # steps per replayed run, warmup included
    replay_image_size: int = PAPER_IMAGE  # the paper's ImageNet input (tests use a smaller one)
    replay_num_classes: int = PAPER_CLASSES
    measure_runs: bool = True  # False: skip the measured cells (as without root or tc)
    replay: ReplaySet = dataclasses.field(init=False)  # the paper-regime runs

    def replay_set(self, strategies: list[str], fc_workers: list[int], nodes: list[int] | None = None,
                   target_gbps: list[float] | None = None) -> ReplaySet:
        """The replayed runs of these parameters (nodes and targets: replay_nodes, replay_gbps
        unless given)."""
        return ReplaySet(models=self.replay_models, nodes=self.replay_nodes if nodes is None else nodes,
                         strategies=strategies, fc_workers=fc_workers,
                         target_gbps=self.replay_gbps if target_gbps is None else target_gbps,
                         replay_device=self.replay_device, dilation=self.dilation,
                         batch_per_worker=self.batch_per_worker, steps=self.replay_steps, warmup=self.warmup,
                         image_size=self.replay_image_size, num_classes=self.replay_num_classes)


def run_replayed(s: ReplaySet, cache_dir: str | None, measure_runs: bool = True) -> list[dict[str, Any]]:
    """One bench results dict per spec (run.measure; cached, so notebooks share runs)."""
    return [measure_or_skip(spec, cache_dir, measure_runs) for spec in s.specs]


def caption(s: ReplaySet) -> str:
    """What a replayed figure shows, in one line (every figure built from these runs carries it)."""
    ds = sorted({spec.dilation for spec in s.specs})
    return (f"measured: communication, for real (every tensor over the shaped links at target / D); "
            f"replayed: compute (the {s.replay_device} table profile, D = {', '.join(f'{d:g}' for d in ds)})")


def summary(s: ReplaySet, benches: list[dict[str, Any]]) -> dict[str, Any]:
    """results.json part: by_model.<model>.<N>.<target Gb/s> -> samples/s on the target cluster
    (measured x D) per configuration (config_key), stanza's speedups over ps and ddp, link rate, D."""
    out: dict[str, Any] = {"caption": caption(s), "replay_device": s.replay_device, "image_size": s.image_size,
                           "num_classes": s.num_classes, "batch_per_worker": s.batch_per_worker,
                           "unavailable": next((b["unavailable"] for b in benches if b["unavailable"]), None),
                           "labels": {}, "by_model": {}, "benches": benches}
    for b in benches:
        spec = b["spec"]
        for row in b["summary"]:
            g = f"{row['target_gbps']:g}"
            d = out["by_model"].setdefault(spec["model"], {}).setdefault(str(spec["nodes"]), {}).setdefault(
                g, {"link_mbit": row["link_mbit"], "dilation": spec["dilation"], "throughput": {}})
            key = run_key(row)
            out["labels"][key] = run_label(row)
            d["throughput"][key] = row["throughput"] * spec["dilation"]  # on the target: time runs D x slower here
            if row["strategy"] == "stanza":
                d.update(stanza_vs_ps=row["speedup_vs_ps"], stanza_vs_ddp=row["speedup_vs_ddp"],
                         stanza_fc_workers=row["fc_workers"])
    return out
