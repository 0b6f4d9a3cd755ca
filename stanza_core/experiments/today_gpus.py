"""Notebook 09: does layer separation still pay on today's GPUs?

Stanza (the optimiser's k, and k = 1), ps with colocated shards, ps with dedicated servers and
ddp on a measured H200 profile (perf.device_profile: the package's per-layer records, source
"measured record"), AlexNet and VGG-16 at 224x224, 32 samples per data worker:

  modelled   perf.best_assignment at every N x bandwidth (N = 8..64 by default), on the H200
             profile and, for contrast, on `compare_device` (the V100 table row);
  replayed   the same configurations on the emulated cluster (runs.run.measure): every
             tensor over links shaped to target / D, each layer waiting D x its measured H200
             time; D per configuration from runs.plan (links and engine seconds);
  choice     the optimiser's pick at each replayed point, checked against the replayed runs:
             does the configuration the model ranks first among those replayed measure fastest?

    p = TodayParams(models=["alexnet"], target_gbps=[25.0, 400.0], ...)  # every check, first
    modelled = model_grid(p)                     # no run: the performance model only
    benches = run_replayed(p, modelled, cache_dir)   # Measurements, one per MeasureSpec
    results = today_results(p, modelled, benches)    # results.json

Configuration roles (`replay_configs`): "stanza" (the optimiser's best k at that point),
"stanza_k1", "ps" (one shard colocated with every worker), "ps_dedicated" (S of the N nodes
serve, the S the optimiser rates fastest without overlap), "ddp". Every number is labelled in
results.json by `source`: modelled, or replayed (compute from the named profile).
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from ..labels import config_key, run_key
from ..perf import Cluster, best_assignment, check_device, device_profile, named_profile
from .. import checks, registry
from ..runs.dilation_rule import DilationParams, DilationRule
from ..runs.replayed import PAPER_CLASSES, PAPER_IMAGE, in_grid
from ..runs.replayed import caption as replay_caption
from ..runs.measurement import Measurement
from ..runs.run import measure_or_skip, modelled_only
from ..runs.spec import MeasureSpec

ROLES = ("stanza", "stanza_k1", *registry.baselines(), "ps_dedicated")  # the configurations compared


@in_grid("09_today_gpus")
@dataclasses.dataclass(kw_only=True)
class TodayParams(DilationParams):
    """Notebook 09's parameters (its `parameters` cell; min_dilation and replay_engine come from
    DilationParams), checked on creation."""

    models: list[str]  # zoo models (224x224, 1000 classes)
    device: str = "h200-measured"  # the device profile every figure is for (perf.device_profile)
    compare_device: str = "v100"  # the paper's generation, modelled beside it
    batch_per_worker: int = 32  # samples per data worker
    target_gbps: list[float]  # bandwidths per node and direction
    model_nodes: list[int]  # cluster sizes of the modelled grid
    replay_models: list[str]  # models replayed on the emulated cluster (a subset of models)
    replay_nodes: list[int]  # emulated cluster sizes
    replay_gbps: list[float]  # replayed bandwidths (a subset of target_gbps)
    replay_configs: list[str]  # configuration roles replayed (ROLES)
    replay_steps: int = 3  # steps per replayed run, warmup included
    warmup: int = 1  # steps left out of the throughput
    measure_runs: bool = True  # False: the replayed cells are not run (modelled figures only)
    image_size: int = PAPER_IMAGE
    num_classes: int = PAPER_CLASSES

    def grid_specs(self) -> list[MeasureSpec]:
        """The replayed MeasureSpecs of this experiment (the full grid's points among them)."""
        return [spec for *_, spec in replay_specs(self, model_grid(self))] if self.replay_models else []

    def __post_init__(self):
        self.models = checks.model_names(self.models, self.image_size, name="models")
        check_device(self.device, "device")
        check_device(self.compare_device, "compare_device")
        checks.positive_int("batch_per_worker", self.batch_per_worker)
        self.target_gbps = checks.positive_floats("target_gbps", self.target_gbps)
        self.model_nodes = checks.int_list("model_nodes", self.model_nodes, 2)
        self.replay_models = checks.model_names(self.replay_models, self.image_size, name="replay_models") \
            if self.replay_models else []
        if extra := [m for m in self.replay_models if m not in self.models]:
            raise ValueError(f"replay_models {extra} are not among models {self.models}")
        self.replay_nodes = checks.int_list("replay_nodes", self.replay_nodes, 2) if self.replay_nodes else []
        self.replay_gbps = checks.positive_floats("replay_gbps", self.replay_gbps) if self.replay_gbps else []
        if extra := [g for g in self.replay_gbps if g not in self.target_gbps]:
            raise ValueError(f"replay_gbps {extra} are not among target_gbps {self.target_gbps}")
        roles = list(self.replay_configs or [])
        if any(r not in ROLES for r in roles) or len(set(roles)) != len(roles):
            raise ValueError(f"replay_configs must name distinct roles among {', '.join(ROLES)}, got {roles!r}")
        checks.positive_int("replay_steps", self.replay_steps, 2)
        if not checks._is_int(self.warmup) or not 0 <= self.warmup < self.replay_steps:
            raise ValueError(f"warmup must be in 0..replay_steps-1 = {self.replay_steps - 1}, got {self.warmup!r}")
        _ = self.dilation_rule  # min_dilation and replay_engine checked now, before any work
        for m in self.models:  # the measured record must cover the model (one-line error before any work)
            device_profile(self.device, named_profile(m, self.image_size, self.num_classes), self.batch_per_worker,
                           what="device")


def _profile(p: TodayParams, model: str):
    return named_profile(model, p.image_size, p.num_classes)


def _row(pred) -> dict[str, Any]:
    servers, overlap = pred.variant.get("ps_servers", 0), pred.variant.get("ps_overlap", False)
    return {"label": pred.label, "key": config_key(pred.strategy, pred.fc_workers, ps_servers=servers, ps_overlap=overlap),
            "strategy": pred.strategy, "fc_workers": pred.fc_workers or 0, "ps_servers": servers,
            "throughput": pred.throughput, "iteration_s": pred.iteration_s}


def assess(profile, device, nodes: int, gbps: float, batch_per_worker: int) -> dict[str, Any]:
    """perf.best_assignment at one point: the optimiser's pick and each role's prediction."""
    a = best_assignment(profile, Cluster(nodes, gbps, device=device), batch_per_worker=batch_per_worker)
    by_k = {p.fc_workers: p for p in a.ranking if registry.owns(p.strategy, "fc_workers")}
    dedicated = next((p for p in a.ranking if p.variant.get("ps_servers") and not p.variant.get("ps_overlap")), None)
    roles = {"stanza": a.best_stanza(), "stanza_k1": by_k.get(1), "ps": a.ps, "ps_dedicated": dedicated, "ddp": a.ddp}
    rows = {r: _row(pred) for r, pred in roles.items() if pred is not None}
    best_ps = a.best_ps or a.ps
    return {"nodes": nodes, "gbps": gbps, "best": _row(a.best), "roles": rows,
            "stanza_vs_ddp": roles["stanza"].throughput / a.ddp.throughput,
            "stanza_vs_best_ps": roles["stanza"].throughput / best_ps.throughput, "best_ps": _row(best_ps),
            "stanza_pays": registry.owns(a.best.strategy, "fc_workers"),
            # every candidate's prediction by key, for the configurations replayed
            "predicted": {_row(pr)["key"]: pr.throughput for pr in a.ranking}}


def model_grid(p: TodayParams) -> dict[str, Any]:
    """Modelled: by_model.<model>.<device>.<N>.<Gb/s> -> assess(...), on p.device and
    p.compare_device, at every N of model_nodes and replay_nodes; plus each device's compute step."""
    out: dict[str, Any] = {"source": "modelled", "devices": [p.device, p.compare_device],
                           "nodes": sorted(set(p.model_nodes) | set(p.replay_nodes)), "by_model": {}, "step_s": {},
                           "device_caption": {}}
    for m in p.models:
        prof = _profile(p, m)
        for dev_name in (p.device, p.compare_device):
            dev = device_profile(dev_name, prof, p.batch_per_worker)
            out["device_caption"].setdefault(m, {})[dev_name] = dev.caption
            out["step_s"].setdefault(m, {})[dev_name] = dev.profile.step_compute_s(p.batch_per_worker)
            grid = out["by_model"].setdefault(m, {}).setdefault(dev_name, {})
            for n in out["nodes"]:
                for g in p.target_gbps:
                    grid.setdefault(str(n), {})[f"{g:g}"] = assess(prof, dev.profile, n, g, p.batch_per_worker)
        s = out["step_s"][m]
        s["compare_over_device"] = s[p.compare_device] / s[p.device]
    return out


def replay_specs(p: TodayParams, modelled: dict[str, Any]) -> list[tuple[str, int, float, MeasureSpec]]:
    """(model, N, Gb/s, MeasureSpec) of every replayed point: one spec on N nodes for stanza (the
    roles' k), colocated ps and ddp, one on N - S workers + S servers for dedicated ps."""
    out = []
    for m in p.replay_models:
        for n in p.replay_nodes:
            for g in p.replay_gbps:
                roles = modelled["by_model"][m][p.device][str(n)][f"{g:g}"]["roles"]
                want = [roles[r] for r in p.replay_configs if r in roles]
                common = dict(model=m, image_size=p.image_size, num_classes=p.num_classes, compute="replay",
                              replay_device=p.device, batch_per_worker=p.batch_per_worker, steps=p.replay_steps,
                              warmup=p.warmup, target_gbps=[g], dilation_rule=p.dilation_rule)
                same = [r for r in want if not r.get("ps_servers")]  # dedicated servers: a cluster of their own
                ks = sorted({r["fc_workers"] for r in same if registry.owns(r["strategy"], "fc_workers")})
                if same:
                    out.append((m, n, g, MeasureSpec(**common, nodes=n, fc_workers=ks or [1],
                                                     strategies=sorted({r["strategy"] for r in same}))))
                for r in want:
                    if r.get("ps_servers"):
                        out.append((m, n, g, MeasureSpec(**common, nodes=n - r["ps_servers"], fc_workers=[1],
                                                         strategies=["ps"], ps_servers=[r["ps_servers"]])))
    return out


def run_replayed(p: TodayParams, modelled: dict[str, Any], cache_dir: str | None = None) -> list[Measurement]:
    """One Measurement per replay spec (run.measure: every configuration at its own D
    from its plan; runs and engine seconds cached); measuring off or no emulated cluster: benches
    that say why and hold no runs."""
    return [measure_or_skip(spec, cache_dir, p.measure_runs) for *_, spec in replay_specs(p, modelled)]


def step_spread(run: dict[str, Any], warmup: int) -> float:
    """(slowest - fastest) / median of a run's timed steps (0 with one timed step)."""
    steps = run["steps_s"][warmup:]
    return (max(steps) - min(steps)) / statistics.median(steps) if len(steps) > 1 else 0.0


def replayed_points(p: TodayParams, modelled: dict[str, Any], benches: list[Measurement]) -> dict[str, Any]:
    """Replayed: by_model.<model>.<N>.<Gb/s> -> per configuration key: samples/s on the target
    cluster (measured x D), the model's prediction, their ratio, D and the step spread; the
    optimiser's pick and whether the configuration it ranks first among those replayed measured
    fastest."""
    out: dict[str, Any] = {}
    for (m, n, g, _), bench in zip(replay_specs(p, modelled), benches):
        cell = modelled["by_model"][m][p.device][str(n)][f"{g:g}"]
        pt = out.setdefault(m, {}).setdefault(str(n), {}).setdefault(f"{g:g}", {
            "choice": cell["best"]["label"], "configs": {}, "labels": {}})
        for row in bench.summary:
            key = run_key(row)
            runs = [r for r in bench.runs if run_key(r) == key]
            pred = cell["predicted"][key]
            pt["labels"][key] = row["label"]
            pt["configs"][key] = {"replayed": row["target_throughput"], "predicted": pred,
                                  "predicted_over_replayed": pred / row["target_throughput"],
                                  "dilation": row["dilation"], "link_mbit": row["link_mbit"],
                                  "engine_s": row["engine_s"],
                                  "step_spread": max(step_spread(r, p.warmup) for r in runs)}
    for by_n in out.values():
        for by_g in by_n.values():
            for pt in by_g.values():
                c = pt["configs"]
                if not c:
                    continue
                pt["predicted_fastest"] = max(c, key=lambda k: c[k]["predicted"])
                pt["replayed_fastest"] = max(c, key=lambda k: c[k]["replayed"])
                # None with one configuration replayed: no ranking to check
                pt["choice_checked"] = pt["predicted_fastest"] == pt["replayed_fastest"] if len(c) > 1 else None
                pt["choice_replayed"] = pt["choice"] in pt["labels"].values()
                pt["spread"] = max(v["step_spread"] for v in c.values())
                ratios = [v["predicted_over_replayed"] for v in c.values()]
                pt["worst_model_error"] = max(abs(r - 1) for r in ratios)
    return out


def where_it_pays(p: TodayParams, modelled: dict[str, Any]) -> dict[str, Any]:
    """Modelled: <model>.<device>.<N> -> the bandwidths at which the optimiser picks stanza, the
    first at which it picks something else (None: none of target_gbps), and stanza's speedup over
    ddp and over the best ps at each bandwidth."""
    out: dict[str, Any] = {}
    for m, by_dev in modelled["by_model"].items():
        for dev, by_n in by_dev.items():
            for n, by_g in by_n.items():
                gs = sorted(by_g, key=float)
                out.setdefault(m, {}).setdefault(dev, {})[n] = {
                    "pays_at": [float(g) for g in gs if by_g[g]["stanza_pays"]],
                    "stops_at": next((float(g) for g in gs if not by_g[g]["stanza_pays"]), None),
                    "best": {g: by_g[g]["best"]["label"] for g in gs},
                    "stanza_vs_ddp": {g: by_g[g]["stanza_vs_ddp"] for g in gs},
                    "stanza_vs_best_ps": {g: by_g[g]["stanza_vs_best_ps"] for g in gs}}
    return out


def conclusion(results: dict[str, Any]) -> str:
    """The notebook's conclusion, every number from `results` (one line per model and device)."""
    lines = []
    pays, step = results["where_it_pays"], results["modelled"]["step_s"]
    for m, by_dev in pays.items():
        dev, cmp_ = results["device"], results["compare_device"]
        lines.append(f"{m}: a {results['batch_per_worker']}-sample step computes in {step[m][dev] * 1e3:.1f} ms on "
                     f"{dev}, {step[m][cmp_] * 1e3:.1f} ms on {cmp_} ({step[m]['compare_over_device']:.1f}x).")
        for d in (dev, cmp_):
            parts = []
            for n, v in sorted(by_dev[d].items(), key=lambda kv: int(kv[0])):
                top = f"{', '.join(f'{g:g}' for g in v['pays_at'])} Gb/s" if v["pays_at"] else "no bandwidth studied"
                s = v["stops_at"]
                stop = f", {v['best'][f'{s:g}']} from {s:g} Gb/s" if s is not None else ""
                parts.append(f"N={n}: at {top}{stop}")
            lines.append(f"  modelled on {d}: stanza is the optimiser's pick " + "; ".join(parts) + ".")
    for m, by_n in results["replayed"]["by_model"].items():
        for n, by_g in by_n.items():
            for g, pt in by_g.items():
                if not pt["configs"]:
                    continue
                lab = pt["labels"]
                lines.append(f"replayed ({results['device']}) {m} N={n} at {g} Gb/s: the model ranks "
                             f"{lab[pt['predicted_fastest']]} first among those replayed, the replay measures "
                             f"{lab[pt['replayed_fastest']]} fastest ({_verdict(pt['choice_checked'])});"
                             f" model/replay within {pt['worst_model_error']:.0%}, step spread {pt['spread']:.0%}.")
    return "\n".join(lines)


def _verdict(checked: bool | None) -> str:
    return {True: "agree", False: "differ", None: "one configuration replayed, nothing to rank"}[checked]


def today_results(p: TodayParams, modelled: dict[str, Any], benches: list[Measurement]) -> dict[str, Any]:
    """results.json of notebook 09; `modelled_only` is why nothing was replayed (None: replayed)."""
    specs = replay_specs(p, modelled)
    cap = replay_caption(_CaptionSet(p.device, p.dilation_rule, [s for *_, s in specs]), benches) if specs else None
    return {"experiment": "today_gpus", "modelled_only": modelled_only(benches) if benches else None,
            "device": p.device, "compare_device": p.compare_device, "batch_per_worker": p.batch_per_worker,
            "image_size": p.image_size, "target_gbps": p.target_gbps, "modelled": modelled,
            "where_it_pays": where_it_pays(p, modelled),
            "replayed": {"source": f"replayed ({p.device})", "caption": cap, "nodes": p.replay_nodes,
                         "gbps": p.replay_gbps, "unavailable": next((b.unavailable for b in benches if b.unavailable), None),
                         "by_model": replayed_points(p, modelled, benches),
                         "benches": [b.to_dict() for b in benches]}}


@dataclasses.dataclass
class _CaptionSet:
    """What replayed.caption reads of a replay set: the device, the dilation rule, the specs."""

    replay_device: str
    dilation_rule: DilationRule
    specs: list[MeasureSpec]
