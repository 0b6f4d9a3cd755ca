"""Notebook 04: throughput against the number of FC workers k for a fixed cluster, measured on the
emulated cluster and predicted by the performance model, with the optimiser's choice.

Two optimiser answers are recorded for the emulated cluster:
  optimiser_k               argmax over k = 1..N//2 of the model with this machine's profile per
                            k (compute_rounds.device_for: each phase at the contention it runs under,
                            since all emulated nodes share this machine's cores);
  optimiser_k_uncontended   perf.best_assignment with one profile for every k, measured with a
                            single process: the pick for a cluster of separate machines this fast.
At the paper's scale, best_assignment on the V100 table ranks every k for AlexNet and VGG-16.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..perf import DEFAULT_LATENCY_S, Cluster, best_assignment, check_device, device_profile, named_profile
from ..topology import fc_worker_choices
from .. import checks, registry
from ..runs import compute_rounds, replayed
from . import validation
from ..runs.replayed import ReplayParams
from ..runs.measurement import Measurement
from ..runs.run import measure_or_skip, modelled_only
from ..runs.spec import MeasureSpec

PIPEDREAM_VGG16 = "PipeDream's planner: VGG-16 on 16 GPUs -> 15 CONV replicas + 1 FC node (k = 1)"


@replayed.in_grid("04_node_assignment")
@dataclasses.dataclass(kw_only=True)
class AssignmentParams(ReplayParams):
    """Notebook 04's parameters (its `parameters` cell), checked on creation; the replay_* ones
    and measure_runs: replayed.ReplayParams (here one cluster size and one target)."""

    model: str  # zoo model run on the emulated cluster
    image_size: int  # square input of the measured runs
    num_classes: int  # outputs of the measured model
    nodes: int  # emulated nodes N; k runs over 1..N/2
    global_batch: int  # divisible by N - k for every k
    steps: int  # steps per measured run, warmup included
    warmup: int  # steps left out of the measured throughput
    target_gbps: float  # bandwidth the measured runs emulate
    target_device: str = "v100"  # accelerator the target bandwidth belongs to
    repeats: int = 1  # measured runs per k
    paper_models: list[str]  # models ranked at the scale of the paper
    paper_image_size: int = 224
    paper_nodes: int = 16  # cluster size of the modelled ranking
    paper_gbps: list[float]  # bandwidths of the modelled ranking
    batch_per_worker: int = 32  # modelled samples per CONV worker
    paper_device: str = "v100"  # perf device-table row
    replay_nodes: int = 4  # emulated cluster size of the replayed runs (k = 1..N/2)
    replay_gbps: float = 10.0  # their target bandwidth
    measured: MeasureSpec = dataclasses.field(init=False)  # stanza at every k = 1..N//2

    def __post_init__(self):
        if not checks._is_int(self.nodes) or self.nodes < 2:
            raise ValueError(f"nodes must be an integer >= 2 (stanza needs a CONV and an FC worker), got {self.nodes!r}")
        self.measured = MeasureSpec(model=self.model, image_size=self.image_size, num_classes=self.num_classes,
                                    nodes=self.nodes, strategies=["stanza"],
                                    fc_workers=list(fc_worker_choices(self.nodes)), global_batch=self.global_batch,
                                    steps=self.steps, warmup=self.warmup, target_gbps=[self.target_gbps],
                                    target_device=self.target_device, repeats=self.repeats)
        self.paper_models = checks.model_names(self.paper_models, self.paper_image_size, name="paper_models")
        checks.positive_int("paper_nodes", self.paper_nodes, 2)
        checks.positive_int("batch_per_worker", self.batch_per_worker)
        check_device(self.paper_device, "paper_device")
        self.paper_gbps = checks.positive_floats("paper_gbps", self.paper_gbps)
        n = checks.positive_int("replay_nodes", self.replay_nodes, 2)
        # the paper-regime runs: stanza at every k
        self.replay = self.replay_set(["stanza"], list(fc_worker_choices(n)), nodes=[n],
                                      target_gbps=[self.replay_gbps])


def run_measured(p: AssignmentParams, cache_dir: str | None = None) -> Measurement:
    return measure_or_skip(p.measured, cache_dir, p.measure_runs)


def run_replayed(p: AssignmentParams, cache_dir: str | None = None) -> list[Measurement]:
    """The paper-regime runs: stanza at every k, replayed compute, real communication."""
    return replayed.run_replayed(p.replay, cache_dir, p.measure_runs)


def _replayed(p: AssignmentParams, runs: list[Measurement]) -> dict[str, Any]:
    """replayed.summary plus, per model, the measured best k and best_assignment's pick for the
    same cluster (N nodes at the target on the replay device: what the replayed runs emulate)."""
    out = replayed.summary(p.replay, runs)
    for model, by_n in out["by_model"].items():
        for n, by_g in by_n.items():
            for g, d in by_g.items():
                tp = {int(key.split("_k")[1]): v for key, v in d["throughput"].items()}
                prof = named_profile(model, p.replay_image_size, p.replay_num_classes)
                dev = device_profile(p.replay_device, prof, p.batch_per_worker).profile  # table row or measured
                a = best_assignment(prof, Cluster(int(n), float(g), device=dev), batch_per_worker=p.batch_per_worker)
                best = max(tp, key=tp.get)
                d.update(measured_best_k=best, optimiser_k=a.best_stanza().fc_workers,
                         optimiser_shortfall=1 - tp[a.best_stanza().fc_workers] / tp[best])
    return out


def _emulated(bench: Measurement) -> dict[str, Any]:
    """Measured and predicted throughput per k on the emulated cluster, and the optimiser's picks."""
    cfg = bench.config
    n, G = cfg["nodes"], cfg["global_batch"]
    out: dict[str, Any] = {"nodes": n, "global_batch": G, "unavailable": bench.unavailable,
                           "calibration": bench.calibration, "cache": bench.cache,
                           "modelled_only_gbps": bench.modelled_only_gbps}
    if bench.unavailable or not bench.runs:
        return out
    rows = validation.predict_runs(bench)
    mbit = rows[0]["link_mbit"]
    prof = named_profile(cfg["model"], cfg["image_size"], cfg["num_classes"])
    by_k = {str(r["fc_workers"]): {"measured": r["measured_throughput"], "predicted": r["predicted_throughput"],
                                   "error": r["error"], "link_mbit": r["link_mbit"]} for r in rows}
    measured_best = max(rows, key=lambda r: r["measured_throughput"])
    optimiser = max(rows, key=lambda r: (r["predicted_throughput"], -r["fc_workers"]))
    # The same question without contention: one single-process profile for every k.
    gbps = rows[0]["payload_gbps"]  # the payload the links carried (the runs' plan)
    lone = [r for r in bench.timing_rounds if r["level"] == 1]
    uncontended = None
    if lone:
        b = max(lone, key=lambda r: r["batch"])["batch"]
        dev = compute_rounds.device_for("ddp", 1, 0, b, lone, prof.params)
        a = best_assignment(prof, Cluster(n, gbps, DEFAULT_LATENCY_S, dev), G)
        uncontended = a.best_stanza().fc_workers
    best_tp = measured_best["measured_throughput"]
    opt_tp = optimiser["measured_throughput"]
    out.update(link_mbit=mbit, target_gbps=rows[0]["target_gbps"], by_k=by_k,
               measured_best_k=measured_best["fc_workers"], optimiser_k=optimiser["fc_workers"],
               optimiser_k_uncontended=uncontended,
               optimiser_is_measured_best=optimiser["fc_workers"] == measured_best["fc_workers"],
               optimiser_shortfall=1 - opt_tp / best_tp, optimiser_within_5pct=opt_tp >= 0.95 * best_tp,
               validation=rows, error_summary=validation.error_summary(rows))
    return out


def paper_scale(p: AssignmentParams) -> dict[str, Any]:
    """Per model and bandwidth on `paper_nodes` V100s: throughput of stanza at every k, ddp, ps, and
    best_assignment's pick."""
    out: dict[str, Any] = {}
    for name in p.paper_models:
        prof = named_profile(name, p.paper_image_size)
        for g in p.paper_gbps:
            dev = device_profile(p.paper_device, prof, p.batch_per_worker).profile  # table row or measured
            a = best_assignment(prof, Cluster(p.paper_nodes, g, device=dev), batch_per_worker=p.batch_per_worker)
            stanza = sorted((x for x in a.ranking if registry.owns(x.strategy, "fc_workers")),
                            key=lambda x: x.fc_workers)
            top = a.best_stanza()
            out.setdefault(name, {})[f"{g:g}"] = {
                "by_k": {str(x.fc_workers): x.throughput for x in stanza},
                "ddp": a.ddp.throughput, "ps": a.ps.throughput,
                "best": {"strategy": a.best.strategy, "fc_workers": a.best.fc_workers or 0,
                         "throughput": a.best.throughput},
                "best_k": top.fc_workers, "best_k_vs_ddp": top.throughput / a.ddp.throughput,
                "best_k_vs_ps": top.throughput / a.ps.throughput}
    return out


def assignment_results(p: AssignmentParams, bench: Measurement | None, paper: dict[str, Any],
                       replayed_runs: list[Measurement] = ()) -> dict[str, Any]:
    """results.json of notebook 04; `modelled_only` is why nothing was measured (None: measured)."""
    spec = p.measured
    return {"experiment": "node_assignment", "modelled_only": modelled_only([bench, *replayed_runs]),
            "replayed": _replayed(p, list(replayed_runs)),
            "measured": None if bench is None else {"model": spec.model, "image_size": spec.image_size,
                                                    "target_device": spec.target_device, **_emulated(bench),
                                                    "bench": bench.to_dict()},
            "paper_scale": {"models": p.paper_models, "nodes": p.paper_nodes, "device": p.paper_device,
                            "image_size": p.paper_image_size, "batch_per_worker": p.batch_per_worker,
                            "results": paper},
            "reference": PIPEDREAM_VGG16}
