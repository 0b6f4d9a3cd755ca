"""Measured runs of ps, ddp and stanza on the emulated cluster, cached, shared by notebooks 03-07.

`MeasureSpec` (validated on creation) -> `measure(spec, cache_dir)`, which returns
a bench results dict (`stanza_core.bench`: "config", "calibration", "runs", "summary") plus the
timing rounds the performance model needs to predict those runs (`timing.timing_rounds`).
Target bandwidths map to emulated link rates as in the bench: rate = target x t_step_target /
t_step_here, t_step_here being one data worker's compute step with all N nodes computing at
once (the timing round at level N). Targets whose rate exceeds what the emulator can shape
(`max_link_mbit`) are listed as modelled only.

Each run also carries the timing rounds of its own configuration, taken right before and after
it, so its prediction sees the load of its moment (this machine is shared).

Cache: every timing round and every run is stored as one JSON file under `cache_dir`, keyed by
every parameter that determines it and by a fingerprint of the code that measures it, so
notebooks asking for the same run share it and a changed parameter or engine never reuses an
old one. What was reused is printed and recorded in the results (`cache`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from .. import bench
from ..models import MIN_IMAGE_SIZE, MODEL_NAMES, known_model
from . import timing

PACKAGE = Path(__file__).resolve().parents[1]
# What a measured run depends on: everything but the figures, the report and the notebook glue.
_NOT_MEASURING = ("viz", "reproduce", "nbtools.py", "widgets.py", "experiments/")
# Per-frame work caps the rate one emulated link holds on 2 cores: about 300 Mbit/s at MTU 1500
# (netem/cluster.py), about 1 Gbit/s with jumbo frames (bench --mtu).
EMULATOR_MAX_MBIT = {1500: 300.0, 9000: 1000.0}


def _positive_list(name: str, values, kind=float) -> list:
    if values is None:
        return None
    vals = [values] if isinstance(values, (int, float)) else list(values)
    if not vals or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in vals):
        raise ValueError(f"{name} must be a non-empty list of positive numbers, got {values!r}")
    return [kind(v) for v in vals]


@dataclasses.dataclass(kw_only=True)
class MeasureSpec:
    model: str  # zoo name (stanza_core.MODEL_NAMES)
    image_size: int  # square input side in pixels
    num_classes: int  # outputs of the last FC layer
    nodes: int  # emulated nodes, one process each
    strategies: list[str]  # among ps, ddp, stanza
    fc_workers: list[int]  # stanza's k values, each in 1..nodes // 2
    global_batch: int  # G, divisible by every configuration's data workers
    steps: int  # steps per run, warmup included
    warmup: int = 1  # steps left out of the throughput
    target_gbps: list[float] | None = None  # target bandwidths (mapped) ...
    link_mbit: list[float] | None = None  # ... or emulated link rates directly (exactly one of the two)
    target_device: str = "v100"  # the device the target bandwidths refer to (perf device table)
    repeats: int = 1  # runs per configuration and bandwidth (interleaved)
    delay_ms: float = 0.0  # one-way delay added on every upload link
    mtu: int = 9000  # link MTU (the bench's default: jumbo frames)
    max_link_mbit: float | None = None  # targets mapped above this are modelled only (None: per MTU)
    timing_reps: int = 5  # repetitions per timing round

    def __post_init__(self):
        from ..perf import DEVICE_TABLE

        if not known_model(self.model):
            raise ValueError(f"unknown model {self.model!r}; expected one of: {', '.join(MODEL_NAMES)} or package.module:factory")
        for name in ("image_size", "num_classes", "nodes", "global_batch", "steps", "repeats", "timing_reps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.image_size < MIN_IMAGE_SIZE.get(self.model, 1):
            raise ValueError(f"{self.model} needs image_size >= {MIN_IMAGE_SIZE[self.model]}, got {self.image_size}")
        if self.nodes < 2:
            raise ValueError(f"nodes must be >= 2 for a distributed run, got {self.nodes}")
        self.strategies = [self.strategies] if isinstance(self.strategies, str) else list(self.strategies)
        bad = [s for s in self.strategies if s not in ("ps", "ddp", "stanza")]
        if bad or not self.strategies:
            raise ValueError(f"unknown strategy {bad[0] if bad else None!r}; expected ps, ddp or stanza")
        self.fc_workers = [self.fc_workers] if isinstance(self.fc_workers, int) else list(self.fc_workers)
        if "stanza" in self.strategies:
            for k in self.fc_workers:
                if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.nodes // 2:
                    raise ValueError(f"fc_workers {k!r} with {self.nodes} nodes: expected 1 <= k <= "
                                     f"{self.nodes // 2} (k >= N - k leaves an FC worker no CONV worker)")
        if not isinstance(self.warmup, int) or not 0 <= self.warmup < self.steps:
            raise ValueError(f"warmup must be in 0..steps-1 = {self.steps - 1}, got {self.warmup!r}")
        if (self.target_gbps is None) == (self.link_mbit is None):
            raise ValueError("give the bandwidth as target_gbps or as link_mbit (exactly one)")
        self.target_gbps = _positive_list("target_gbps", self.target_gbps)
        self.link_mbit = _positive_list("link_mbit", self.link_mbit)
        if self.target_device not in DEVICE_TABLE:
            raise ValueError(f"unknown target_device {self.target_device!r}; expected one of {', '.join(DEVICE_TABLE)}")
        if self.max_link_mbit is None:
            self.max_link_mbit = EMULATOR_MAX_MBIT.get(self.mtu, EMULATOR_MAX_MBIT[1500])
        if not isinstance(self.mtu, int) or not 576 <= self.mtu <= 65535:
            raise ValueError(f"mtu must be an integer in 576..65535, got {self.mtu!r}")
        if self.delay_ms < 0 or not self.max_link_mbit > 0:
            raise ValueError(f"delay_ms must be >= 0 and max_link_mbit > 0, got {self.delay_ms}, {self.max_link_mbit}")
        for s, k in self.configs():
            workers = self.nodes - k if s == "stanza" else self.nodes
            if self.global_batch % workers:
                raise ValueError(f"global_batch {self.global_batch} is not divisible by the {workers} data workers "
                                 f"of {s}{f' k={k}' if k else ''} on {self.nodes} nodes")

    def configs(self) -> list[tuple[str, int]]:
        return [(s, k) for s in self.strategies for k in (self.fc_workers if s == "stanza" else [0])]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------
# Cache


def code_fingerprint() -> str:
    """sha256 over the package's measuring code: engine, netem, bench, perf, this module and the
    timing rounds (not the notebooks' glue or the prediction code, which change nothing measured)."""
    h = hashlib.sha256(Path(__file__).read_bytes() + Path(timing.__file__).read_bytes())
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not rel.startswith(_NOT_MEASURING):
            h.update(rel.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


class Cache:
    """One JSON file per entry, named by the hash of its key; `root=None` caches nothing."""

    def __init__(self, root: str | Path | None):
        self.root = Path(root) if root else None
        self.fingerprint = code_fingerprint()
        self.reused: list[dict] = []
        self.measured = 0

    def _path(self, kind: str, key: dict) -> Path:
        digest = hashlib.sha256(json.dumps({**key, "code": self.fingerprint}, sort_keys=True).encode())
        return self.root / f"{kind}-{digest.hexdigest()[:20]}.json"

    def get(self, kind: str, key: dict):
        if self.root is None or not (path := self._path(kind, key)).is_file():
            return None
        entry = json.loads(path.read_text())
        if entry["key"] != key or entry["code"] != self.fingerprint:  # a hash collision: measure again
            return None
        self.reused.append({"kind": kind, "file": path.name, "measured_at": entry["measured_at"]})
        return entry["value"]

    def put(self, kind: str, key: dict, value) -> None:
        self.measured += 1
        if self.root is None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        entry = {"key": key, "code": self.fingerprint, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                 "value": value}
        tmp = self._path(kind, key).with_suffix(".tmp")
        tmp.write_text(json.dumps(entry))
        tmp.replace(self._path(kind, key))

    def report(self) -> dict[str, Any]:
        when = sorted(r["measured_at"] for r in self.reused)
        return {"dir": str(self.root) if self.root else None, "code": self.fingerprint, "measured": self.measured,
                "reused": len(self.reused), "reused_measured_at": [when[0], when[-1]] if when else None}


def cache_dir_for(cache_dir: str, out_dir: str) -> str | None:
    """The notebooks' `cache_dir` parameter: "auto" = `bench-cache` beside out_dir (shared by
    the notebooks of one reproduction run), "" = no cache, anything else = that folder."""
    if cache_dir == "auto":
        return str(Path(out_dir).resolve().parent / "bench-cache")
    return cache_dir or None


# ---------------------------------------------------------------------------------------------
# Measuring


def netem_unavailable() -> str | None:
    """None when the emulated cluster can run here, else the one-line reason."""
    from ..netem import missing_requirements

    missing = missing_requirements()
    return ("the emulated cluster needs Linux, root and iproute2; missing: " + ", ".join(missing)) if missing else None


class _LazyPool:
    """The timing pool, started the first time something needs timing (a fully cached bench
    starts no process)."""

    def __init__(self, stack: contextlib.ExitStack, spec: MeasureSpec):
        self.stack, self.spec, self.pool = stack, spec, None

    def __call__(self) -> timing.TimingPool:
        if self.pool is None:
            s = self.spec
            self.pool = self.stack.enter_context(timing.TimingPool(s.model, s.image_size, s.num_classes, s.nodes,
                                                                   reps=s.timing_reps))
        return self.pool


def _run_with_rounds(pool: timing.TimingPool, spec: MeasureSpec, strategy: str, k: int, mbit: float) -> dict:
    """One run on the emulated cluster, with its configuration's timing rounds taken just before
    and just after it (their mean): the compute the model is given saw the load the run saw."""
    need = sorted(set(timing.config_rounds(strategy, spec.nodes, k, spec.global_batch).values()),
                  key=lambda r: (-r[0], r[1]))
    before = pool.time(need)
    res = bench.run_bench(model=spec.model, image_size=spec.image_size, num_classes=spec.num_classes,
                          nodes=spec.nodes, strategies=[strategy], fc_workers=[k or 1],
                          global_batch=spec.global_batch, steps=spec.steps, warmup=spec.warmup, link_mbit=[mbit],
                          delay_ms=spec.delay_ms, mtu=spec.mtu, progress=False)
    return {**res["runs"][0], "timing_rounds": timing.mean_rounds(before, pool.time(need))}


def measure(spec: MeasureSpec, cache_dir: str | None = None, progress: bool = True) -> dict[str, Any]:
    """Timing rounds, bandwidth mapping and every run of `spec` (cached); a bench results dict.

    Without root/netem: prints one line and returns the dict with "unavailable" set and no runs."""
    if not isinstance(spec, MeasureSpec):
        raise ValueError(f"measure needs a MeasureSpec, got {type(spec).__name__}")
    out = {"spec": spec.to_dict(), "config": {**spec.to_dict(), "fc_workers": spec.fc_workers},
           "unavailable": netem_unavailable(), "calibration": None, "timing_rounds": [], "runs": [],
           "summary": [], "modelled_only_gbps": [], "cache": None}
    if out["unavailable"]:
        print(f"measured part skipped: {out['unavailable']}")
        return out
    cache = Cache(cache_dir)
    base = {"model": spec.model, "image_size": spec.image_size, "num_classes": spec.num_classes}
    with contextlib.ExitStack() as stack:
        pool = _LazyPool(stack, spec)
        # The rounds of every configuration and the one that maps targets to link rates, once.
        calib_round = (spec.nodes, spec.global_batch // spec.nodes)
        rounds = sorted(set(timing.rounds_needed(spec.configs(), spec.nodes, spec.global_batch)) | {calib_round},
                        key=lambda r: (-r[0], r[1]))
        keys = {r: {**base, "level": r[0], "batch": r[1], "reps": spec.timing_reps} for r in rounds}
        have = {r: cache.get("round", keys[r]) for r in rounds}
        missing = [r for r in rounds if have[r] is None]
        for r, got in zip(missing, pool().time(missing) if missing else []):
            cache.put("round", keys[r], got)
            have[r] = got
        out["timing_rounds"] = [have[r] for r in rounds]
        if spec.target_gbps is not None:
            here = have[calib_round]["step"]
            there = bench.target_step_s(spec.model, spec.image_size, spec.num_classes, calib_round[1],
                                        spec.target_device)
            out["calibration"] = {"batch_per_worker": calib_round[1], "t_step_here_s": here,
                                  "t_step_target_s": there, "target_device": spec.target_device,
                                  "ratio": there / here}
            points = [(g, g * 1000 * there / here) for g in spec.target_gbps]
            out["modelled_only_gbps"] = [g for g, m in points if m > spec.max_link_mbit]
            points = [(g, m) for g, m in points if m <= spec.max_link_mbit]
        else:
            points = [(None, m) for m in spec.link_mbit]
        todo = [(g, m, rep, s, k) for g, m in points for rep in range(spec.repeats) for s, k in spec.configs()]
        bar = None
        if progress:
            from tqdm import tqdm
            bar = tqdm(total=len(todo), desc="measured runs", unit="run")
        for g, mbit, rep, s, k in todo:
            key = {**base, "nodes": spec.nodes, "strategy": s, "fc_workers": k, "global_batch": spec.global_batch,
                   "steps": spec.steps, "warmup": spec.warmup, "link_mbit": round(mbit, 6),
                   "delay_ms": spec.delay_ms, "mtu": spec.mtu, "repeat": rep, "reps": spec.timing_reps}
            run = cache.get("run", key)
            if run is None:
                run = _run_with_rounds(pool(), spec, s, k, mbit)
                cache.put("run", key, run)
            out["runs"].append({**run, "target_gbps": g, "repeat": rep})
            if bar:
                bar.set_postfix_str(f"{s}{f' k={k}' if k else ''} @ {mbit:.1f} Mbit/s")
                bar.update(1)
        if bar:
            bar.close()
    out["summary"] = bench.summarize(out["runs"]) if out["runs"] else []
    out["cache"] = cache.report()
    if cache.reused:
        c = out["cache"]
        print(f"reused {c['reused']} cached measurements from {c['dir']} (measured {c['reused_measured_at'][0]}"
              f" .. {c['reused_measured_at'][1]}, same parameters and code); delete the folder to measure afresh")
    return out


def bench_from_metrics(paths: list[str], *, link_mbit: float, mtu: int = 1500,
                       target_gbps: float | None = None) -> dict[str, Any]:
    """A bench results dict from metrics JSONs of runs made elsewhere (e.g. one torchrun per GPU
    node with --device cuda), so the notebooks can plot and model them. All runs must share
    model, image size, classes, cluster size, global batch and steps; `link_mbit` is the
    network's rate in Mbit/s (per node and direction). No timing rounds: measure them on the
    machines that ran the jobs to compare predictions (validation.measure_rounds_for)."""
    if not paths:
        raise ValueError("bench_from_metrics needs at least one metrics JSON")
    runs, first = [], None
    for path in paths:
        m = json.loads(Path(path).read_text())
        c = m["config"]
        same = {k: c[k] for k in ("model", "image_size", "num_classes", "world_size", "global_batch", "steps",
                                  "warmup")}
        if first is None:
            first = same
        elif same != first:
            raise ValueError(f"{path}: config {same} differs from the first run's {first}")
        runs.append({"strategy": c["strategy"], "fc_workers": c.get("fc_workers_effective") or 0,
                     "target_gbps": target_gbps, "link_mbit": float(link_mbit), "repeat": 0,
                     "throughput": m["throughput"], "step_time_median_s": m["step_time_median_s"],
                     "bytes_per_step": m["bytes_per_step"], "ranks": m["ranks"], "device_type": c.get("device_type")})
    reps: dict[tuple, int] = {}
    for r in runs:  # repeated configurations count as repeats
        key = (r["strategy"], r["fc_workers"])
        r["repeat"] = reps[key] = reps.get(key, -1) + 1
    config = {"model": first["model"], "image_size": first["image_size"], "num_classes": first["num_classes"],
              "nodes": first["world_size"], "global_batch": first["global_batch"], "steps": first["steps"],
              "warmup": first["warmup"], "mtu": mtu, "delay_ms": 0.0,
              "strategies": sorted({r["strategy"] for r in runs}),
              "fc_workers": sorted({r["fc_workers"] for r in runs if r["fc_workers"]})}
    return {"spec": config, "config": config, "unavailable": None, "calibration": None, "timing_rounds": [],
            "runs": runs, "summary": bench.summarize(runs), "modelled_only_gbps": [], "cache": None}
