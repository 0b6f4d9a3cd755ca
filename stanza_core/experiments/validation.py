"""The performance model against measured runs: predictions for every run of a Measurement
(with timing rounds: `compute_rounds`), their errors, which model term misses, and notebook 07.

No prediction input is fitted to the runs being predicted: per-part compute times from the
timing rounds (each phase at its contention), the optimizer step, the emulated link rate in
payload bytes, 50 us per message plus the links' added delay, no step overhead; replayed runs:
the replay device's profile x D plus the configuration's engine seconds, measured apart at D = 1
(`engine_apart` holds those apart). Every summary gives the bias (mean signed error) beside the
median.
`calibrated` additionally adds a per-strategy fixed step overhead fitted on the *other*
bandwidths' runs (leave-one-bandwidth-out), so its errors stay out-of-sample.
"""
from __future__ import annotations

import json
import dataclasses
import statistics
from pathlib import Path
from typing import Any

from ..perf import DEFAULT_LATENCY_S, Cluster, named_profile, predict
from .. import checks, registry
from ..runs.compute_rounds import device_for, mean_rounds, rounds_needed, timing_rounds
from ..runs.plan import shaped_link
from ..variant import Variant, unset
from ..runs.replayed import ReplayParams, in_grid, run_replayed
from ..runs.measurement import Measurement
from ..runs.run import measure_or_skip, modelled_only
from ..perf import DeviceProfile, device_profile
from ..runs.spec import MeasureSpec

# ---------------------------------------------------------------------------------------------
# Predicted against measured


def _median(values):
    return statistics.median(values) if values else None


def predict_runs(result: Measurement, *, latency_s: float = DEFAULT_LATENCY_S,
                 overhead_s: dict[str, float] | None = None, with_engine: bool = False) -> list[dict[str, Any]]:
    """One row per measured configuration (strategy, k, S, overlap, share, M, link rate) of a
    Measurement with timing rounds: medians over repeats of the measured figures, the model's
    prediction with this machine's DeviceProfile for that configuration (from the runs' own rounds
    where they carry them, else the bench's), and the errors.

    error = predicted throughput / measured throughput - 1. The diagnostics say which term would
    have to change to match: `compute_factor` scales the model's compute (its step with free
    communication) with communication left as is; `comm_factor` scales its exposed communication
    with compute left as is. A factor that is the same across rows points at that term.

    Each run is predicted at its own plan's values (runs.plan.RunPlan.row): the payload
    rate its links carried and, replayed, its D; rows written before runs carried them: the
    payload of their wire rate, the bench's D. `with_engine`: a replayed run's measured engine
    seconds (its plan's engine_s) are added to its predicted step."""
    cfg, rounds = result.config, result.timing_rounds
    replayed = cfg.get("compute") == "replay"
    if not rounds and not replayed:
        raise ValueError("the results have no timing rounds: measure them with measure_rounds_for(result) first")
    n, G = cfg["nodes"], cfg["global_batch"]
    profile = named_profile(cfg["model"], cfg["image_size"], cfg["num_classes"])
    delay_s = (cfg.get("delay_ms") or 0.0) / 1000
    mtu = cfg.get("mtu") or 1500  # bench results before the mtu option ran at 1500
    groups: dict[tuple, list[dict]] = {}
    for r in result.runs:  # layout options: rows written before an option existed have its default
        groups.setdefault((Variant.of_row(r), r["link_mbit"]), []).append(r)
    rows = []
    layout_of = lambda v: {o: v.get(o, unset(o)) for o in ("fc_workers", "ps_servers", "ps_overlap",  # noqa: E731
                                                           "fc_conv_share", "micro_batches")}
    order = lambda g: (g[0][1], g[0][0].strategy, *layout_of(g[0][0]).values())  # noqa: E731
    for (v, mbit), runs in sorted(groups.items(), key=order):
        layout = layout_of(v)
        s, k = v.strategy, layout.pop("fc_workers")
        first = runs[0]
        payload = first.get("payload_gbps") or shaped_link(mbit, mtu).payload_gbps
        extra = (overhead_s or {}).get(s, 0.0) + ((first.get("engine_s") or 0.0) if with_engine else 0.0)
        own = [r["timing_rounds"] for r in runs if r.get("timing_rounds")]
        # later rounds win in device_for: the runs' own rounds over the bench's
        used = rounds + mean_rounds(*own) if own else rounds
        if replayed:  # the replay device's own profile, every time D x: what the engine waits
            dev = replay_profile(profile, cfg["replay_device"], first.get("dilation") or _spec_dilation(cfg), extra)
        else:
            dev = device_for(s, n, k, G, used, profile.params, extra)
        # dedicated parameter servers are nodes of the cluster beside the N workers
        cluster = Cluster(n + layout["ps_servers"], payload, latency_s + delay_s, dev)
        p = predict(profile, cluster, v, global_batch=runs[0].get("global_batch") or G, with_ranks=False)
        meas_tp = _median([r["throughput"] for r in runs])
        meas_step = _median([r["step_time_median_s"] for r in runs])
        comm = p.exposed_comm_s
        compute = p.iteration_s - comm
        rows.append({
            "strategy": s, "fc_workers": k, **layout, "label": v.label,
            "target_gbps": first.get("target_gbps"), "link_mbit": mbit, "payload_gbps": payload,
            "dilation": first.get("dilation") or cfg.get("dilation") or 1.0, "engine_s": first.get("engine_s"),
            "repeats": len(runs),
            "measured_throughput": meas_tp, "predicted_throughput": p.throughput,
            "error": p.throughput / meas_tp - 1,
            "measured_step_s": meas_step, "predicted_step_s": p.iteration_s,
            "step_error": p.iteration_s / meas_step - 1,
            "predicted_compute_s": compute, "predicted_exposed_comm_s": comm,
            "comm_share": comm / p.iteration_s,
            "compute_factor": (meas_step - comm) / compute if compute > 0 else None,
            "comm_factor": (meas_step - compute) / comm if comm > 0 else None,
            "measured_bytes_per_step": runs[0]["bytes_per_step"], "predicted_bytes_per_step": p.bytes_per_step,
            "device": dev.to_dict(), "breakdown": p.breakdown,
            "rounds_source": "run" if own else "bench", "timing_rounds": used,
        })
    return rows


def _spec_dilation(cfg: dict) -> float:
    """D of a bench's runs that carry none of their own: its config's dilation (the engine's D, or an
    older grid's single D) or else the smallest D its grid allowed (min_dilation, the floor of
    MeasureSpec.dilation_rule in MeasureSpec.to_dict)."""
    return cfg.get("dilation") or cfg.get("min_dilation") or 1.0


def replay_profile(profile, device: str, dilation: float, step_overhead_s: float = 0.0):
    """The DeviceProfile a replayed run computes with: the device-table row's, every time x D."""
    base = device_profile(device, profile).profile.to_dict()
    times = {k: v * dilation for k, v in base.items() if k not in ("name", "row_version", "step_overhead_s")}
    return DeviceProfile(**{**base, **times, "name": f"{base['name']} x {dilation:g}",
                            "step_overhead_s": step_overhead_s})


def error_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and worst absolute throughput error, overall and per strategy, and the bias (the
    mean signed error: > 0 when the model predicts more samples/s than were measured)."""
    if not rows:
        return {"configurations": 0, "median_abs_error": None, "worst_abs_error": None, "bias": None, "worst": None,
                "by_strategy": {}}
    worst = max(rows, key=lambda r: abs(r["error"]))
    by = {}
    for s in sorted({r["strategy"] for r in rows}):
        errs = [abs(r["error"]) for r in rows if r["strategy"] == s]
        by[s] = {"configurations": len(errs), "median_abs_error": statistics.median(errs),
                 "worst_abs_error": max(errs)}
    errs = [abs(r["error"]) for r in rows]
    return {"configurations": len(rows), "median_abs_error": statistics.median(errs),
            "worst_abs_error": max(errs), "bias": statistics.fmean(r["error"] for r in rows),
            "worst": f"{worst['label']} @ {worst['link_mbit']:.1f} Mbit/s",
            "within_10pct": sum(e <= 0.10 for e in errs) / len(errs),
            "within_20pct": sum(e <= 0.20 for e in errs) / len(errs), "by_strategy": by,
            "bytes_match": all(r["measured_bytes_per_step"] == r["predicted_bytes_per_step"] for r in rows)}


ENGINE_SHARE_LOW = 0.01  # a replayed run whose engine seconds are at most 1 % of its step


def engine_apart(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's step error on replayed runs with the engine's own CPU seconds held apart. Each
    run: measured_step_s, engine_s (measured at D = 1, apart from the run) and the model's step
    without them, `plain_step_s`, on one scale (dilated, or all / D). Two ways: the runs whose
    engine share (engine_s / measured step) is at most ENGINE_SHARE_LOW, their error as measured;
    and every run with its engine seconds subtracted from its measured step, (measured - engine_s)
    / plain - 1 (this assumes the engine's work never overlaps the waits). Both with the median
    |error| and the bias (mean signed error; > 0: the model's step is the shorter). Replay and model share the
    compute by construction (the same device profile), so these errors are those of the network
    and schedule model, not of compute."""
    runs = [r for r in runs if r.get("engine_s") is not None]
    share = [r["engine_s"] / r["measured_step_s"] for r in runs]
    low = [r["measured_step_s"] / r["plain_step_s"] - 1 for r, s in zip(runs, share) if s <= ENGINE_SHARE_LOW]
    sub = [(r["measured_step_s"] - r["engine_s"]) / r["plain_step_s"] - 1 for r in runs]

    def stats(errs):  # no runs: the counts alone (a claim on a missing figure reads "not in this run")
        return {"configurations": len(errs), "positive": sum(e > 0 for e in errs), **({
            "median_abs_error": statistics.median(map(abs, errs)), "worst_abs_error": max(map(abs, errs)),
            "bias": statistics.fmean(errs)} if errs else {})}
    return {"configurations": len(runs), "share_low": ENGINE_SHARE_LOW,
            "engine_share_median": _median(share), "engine_share_max": max(share, default=None),
            "low_share": stats(low), "subtracted": stats(sub)}


def measure_rounds_for(result: Measurement, reps: int = 5) -> Measurement:
    """A Measurement (e.g. read from `python -m stanza_core.bench --out`) with the timing rounds
    its configurations need, measured now on this machine (recorded as such)."""
    cfg = result.config
    configs = sorted({(r["strategy"], r["fc_workers"]) for r in result.runs})
    rounds = rounds_needed(configs, cfg["nodes"], cfg["global_batch"])
    measured = timing_rounds(cfg["model"], cfg["image_size"], cfg["num_classes"], rounds, reps=reps)
    return dataclasses.replace(result, timing_rounds=measured,
                               timing_rounds_note="measured at validation time, not beside the runs")



def calibrated(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with a per-strategy fixed step overhead fitted out of sample: for each row, the median
    of (measured - predicted step) over the same strategy's rows at *other* link rates (same
    bench); None where a strategy was measured at one rate only."""
    out = []
    for r in rows:
        train = [x["measured_step_s"] - x["predicted_step_s"] for x in rows
                 if x["strategy"] == r["strategy"] and x["link_mbit"] != r["link_mbit"]]
        if not train:
            out.append({**r, "overhead_s": None, "calibrated_step_s": None, "calibrated_error": None})
            continue
        o = max(statistics.median(train), 0.0)
        step = r["predicted_step_s"] + o
        G = r["predicted_throughput"] * r["predicted_step_s"]
        out.append({**r, "overhead_s": o, "calibrated_step_s": step,
                    "calibrated_error": (G / step) / r["measured_throughput"] - 1})
    return out


def term_fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per strategy, least squares of measured step = a + c x (predicted exposed communication) +
    predicted compute over its configurations (link rates, k): c is how much the model's
    communication term is off (1 = right), a the fixed time per step the model lacks. Needs two
    distinct communication times or more (with two the fit is exact, so noise goes into it)."""
    out = {}
    for s in sorted({r["strategy"] for r in rows}):
        pts = [(r["predicted_exposed_comm_s"], r["measured_step_s"] - r["predicted_compute_s"])
               for r in rows if r["strategy"] == s]
        xs = [x for x, _ in pts]
        if len(set(xs)) < 2:
            out[s] = None
            continue
        mx, my = statistics.fmean(xs), statistics.fmean(y for _, y in pts)
        c = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x in xs)
        out[s] = {"comm_scale": c, "fixed_s": my - c * mx, "points": len(pts)}
    return out


# ---------------------------------------------------------------------------------------------
# Notebook 07: predicted against measured, over several benches


@in_grid("07_model_validation")
@dataclasses.dataclass(kw_only=True)
class ValidationParams(ReplayParams):
    """Notebook 07's parameters (its `parameters` cell), checked on creation: one MeasureSpec per
    cluster size (stanza at the k of `fc_workers` that fit N) and bench results files; the
    replay_* ones and measure_runs: replayed.ReplayParams."""

    model: str  # zoo model run on the emulated cluster
    image_size: int  # square input of the measured runs
    num_classes: int  # outputs of the measured model
    nodes: list[int]  # emulated cluster sizes (empty: only bench_json)
    strategies: list[str]  # strategies measured
    fc_workers: list[int]  # stanza's k (those from 1 to N/2 run at each N)
    global_batch: int  # divisible by the data workers of every configuration
    steps: int  # steps per measured run, warmup included
    warmup: int  # steps left out of the measured throughput
    target_gbps: list[float]  # target bandwidths, mapped to emulated link rates
    target_device: str = "v100"  # accelerator the targets belong to
    repeats: int = 1  # measured runs per configuration and target
    bench_json: list[str] = dataclasses.field(default_factory=list)  # bench results files validated as well
    batch_per_worker: int = 32  # samples per data worker of the replayed runs
    specs: list = dataclasses.field(init=False)  # MeasureSpec per cluster size
    PATHS = ("bench_json",)

    def __post_init__(self):
        sizes = checks.int_list("nodes", self.nodes, 2) if self.nodes else []
        ks = [self.fc_workers] if isinstance(self.fc_workers, int) else list(self.fc_workers)
        gbps = checks.positive_floats("target_gbps", self.target_gbps)
        self.specs = []
        for n in sizes:
            fit = checks.fc_workers_that_fit(ks, n, needed=any(registry.owns(s, "fc_workers") for s in self.strategies))
            self.specs.append(MeasureSpec(model=self.model, image_size=self.image_size, num_classes=self.num_classes,
                                          nodes=n, strategies=self.strategies, fc_workers=fit or [1],
                                          global_batch=self.global_batch, steps=self.steps, warmup=self.warmup,
                                          target_gbps=gbps, target_device=self.target_device, repeats=self.repeats))
        self.replay = self.replay_set(self.strategies, ks)
        self.bench_json = [self.bench_json] if isinstance(self.bench_json, str) else list(self.bench_json)
        for f in self.bench_json:
            if not Path(f).is_file():
                raise ValueError(f"bench_json {f}: no such file")


def run_measured(p: ValidationParams, cache_dir: str | None = None) -> list[Measurement]:
    """The real-compute runs (the fidelity anchor), then the replayed paper-regime runs."""
    real = [measure_or_skip(s, cache_dir, p.measure_runs) for s in p.specs]
    return real + run_replayed(p.replay, cache_dir, p.measure_runs)


def load_benches(p: ValidationParams) -> list[Measurement]:
    """The bench_json files, with timing rounds measured now where a file has none."""
    out = []
    for f in p.bench_json:
        b = Measurement.from_dict(json.loads(Path(f).read_text()), source=str(f))
        out.append(b if b.timing_rounds else measure_rounds_for(b))
    return out


def _predict_bench(b: Measurement, latency_s: float) -> list[dict[str, Any]]:
    """predict_runs of one bench. A replayed run with its engine seconds measured (its plan's
    engine_s, runs.plan.replayed_plan) is predicted as the emulated run it is: the model's step on
    the dilated device profile plus those seconds (the engine's own CPU work per step, which
    replay keeps and the target cluster would not have; measured at D = 1, apart from the run);
    each row keeps the error without them (`error_without_engine`)."""
    plain = predict_runs(b, latency_s=latency_s)
    if not b.replayed or all(r.get("engine_s") is None for r in b.runs):
        return plain
    rows = predict_runs(b, latency_s=latency_s, with_engine=True)
    return [{**r, "error_without_engine": p["error"], "plain_step_s": p["predicted_step_s"]} for r, p in zip(rows, plain)]


def validate(benches: list[Measurement], latency_s: float = DEFAULT_LATENCY_S) -> dict[str, Any]:
    """Rows (predicted against measured, with the out-of-sample calibrated variant) of every
    bench with runs; the error summary, calibrated error summary and term fit per bench.
    Replayed runs: `replayed_summary` predicts them with their engine seconds where measured
    (_predict_bench), `replayed_summary_without_engine` with the model's step alone."""
    rows, per_bench = [], []
    for i, b in enumerate(benches):
        if b.unavailable or not b.runs:
            continue
        cfg = b.config
        got = calibrated(_predict_bench(b, latency_s))
        ds = ", ".join(f"{d:g}" for d in sorted({r["dilation"] for r in got}))
        name = (f"{cfg['model']} N={cfg['nodes']} replayed ({cfg['replay_device']}, D={ds})"
                if cfg.get("compute") == "replay" else f"{cfg['model']} N={cfg['nodes']} G={cfg['global_batch']}")
        for r in got:
            r.update(bench=i, bench_name=name, nodes=cfg["nodes"], compute=cfg.get("compute", "real"))
        rows += got
        per_bench.append({"bench": i, "name": name, "source": b.source or "measured here",
                          "summary": error_summary(got), "term_fit": term_fit(got),
                          "timing_rounds": b.timing_rounds, "calibration": b.calibration,
                          "timing_rounds_note": b.timing_rounds_note})
    cal = [{**r, "error": r["calibrated_error"]} for r in rows if r["calibrated_error"] is not None]
    unavailable = next((b.unavailable for b in benches if b.unavailable), None)
    replay = sorted({(b.config["replay_device"], r.get("dilation") or _spec_dilation(b.config)) for b in benches
                     if b.replayed for r in b.runs or [{}]})
    engine = any(r.get("engine_s") is not None for r in rows)
    caption = ("measured: communication, for real (shaped links); replayed runs: compute from "
               + ", ".join(f"the {d} table profile x D = {x:g}" for d, x in replay)
               + (" (predicted with each configuration's engine seconds, measured at D = 1)" if engine else "")
               + "; the others: real compute") if replay else "measured: real compute and communication"
    return {"experiment": "model_validation", "unavailable": unavailable, "modelled_only": modelled_only(benches),
            "latency_s": latency_s, "caption": caption, "summary": error_summary(rows),
            "replayed_summary": error_summary([r for r in rows if r["compute"] == "replay"]),
            "replayed_summary_without_engine": error_summary(
                [{**r, "error": r.get("error_without_engine", r["error"])} for r in rows if r["compute"] == "replay"]),
            "replayed_engine_apart": engine_apart([r for r in rows if r["compute"] == "replay"]),
            "real_summary": error_summary([r for r in rows if r["compute"] != "replay"]),
            "calibrated_summary": error_summary(cal),
            "calibrated_real_summary": error_summary([r for r in cal if r["compute"] != "replay"]),
            "benches": per_bench, "rows": rows}
