"""Notebook 03: throughput of ps, ddp and stanza against cluster size, measured on the emulated
cluster (a small model, one target bandwidth) and modelled at the paper's scale (AlexNet and
VGG-16 at 224x224 on the V100 table device, 2..N nodes, the paper's bandwidths).

    p = ThroughputParams(measured_model="cifar_alexnet", measured_nodes=[3], ...)  # every check, first
    measured = run_measured(p, cache_dir)                                # bench dicts, one per N
    modelled = model_curves(p)                                           # perf.predict rows
    results = throughput_results(p, measured, modelled)                  # results.json
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..labels import run_key
from ..perf import Cluster, best_assignment, check_device, device_profile, named_profile
from .. import checks, registry
from ..runs import replayed
from ..runs.replayed import ReplayParams
from ..runs.measurement import Measurement
from ..runs.run import MEASURE_OFF, measure_or_skip, modelled_only  # noqa: F401 (MEASURE_OFF: a public name here)
from ..runs.spec import MeasureSpec

PAPER = {"speedup_vs_ps_10gbps": [1.34, 13.9], "alexnet_speedup_vs_ps_100gbps": 1.55,
         "vgg16_speedup_vs_ps_100gbps": 1.72,
         "source": "arXiv 1812.10624: 1.34x-13.9x over PS at 10 Gb/s (EC2 V100, 'common models'); "
                   "1.55x AlexNet, 1.72x VGG-16 at 100 Gb/s (simulation)"}


@replayed.in_grid("03_throughput")
@dataclasses.dataclass(kw_only=True)
class ThroughputParams(ReplayParams):
    """Notebook 03's parameters (its `parameters` cell), checked on creation; the replay_* ones
    and measure_runs: replayed.ReplayParams."""

    measured_model: str  # zoo model run on the emulated cluster
    measured_image_size: int  # square input of the measured runs
    measured_num_classes: int  # outputs of the measured model
    measured_nodes: list[int]  # emulated cluster sizes (empty: model only)
    strategies: list[str]  # strategies measured
    fc_workers: int  # stanza's k in the measured runs
    global_batch: int  # samples per step of the measured runs
    steps: int  # steps per measured run, warmup included
    warmup: int  # steps left out of the measured throughput
    target_gbps: float  # bandwidth the measured runs emulate
    target_device: str = "v100"  # accelerator the target bandwidth belongs to
    repeats: int = 1  # measured runs per configuration
    model_names: list[str]  # modelled at the paper's scale
    model_image_size: int = 224
    model_num_classes: int = 1000
    model_nodes: list[int]  # modelled cluster sizes
    model_gbps: list[float]  # modelled bandwidths
    batch_per_worker: int = 32  # samples per data worker in the modelled runs
    model_device: str = "v100"  # perf device-table row
    paper_nodes: list[int] = dataclasses.field(default_factory=list)  # the paper's cluster sizes, replayed (16)
    paper_gbps: list[float] = dataclasses.field(default_factory=lambda: [10.0])  # their targets
    paper_fc_workers: list[int] = dataclasses.field(default_factory=list)  # stanza's k there (empty: fc_workers)
    paper_ps_servers: list[int] = dataclasses.field(default_factory=lambda: [0])  # ps there: dedicated servers (0: colocated)
    paper_ps_overlap: bool = False  # there also ps colocated with the overlapped push
    paper: list[replayed.ReplaySet] = dataclasses.field(init=False)  # replay_models at paper_nodes x paper_gbps
    measured: list[MeasureSpec] = dataclasses.field(init=False)  # one per emulated cluster size

    def __post_init__(self):
        nodes = checks.int_list("measured_nodes", self.measured_nodes, 2) if self.measured_nodes else []
        self.measured = [MeasureSpec(model=self.measured_model, image_size=self.measured_image_size,
                                     num_classes=self.measured_num_classes, nodes=n, strategies=self.strategies,
                                     fc_workers=[self.fc_workers], global_batch=self.global_batch, steps=self.steps,
                                     warmup=self.warmup, target_gbps=[self.target_gbps],
                                     target_device=self.target_device, repeats=self.repeats) for n in nodes]
        self.model_names = checks.model_names(self.model_names, self.model_image_size, name="model_names")
        checks.positive_int("batch_per_worker", self.batch_per_worker)
        check_device(self.model_device, "model_device")
        self.model_nodes = checks.int_list("model_nodes", self.model_nodes, 2)
        self.model_gbps = checks.positive_floats("model_gbps", self.model_gbps)
        self.replay = self.replay_set(self.strategies, [self.fc_workers])
        if self.paper_fc_workers:
            self.paper_fc_workers = checks.int_list("paper_fc_workers", self.paper_fc_workers)
        self.paper_ps_servers = checks.int_list("paper_ps_servers", self.paper_ps_servers, 0)
        if not isinstance(self.paper_ps_overlap, bool):
            raise ValueError(f"paper_ps_overlap must be true or false, got {self.paper_ps_overlap!r}")
        ks = self.paper_fc_workers or [self.fc_workers]
        self.paper = [self.replay_set(self.strategies, ks, nodes=self.paper_nodes, target_gbps=self.paper_gbps,
                                      ps_servers=self.paper_ps_servers)]
        overlapper = registry.option_owner("ps_overlap")  # the strategy whose option the overlapped push is
        if self.paper_ps_overlap and overlapper in self.strategies:
            self.paper.append(self.replay_set([overlapper], ks, nodes=self.paper_nodes, target_gbps=self.paper_gbps,
                                              ps_overlap=[True]))

    def grid_specs(self) -> list[MeasureSpec]:
        return self.replayed_specs

    @property
    def replayed_specs(self) -> list[MeasureSpec]:
        """Every replayed run of the notebook: the replay grid, then the paper's cluster sizes."""
        return self.replay.specs + [spec for s in self.paper for spec in s.specs]


def run_measured(p: ThroughputParams, cache_dir: str | None = None) -> list[Measurement]:
    """One Measurement per measured cluster size (see run.measure)."""
    return [measure_or_skip(spec, cache_dir, p.measure_runs) for spec in p.measured]


def run_replayed(p: ThroughputParams, cache_dir: str | None = None) -> list[Measurement]:
    """The paper-regime runs (replayed compute, real communication), one Measurement per spec:
    the replay grid, then the paper's cluster sizes (paper_nodes at paper_gbps)."""
    return [m for s in (p.replay, *p.paper) for m in replayed.run_replayed(s, cache_dir, p.measure_runs)]


def model_curves(p: ThroughputParams) -> list[dict[str, Any]]:
    """Per model, bandwidth and cluster size: ddp, ps (S = N) and stanza with its best k."""
    rows = []
    for name in p.model_names:
        prof = named_profile(name, p.model_image_size, p.model_num_classes)
        for gbps in p.model_gbps:
            for n in p.model_nodes:
                dev = device_profile(p.model_device, prof, p.batch_per_worker).profile  # table row or measured
                a = best_assignment(prof, Cluster(n, gbps, device=dev), batch_per_worker=p.batch_per_worker)
                st = a.best_stanza()
                for pred in (a.ps, a.ddp, st):
                    rows.append({"model": name, "bandwidth_gbps": gbps, "nodes": n, "strategy": pred.strategy,
                                 "fc_workers": pred.fc_workers or 0, "throughput": pred.throughput,
                                 "iteration_s": pred.iteration_s, "speedup_vs_ps": pred.throughput / a.ps.throughput,
                                 "speedup_vs_ddp": pred.throughput / a.ddp.throughput,
                                 "best": pred.strategy == a.best.strategy and pred.fc_workers == a.best.fc_workers})
    return rows


def _measured_summary(res: Measurement) -> dict[str, Any]:
    out = {"nodes": res.spec["nodes"], "unavailable": res.unavailable, "calibration": res.calibration,
           "link_mbit": None, "throughput": {}, "cache": res.cache, "modelled_only_gbps": res.modelled_only_gbps}
    for row in res.summary:
        label = run_key(row)
        out["link_mbit"] = row["link_mbit"]
        out["throughput"][label] = row["throughput"]
        if registry.owns(row["strategy"], "fc_workers"):
            out["stanza_speedup_vs_ps"] = row["speedup_vs_ps"]
            out["stanza_speedup_vs_ddp"] = row["speedup_vs_ddp"]
            out["stanza_fc_workers"] = row["fc_workers"]
    return out


def _model_speedups(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in rows:
        if not registry.owns(r["strategy"], "fc_workers"):
            continue
        d = out.setdefault(r["model"], {}).setdefault(f"{r['bandwidth_gbps']:g}", {"by_nodes": {}})
        d["by_nodes"][str(r["nodes"])] = {"fc_workers": r["fc_workers"], "vs_ps": r["speedup_vs_ps"],
                                          "vs_ddp": r["speedup_vs_ddp"]}
    for per_model in out.values():
        for d in per_model.values():
            vs_ps = [v["vs_ps"] for v in d["by_nodes"].values()]
            vs_ddp = [v["vs_ddp"] for v in d["by_nodes"].values()]
            d.update(min_vs_ps=min(vs_ps), max_vs_ps=max(vs_ps), min_vs_ddp=min(vs_ddp), max_vs_ddp=max(vs_ddp))
    return out


def throughput_results(p: ThroughputParams, measured: list[Measurement], modelled: list[dict[str, Any]],
                       replayed_runs: list[Measurement] = ()) -> dict[str, Any]:
    """results.json of notebook 03 (claims point into measured.by_nodes and modelled.speedups);
    `modelled_only` is why nothing was measured (None when the measured cells ran)."""
    by_nodes = {str(m.spec["nodes"]): _measured_summary(m) for m in measured}
    return {
        "experiment": "throughput", "modelled_only": modelled_only([*measured, *replayed_runs]),
        "replayed": replayed.summary(p.replay, list(replayed_runs)),
        "measured": {"model": p.measured[0].model if p.measured else None,
                     "image_size": p.measured[0].image_size if p.measured else None,
                     "target_gbps": p.measured[0].target_gbps[0] if p.measured else None,
                     "target_device": p.measured[0].target_device if p.measured else None,
                     "global_batch": p.measured[0].global_batch if p.measured else None,
                     "unavailable": next((m.unavailable for m in measured if m.unavailable), None),
                     "by_nodes": by_nodes, "benches": [m.to_dict() for m in measured]},
        "modelled": {"models": p.model_names, "image_size": p.model_image_size, "device": p.model_device,
                     "batch_per_worker": p.batch_per_worker, "rows": modelled, "speedups": _model_speedups(modelled)},
        "paper": PAPER,
    }
