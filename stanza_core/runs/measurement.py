"""A measurement's result: what run.measure returns, typed, and the one place its dict is built.

    Measurement(spec=..., config=..., runs=[...], ...)   run.measure, run.skipped, bench_from_metrics
    m.to_dict()                                          results.json, `bench --out` (the only dict)
    Measurement.from_dict(json.load(f))                  a bench JSON read back (validation.bench_json)
    summarize(runs)                                      the per-configuration rows of m.summary

Each run row carries its plan's values (runs.plan.RunPlan.row: label, target_gbps,
link_mbit = the wire rate, payload_gbps, dilation, engine_s, batches) beside what was measured.
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from .. import registry
from ..labels import run_label


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measurement:
    """Runs of one MeasureSpec (or of runs made elsewhere), their summary and how they were made."""

    spec: dict[str, Any]  # MeasureSpec.to_dict() (runs made elsewhere: the config they share)
    config: dict[str, Any]  # spec plus the k values measured (what validation reads)
    unavailable: str | None = None  # why nothing was measured (no emulated cluster, measuring off)
    calibration: dict[str, Any] | None = None  # real compute: the target mapping; replayed: D per label
    timing_rounds: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # compute_rounds
    runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # one row per run and repeat
    summary: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # summarize(runs)
    modelled_only_gbps: list[float] = dataclasses.field(default_factory=list)  # targets past the emulator
    cache: dict[str, Any] | None = None  # runs.cache.Cache.report()
    source: str | None = None  # the bench JSON it was read from (None: measured here)
    timing_rounds_note: str | None = None  # how the timing rounds were taken, when not beside the runs

    @property
    def replayed(self) -> bool:
        return self.config.get("compute") == "replay"

    def to_dict(self) -> dict[str, Any]:
        """The results dict (JSON-able; `source` and the note only when set)."""
        d = dataclasses.asdict(self)
        return {k: v for k, v in d.items() if v is not None or k not in ("source", "timing_rounds_note")}

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str | None = None) -> Measurement:
        """A results dict read back (bench --out, a results.json's benches); unknown keys refused."""
        names = {f.name for f in dataclasses.fields(cls)}
        if extra := sorted(set(d) - names):
            raise ValueError(f"not a measurement: unknown keys {extra}")
        if "config" not in d or "runs" not in d:
            raise ValueError("not a measurement: it needs 'config' and 'runs'")
        got = {**d, "spec": d.get("spec", d["config"])}
        return cls(**got, **({"source": source} if source else {}))


def _point(run: dict) -> tuple:
    """The bandwidth a run stands for: its target (configurations of one target may run at their
    own D and wire rate), else its wire rate."""
    return (0, run["target_gbps"]) if run.get("target_gbps") is not None else (1, run["link_mbit"])


def summarize(runs: list[dict]) -> list[dict]:
    """Per (bandwidth, configuration): median throughput over repeats, spread, speedups. A
    replayed run's throughput on the target is its measured throughput x its D, and speedups
    compare those (every configuration of a target may run at its own D)."""
    rows = []
    for point in sorted({_point(r) for r in runs}):
        here = [r for r in runs if _point(r) == point]
        med = {}
        for label in sorted({run_label(r) for r in here}):
            same = [r for r in here if run_label(r) == label]
            tp = [r["throughput"] for r in same]
            first = same[0]
            d = first.get("dilation") or 1.0
            med[label] = statistics.median(tp) * d
            rows.append({"strategy": first["strategy"], "fc_workers": first["fc_workers"],
                         "ps_servers": first.get("ps_servers") or 0, "ps_overlap": bool(first.get("ps_overlap")),
                         "fc_conv_share": first.get("fc_conv_share") or 0.0,
                         "micro_batches": first.get("micro_batches") or 1,
                         **{k: first[k] for k in registry.get(first["strategy"]).options  # any other option it set
                            if k in first and k not in ("fc_workers", "ps_servers", "ps_overlap")},
                         "label": label, "link_mbit": first["link_mbit"], "payload_gbps": first.get("payload_gbps"),
                         "dilation": d, "engine_s": first.get("engine_s"), "target_gbps": first["target_gbps"],
                         "throughput": statistics.median(tp), "throughput_min": min(tp), "throughput_max": max(tp),
                         "target_throughput": med[label], "repeats": len(tp), "bytes_per_step": first["bytes_per_step"],
                         "slipped_runs": sum(bool((r.get("link_check") or {}).get("slipped")) for r in same)})
        best_ps = max((v for r, v in zip(rows[-len(med):], med.values()) if registry.owns(r["strategy"], "ps_servers")),
                      default=None)
        for row in rows[-len(med):]:
            for base in registry.baselines():  # ps: colocated shards, no overlap
                ref = med.get(base)
                row[f"speedup_vs_{base}"] = row["target_throughput"] / ref if ref else None
            row["speedup_vs_best_ps"] = row["target_throughput"] / best_ps if best_ps else None  # the fastest ps
    return rows
