"""Notebook 05: the bandwidth sweep. Stanza against ps and ddp at 10 / 25 / 40 / 100 Gb/s:

  emulated     the targets mapped to this machine's speed (run.measure); the targets listed
               in `measure_gbps` (and that the emulator can shape) are measured, every target is
               also predicted with this machine's profile (validation.predict_runs), so the
               model continues the measured points;
  paper scale  AlexNet / VGG-16 on `paper_nodes` V100s at each target (perf.best_assignment);
  sweep        perf.sweep over 1-400 Gb/s and 2-1,024 nodes: the best strategy and k everywhere;
  paper's PS   what the paper must have assumed (paper_ps, paper_ps_report): the PS assumption
               stated by the paper_ps_* parameters, the search and its rule, the decomposition,
               the 10 Gb/s range's ends under that PS and under the sharded one.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..labels import config_label, run_key, run_label
from ..perf import Cluster, best_assignment, check_device, device_profile, named_profile, sweep
from .. import checks, registry
from ..runs import replayed
from . import validation
from ..runs.replayed import ReplayParams
from ..runs.measurement import Measurement
from ..runs.run import measure_or_skip, modelled_only
from ..runs.spec import MeasureSpec
from .paper_ps import PsAssumption
from .throughput import PAPER
from . import paper_ps_report

SWEEP_GBPS = (1.0, 2.5, 5.0, 10.0, 25.0, 40.0, 100.0, 200.0, 400.0)
SWEEP_NODES = tuple(2 ** i for i in range(1, 11))


@replayed.in_grid("05_bandwidth_sweep")
@dataclasses.dataclass(kw_only=True)
class SweepParams(ReplayParams):
    """Notebook 05's parameters (its `parameters` cell), checked on creation; the replay_* ones
    and measure_runs: replayed.ReplayParams."""

    model: str  # zoo model run on the emulated cluster
    image_size: int  # square input of the measured runs
    num_classes: int  # outputs of the measured model
    nodes: int  # emulated nodes
    strategies: list[str]  # strategies measured and predicted
    fc_workers: int  # stanza's k
    global_batch: int  # divisible by N and N - k
    steps: int  # steps per measured run, warmup included
    warmup: int  # steps left out of the measured throughput
    target_gbps: list[float]  # target bandwidths
    measure_gbps: list[float]  # the targets measured (a subset; the rest predicted)
    target_device: str = "v100"  # accelerator the targets belong to
    repeats: int = 1  # measured runs per configuration and target
    paper_models: list[str]  # models at the scale of the paper
    paper_image_size: int = 224
    paper_nodes: int = 16  # cluster size of the paper-scale comparison
    sweep_gbps: list[float] = dataclasses.field(default_factory=lambda: list(SWEEP_GBPS))
    sweep_nodes: list[int] = dataclasses.field(default_factory=lambda: list(SWEEP_NODES))
    batch_per_worker: int = 32  # modelled samples per data worker
    paper_device: str = "v100"  # perf device-table row
    paper_replay_gbps: list[float] = dataclasses.field(default_factory=list)  # replayed on paper_nodes (full: 10, 100)
    paper_replay_fc_workers: list[int] = dataclasses.field(default_factory=list)  # stanza's k there (empty: fc_workers)
    paper_ps_share: float = 1.0  # the stated PS: servers S / N (paper_ps.PsAssumption)
    paper_ps_placement: str = "colocated"  # the stated PS: colocated or dedicated (beside the N workers)
    paper_ps_overlap: bool = False  # the stated PS: overlapped push
    paper_ps_batch: int = 32  # the stated PS: samples per worker (both strategies)
    paper_ps_goodput: float = 1.0  # the stated PS: share of the line rate every transfer gets
    paper_ps_range: bool = True  # also the 10 Gb/s range's ends under the stated PS (seconds)
    paper_ps_replayed: str = ""  # the committed replay of the stated PS (paper_regime_replay.py --out; "": none)
    stated_ps: PsAssumption = dataclasses.field(init=False)  # the paper_ps_* parameters as one value
    paper: replayed.ReplaySet = dataclasses.field(init=False)  # replay_models on paper_nodes at paper_replay_gbps
    measured: MeasureSpec | None = dataclasses.field(init=False)  # the measured targets (None: none)
    predicted: MeasureSpec = dataclasses.field(init=False)  # every target: what the model continues to
    PATHS = ("paper_ps_replayed",)

    def __post_init__(self):
        self.target_gbps = checks.positive_floats("target_gbps", self.target_gbps)
        measured_targets = checks.positive_floats("measure_gbps", self.measure_gbps) if self.measure_gbps else []
        if extra := [g for g in measured_targets if g not in self.target_gbps]:
            raise ValueError(f"measure_gbps {extra} are not among target_gbps {self.target_gbps}")
        common = dict(model=self.model, image_size=self.image_size, num_classes=self.num_classes, nodes=self.nodes,
                      strategies=self.strategies, fc_workers=[self.fc_workers], global_batch=self.global_batch,
                      steps=self.steps, warmup=self.warmup, target_device=self.target_device, repeats=self.repeats)
        self.predicted = MeasureSpec(**common, target_gbps=self.target_gbps)
        self.measured = MeasureSpec(**common, target_gbps=measured_targets) if measured_targets else None
        checks.positive_int("paper_nodes", self.paper_nodes, 2)
        self.stated_ps = PsAssumption(server_share=self.paper_ps_share, placement=self.paper_ps_placement,
                                      overlap=self.paper_ps_overlap, batch_per_worker=self.paper_ps_batch,
                                      goodput=self.paper_ps_goodput)
        checks.positive_int("batch_per_worker", self.batch_per_worker)
        check_device(self.paper_device, "paper_device")
        self.paper_models = checks.model_names(self.paper_models, self.paper_image_size, name="paper_models")
        self.sweep_gbps = checks.positive_floats("sweep_gbps", self.sweep_gbps)
        self.sweep_nodes = checks.int_list("sweep_nodes", self.sweep_nodes, 2)
        self.replay = self.replay_set(self.strategies, [self.fc_workers])
        paper_gbps = checks.positive_floats("paper_replay_gbps", self.paper_replay_gbps) if self.paper_replay_gbps else []
        ks = (checks.int_list("paper_replay_fc_workers", self.paper_replay_fc_workers)
              if self.paper_replay_fc_workers else [self.fc_workers])
        self.paper = self.replay_set(self.strategies, ks, nodes=[self.paper_nodes] if paper_gbps else [],
                                     target_gbps=paper_gbps or self.replay_gbps)  # no nodes: no runs

    def grid_specs(self) -> list[MeasureSpec]:
        return self.replayed_specs

    @property
    def replayed_specs(self) -> list[MeasureSpec]:
        """Every replayed run of the notebook: the replay grid, then the paper's cluster size."""
        return self.replay.specs + self.paper.specs


def run_measured(p: SweepParams, cache_dir: str | None = None) -> Measurement | None:
    """The measured targets' Measurement (None: no target is measured)."""
    if p.measured is None:
        return None
    return measure_or_skip(p.measured, cache_dir, p.measure_runs)


def run_replayed(p: SweepParams, cache_dir: str | None = None) -> list[Measurement]:
    """The paper-regime runs (replayed compute, real communication), one Measurement per spec:
    replay_nodes at replay_gbps, then paper_nodes at paper_replay_gbps."""
    return [m for s in (p.replay, p.paper) for m in replayed.run_replayed(s, cache_dir, p.measure_runs)]


def emulated(p: SweepParams, bench: Measurement | None) -> dict[str, Any]:
    """Per target: the emulated link rate, measured samples/s (where measured) and the model's
    prediction with this machine's profile, per configuration."""
    out: dict[str, Any] = {"nodes": p.predicted.nodes, "model": p.predicted.model, "image_size": p.predicted.image_size,
                           "unavailable": bench.unavailable if bench else None,
                           "modelled_only_gbps": bench.modelled_only_gbps if bench else [], "by_gbps": {}}
    if bench is None or bench.unavailable or not bench.timing_rounds:
        return out
    cal = bench.calibration
    # The same configurations at every target rate, predicted (runs with no measurement behind
    # them), each at its plan's link rates: the measured ones' calibration, the one link rule.
    plans = p.predicted.plans(t_target=cal["t_step_target_s"], t_here=cal["t_step_here_s"])
    ghost = [{"strategy": pl.config.strategy, "fc_workers": pl.config.layout()["fc_workers"], **pl.row(), "repeat": 0,
              "throughput": float("nan"), "step_time_median_s": float("nan"), "bytes_per_step": None}
             for pl in plans]
    predicted = validation.predict_runs(dataclasses.replace(bench, runs=ghost))
    measured = {(r["target_gbps"], r["strategy"], r["fc_workers"]): r for r in validation.predict_runs(bench)}
    for row in predicted:
        g = row["target_gbps"]
        label = run_key(row)
        out.setdefault("labels", {})[label] = run_label(row)
        m = measured.get((g, row["strategy"], row["fc_workers"]))
        d = out["by_gbps"].setdefault(f"{g:g}", {"target_gbps": g, "link_mbit": row["link_mbit"],
                                                 "measured": {}, "predicted": {}, "error": {}})
        d["predicted"][label] = row["predicted_throughput"]
        if m:
            d["measured"][label] = m["measured_throughput"]
            d["error"][label] = m["error"]
    for d in out["by_gbps"].values():
        for kind in ("measured", "predicted"):
            tp = d[kind]
            st = next((v for k, v in tp.items() if k.startswith("stanza")), None)
            for base in registry.baselines():
                if st is not None and base in tp:
                    d[f"{kind}_stanza_vs_{base}"] = st / tp[base]
    out["calibration"] = cal
    out["cache"] = bench.cache
    return out


def paper_scale(p: SweepParams) -> dict[str, Any]:
    """Stanza (best k), ddp and ps on `paper_nodes` V100s at each target bandwidth."""
    out: dict[str, Any] = {}
    for name in p.paper_models:
        prof = named_profile(name, p.paper_image_size)
        for g in p.target_gbps:
            dev = device_profile(p.paper_device, prof, p.batch_per_worker).profile  # table row or measured
            a = best_assignment(prof, Cluster(p.paper_nodes, g, device=dev), batch_per_worker=p.batch_per_worker)
            st = a.best_stanza()
            out.setdefault(name, {})[f"{g:g}"] = {
                "stanza": st.throughput, "fc_workers": st.fc_workers, "ddp": a.ddp.throughput,
                "ps": a.ps.throughput, "stanza_vs_ps": st.throughput / a.ps.throughput,
                "stanza_vs_ddp": st.throughput / a.ddp.throughput, "best": a.best.strategy}
    return out


def model_sweep(p: SweepParams) -> dict[str, Any]:
    """perf.sweep per paper model (per-k throughput lists dropped: they hold up to N/2 values)."""
    out = {}
    for name in p.paper_models:
        s = sweep(named_profile(name, p.paper_image_size), p.paper_device, p.sweep_gbps, p.sweep_nodes,
                  batch_per_worker=p.batch_per_worker)
        best_at: dict[str, dict[str, str]] = {}
        for r in s["rows"]:
            r.pop("stanza_throughput_by_k", None)
            b = r["best"]
            best_at.setdefault(str(r["nodes"]), {})[f"{r['bandwidth_gbps']:g}"] = config_label(b["strategy"],
                                                                                              b["fc_workers"])
        out[name] = {**s, "best_at": best_at}
    return out


def paper_ps(p: SweepParams) -> dict[str, Any] | None:
    """What the paper must have assumed (paper_ps_report.results) on `paper_nodes` nodes at
    100 Gb/s, under the stated PS; None when AlexNet or VGG-16 is not among paper_models."""
    if not {"alexnet", "vgg16"} <= set(p.paper_models):
        return None
    return paper_ps_report.results(p.stated_ps, p.paper_nodes, 100.0, p.paper_device, range_10=p.paper_ps_range,
                                   replayed_json=p.paper_ps_replayed)


def paper_ps_summary(pp: dict[str, Any] | None, part: str | None = None) -> dict[str, Any] | None:
    """What the notebook prints of paper_ps: the stated set, the rule's pick, both 100 Gb/s
    figures under the stated and the sharded PS, the replay to run and the committed replay; or one
    part of it (range_10)."""
    if pp is None:
        return None
    if part is not None:
        return pp.get(part)
    return {k: pp[k] for k in ("stated", "rule_pick", "rule_picks_stated", "at_100", "replay", "replayed")}


def sweep_results(p: SweepParams, bench: Measurement | None, emu: dict[str, Any], paper: dict[str, Any], swept: dict[str, Any],
                  replayed_runs: list[Measurement] = (), paper_ps: dict[str, Any] | None = None) -> dict[str, Any]:
    """results.json of notebook 05; `modelled_only` is why nothing was measured (None: measured)."""
    return {"experiment": "bandwidth_sweep", "modelled_only": modelled_only([bench, *replayed_runs]),
            "replayed": replayed.summary(p.replay, list(replayed_runs)), "target_gbps": p.target_gbps, "emulated": emu,
            "paper_scale": {"nodes": p.paper_nodes, "device": p.paper_device, "batch_per_worker": p.batch_per_worker,
                            "image_size": p.paper_image_size, "results": paper},
            "sweep": swept, "paper": PAPER, "bench": bench.to_dict() if bench else None, "paper_ps": paper_ps}
