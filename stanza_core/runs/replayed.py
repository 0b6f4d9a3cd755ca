"""Runs in the paper's regime with replayed compute (notebooks 03, 04, 05, 07).

Every byte is real: each configuration trains on the emulated cluster, its tensors crossing the
shaped links. Only the arithmetic is replayed (`stanza_core.replay`): each layer waits D x its
time on the replay device (a perf device-table row), so AlexNet and VGG-16 at 224x224 run on a
2-core machine. Links run at target / D (perf.emulated_bandwidth with t_here = D x t_target),
so every transfer takes the fraction of a step it takes on the target cluster.

Dilation rule, per configuration (runs.plan.replayed_plan, the rule of the replay
benchmarks): D = max(min_dilation, perf.replay_dilation(target, N, engine_s, target_step_s, S)), the
smallest D at which this machine keeps up with the emulated cluster: one link within netem's
fastest link, the links that receive at once within the aggregate this machine sustains
(netem.facts.MAX_AGGREGATE_MBIT: all N links, or 2 S links' worth with S dedicated PS servers),
and the engine's own CPU seconds per step that replay keeps (gloo's copies and reductions,
Python: measured once per configuration, a replay run at D = 1 on loopback, cached) within 5 % of
the dilated step D x the model's step. The links alone give every configuration of a (model, N,
target) but dedicated-server ps the same D (the links' floor, `link_floors`); the engine term
raises it where a configuration's engine work is large beside its step (stanza k=1: AlexNet N=4
at 10 Gb/s from 40 to 95-130). Every configuration runs at its own D, from its plan. The floor
(min_dilation) and whether the engine term applies (replay_engine) travel as one value,
dilation_rule.DilationRule, from the notebook's parameters (DilationParams) to each plan.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..labels import run_key, run_label
from .. import checks, registry
from ..perf import device_source
from .dilation_rule import DilationParams, DilationRule
from .store import points
from .measurement import Measurement
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
    dilation_rule: DilationRule = DilationRule()  # the smallest D and the engine term (the module docstring)
    mtu: int = 9000  # link MTU of the replayed runs (jumbo frames, as the bench)
    batch_per_worker: int = 32  # samples per data worker (the paper's per-GPU batch)
    steps: int = 3  # steps per run, warmup included
    warmup: int = 1  # steps left out of the throughput
    repeats: int = 1  # runs per configuration
    image_size: int = PAPER_IMAGE
    num_classes: int = PAPER_CLASSES
    ps_servers: list[int] = dataclasses.field(default_factory=lambda: [0])  # ps deployments: dedicated servers (0: colocated)
    ps_overlap: list[bool] = dataclasses.field(default_factory=lambda: [False])  # ps: without / with the overlapped push
    specs: list[MeasureSpec] = dataclasses.field(init=False)  # per model x N x target, D by `dilation_rule`

    def __post_init__(self):
        self.models = checks.model_names(self.models, self.image_size, name="replay_models") if self.models else []
        sizes = checks.int_list("replay_nodes", self.nodes, 2) if self.nodes else []
        ks = checks.int_list("replay_fc_workers", self.fc_workers)
        gbps = checks.positive_floats("replay_gbps", self.target_gbps)
        self.specs = []
        for m in self.models:
            for n in sizes:
                fit = checks.fc_workers_that_fit(ks, n, name="replay_fc_workers",
                                                 needed=any(registry.owns(s, "fc_workers") for s in self.strategies))
                for g in gbps:
                    self.specs.append(MeasureSpec(
                        model=m, image_size=self.image_size, num_classes=self.num_classes, nodes=n,
                        strategies=self.strategies, fc_workers=fit or [1], batch_per_worker=self.batch_per_worker,
                        steps=self.steps, warmup=self.warmup, repeats=self.repeats, target_gbps=[g],
                        compute="replay", replay_device=self.replay_device, dilation_rule=self.dilation_rule,
                        mtu=self.mtu, ps_servers=self.ps_servers, ps_overlap=self.ps_overlap))

    def link_floors(self) -> list[float]:
        """The D the links alone set, over every configuration of the set (before the engine term)."""
        return link_floors(self.specs)


def link_floors(specs: list[MeasureSpec]) -> list[float]:
    """The D the links alone set for every configuration of `specs` (its plan's floor, store.Point.key)."""
    return sorted({p.key()["dilation_floor"] for spec in specs for p in points(spec)})


GRID: dict[str, type] = {}  # notebook stem -> the parameters class of the experiment behind it


def in_grid(notebook: str):
    """Class decorator of an experiment's parameters class whose notebook (`notebook`: its file
    stem) replays runs of the full grid: its `grid_specs()` says which (reproduce/grid.py fills
    them). Fields named in the class's PATHS are paths relative to the notebook's folder."""
    def register(cls: type) -> type:
        GRID[notebook] = cls
        return cls
    return register



@dataclasses.dataclass(kw_only=True)
class ReplayParams(DilationParams):
    """The paper-regime parameters notebooks 03, 04, 05 and 07 share (their `parameters` cells
    name them alike; min_dilation and replay_engine come from DilationParams), and the switch of
    every measured cell. A subclass has `warmup` and `batch_per_worker` fields and sets `replay`
    in its __post_init__ (replay_set)."""

    replay_models: list[str] = dataclasses.field(default_factory=list)  # paper regime, replayed compute
    replay_nodes: list[int] = dataclasses.field(default_factory=list)  # their emulated cluster sizes
    replay_gbps: list[float] = dataclasses.field(default_factory=lambda: [10.0])  # their targets
    replay_device: str = "v100"  # device profile the replayed compute follows
    replay_steps: int = 2  # steps per replayed run, warmup included
    replay_image_size: int = PAPER_IMAGE  # the paper's ImageNet input (tests use a smaller one)
    replay_num_classes: int = PAPER_CLASSES
    measure_runs: bool = True  # False: skip the measured cells (as without root or tc)
    replay: ReplaySet = dataclasses.field(init=False)  # the paper-regime runs
    PATHS = ()  # fields that hold paths relative to the notebook's folder (papermill's cwd)

    def grid_specs(self) -> list[MeasureSpec]:
        """The replayed MeasureSpecs this experiment runs (the full grid's points among them)."""
        return self.replay.specs

    def replay_set(self, strategies: list[str], fc_workers: list[int], nodes: list[int] | None = None,
                   target_gbps: list[float] | None = None, ps_servers: list[int] = (0,),
                   ps_overlap: list[bool] = (False,)) -> ReplaySet:
        """The replayed runs of these parameters (nodes and targets: replay_nodes, replay_gbps
        unless given; ps colocated without the overlapped push unless ps_servers, ps_overlap)."""
        return ReplaySet(models=self.replay_models, nodes=self.replay_nodes if nodes is None else nodes,
                         strategies=strategies, fc_workers=fc_workers,
                         target_gbps=self.replay_gbps if target_gbps is None else target_gbps,
                         replay_device=self.replay_device, dilation_rule=self.dilation_rule,
                         batch_per_worker=self.batch_per_worker, steps=self.replay_steps, warmup=self.warmup,
                         image_size=self.replay_image_size, num_classes=self.replay_num_classes,
                         ps_servers=list(ps_servers), ps_overlap=list(ps_overlap))


def run_replayed(s: ReplaySet, cache_dir: str | None, measure_runs: bool = True) -> list[Measurement]:
    """One Measurement per spec of `s` (run.measure: every configuration at its own D from
    its plan; runs and engine seconds cached, so notebooks share them); with measuring off or no
    emulated cluster here, benches that say why and hold no runs."""
    return [measure_or_skip(spec, cache_dir, measure_runs) for spec in s.specs]


def _dilations(s: ReplaySet, benches: list[Measurement]) -> list[float]:
    ran = [r["dilation"] for b in benches for r in b.runs if r.get("dilation")]
    return sorted(set(ran or link_floors(s.specs)))


def caption(s: ReplaySet, benches: list[Measurement] | None = None) -> str:
    """What a replayed figure shows, in one line (every figure built from these runs carries it):
    the D of the runs measured (of s.specs before any ran)."""
    ds = _dilations(s, benches or [])
    return (f"measured: communication, for real (every tensor over the shaped links at target / D); "
            f"replayed: compute (the {s.replay_device} {device_source(s.replay_device)} profile, "
            f"D = {', '.join(f'{d:g}' for d in ds)}"
            f"{', per configuration: links and engine seconds' if s.dilation_rule.engine else ''})" + slipped_note(benches or []))


def slipped_note(benches: list[Measurement]) -> str:
    """'; links slipped in ...' when a kept run's links carried under their set rate (netem.linkstats)."""
    bad = [r["label"] for b in benches for r in b.runs if (r.get("link_check") or {}).get("slipped")]
    return f"; links slipped (below 95 % of their rate) in {len(bad)} run(s): {', '.join(sorted(set(bad)))}" if bad else ""


def summary(s: ReplaySet, benches: list[Measurement]) -> dict[str, Any]:
    """results.json part: by_model.<model>.<N>.<target Gb/s> -> samples/s on the target cluster
    (measured x D) per configuration (config_key), each configuration's D and link rate, and the
    speedups of the fastest stanza over ps (colocated, no overlap) and ddp, from those samples/s."""
    out: dict[str, Any] = {"caption": caption(s, benches), "replay_device": s.replay_device,
                           "image_size": s.image_size, "num_classes": s.num_classes,
                           "batch_per_worker": s.batch_per_worker,
                           "unavailable": next((b.unavailable for b in benches if b.unavailable), None),
                           "labels": {}, "by_model": {}, "benches": [b.to_dict() for b in benches]}
    for b in benches:
        spec = b.spec
        for row in b.summary:
            g = f"{row['target_gbps']:g}"
            d = out["by_model"].setdefault(spec["model"], {}).setdefault(str(spec["nodes"]), {}).setdefault(
                g, {"link_mbit": {}, "dilation": {}, "throughput": {}})
            key = run_key(row)
            out["labels"][key] = run_label(row)
            d["link_mbit"][key], d["dilation"][key] = row["link_mbit"], row["dilation"]
            d["throughput"][key] = row["target_throughput"]  # on the target: measured x D (time runs D x slower here)
            if registry.owns(row["strategy"], "fc_workers") and run_key(row) == run_key({"strategy": "stanza",
                                                                         "fc_workers": row["fc_workers"]}):
                d.setdefault("_stanza", {})[key] = row["fc_workers"]  # the paper's stanza (no options)
    for by_n in out["by_model"].values():
        for d in by_n.values():
            for cell in d.values():
                tp, stanza = cell["throughput"], cell.pop("_stanza", {})
                if stanza:
                    best = max(stanza, key=tp.get)
                    cell.update(stanza_fc_workers=stanza[best],
                                stanza_vs_ps=tp[best] / tp["ps"] if tp.get("ps") else None,
                                stanza_vs_ddp=tp[best] / tp["ddp"] if tp.get("ddp") else None)
    return out
