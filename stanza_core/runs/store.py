"""The store of measured configurations: one JSON file per replayed configuration under
`benchmarks/results/full/`, committed, reused by every later run on any machine.

    MEASUREMENT_VERSION                    the one number that decides whether a stored run is valid
    points(spec) -> [Point]                the configurations of a replayed MeasureSpec, in run order
    Store(root).get(point) -> entry | None a stored entry of the current version, else None
    Store(root).put(point, plan=..., config=..., run=..., seconds=...)  write one entry
    Store(root).latest() -> [entry]        each configuration's newest entry, any version (reports)

A Point is a configuration before its plan is resolved: the RunConfig at the grid's placeholder
rate (link 1000 Mbit/s, D = 1), the target bandwidth, how its D is chosen (its spec's
dilation_rule.DilationRule: the smallest D, whether the engine term may raise it), and the
repeat. Its key is what the store is keyed by: the plan's dilation and link rates are resolved
on the measuring machine (the engine seconds are measured there, runs.plan.replayed_plan) and
are stored in the entry, not in the key, so a configuration measured on one machine is found on
another.

An entry holds: version, key, the resolved plan (RunPlan.row() and its RunConfig), the run's
summary row (measurement.summarize), the Measurement row itself (what run.measure returns for
it), and when and where it was measured (host, CPUs, load average before and after, seconds).

Validity is decided by MEASUREMENT_VERSION alone, not by a fingerprint of source files: a stored
entry of another version is neither reused nor counted as stored. It stays in the folder until
its configuration is measured again, and reports (Store.latest) show it with its version.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import atomic
from .dilation_rule import DilationRule
from .plan import replay_link
from .measurement import summarize

if TYPE_CHECKING:
    from .runconfig import RunConfig
    from .spec import MeasureSpec

# Bump by hand, here and only here, when the measuring code changes in a way that changes what a
# replayed run measures (the engine's messages or waits, the emulator's shaping, the dilation
# rule, the run row's meaning). Every stored entry of an older version is then measured again.
# Changes that measure the same thing (refactors, figures, reports) leave it as it is.
#   1: the first store (87 configurations, 72 of them time a single step; when: lab/LOG.md).
#   2: a stored run times at least MIN_TIMED_STEPS steps. The step-to-step spread of replayed
#      runs, measured on 11 stored configurations with 5 timed steps each (benchmarks/grid_spread.py,
#      benchmarks/results/grid_spread.json), is over 1 % in 6 of 11 (median 1.32 %, worst 7.29 %),
#      so one timed step is not a figure to 1 %. The full grid's parameter sets time 3 steps.
#   3: payload scaling (a replayed run sends 1/F of every message on links shaped to 1/F, F and
#      D by runs.plan's rules; the token bucket scaled with F) and the V100 row v3 (compute model
#      v3, fitted to DeepBench's V100 kernels; version 1 and 2 runs used the row now named v100-v2).
#   4: a scaled link's queue holds txqueuelen / F packets (netem.cluster.scaled_queue_packets);
#      the one version 3 entry (VGG-16 N=16 ps @ 100 Gb/s) was measured with the unscaled queue.
MEASUREMENT_VERSION = 4
MIN_TIMED_STEPS = 3  # steps - warmup of a stored run, from version 2 on

STORE_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "full"


@dataclasses.dataclass(frozen=True)
class Point:
    """One configuration of the grid before its plan is resolved (the module docstring)."""

    config: RunConfig  # at link_mbit 1000 and D = 1: what the plan starts from
    target_gbps: float
    dilation_rule: DilationRule  # the smallest D and the engine term (MeasureSpec.dilation_rule)
    repeat: int = 0

    def key(self) -> dict[str, Any]:
        """The store's key: every field of the configuration but its placeholder rate and D, the
        target, the floor of D (the links' floor or the rule's, whichever is larger: what the
        plan starts from, the same however a notebook states it), the engine term, the repeat."""
        c, rule = self.config, self.dilation_rule
        cfg = {k: v for k, v in c.cache_key().items() if k not in ("link_mbit", "dilation")}
        floor = replay_link(self.target_gbps, c.cluster_nodes, mtu=c.mtu, min_dilation=rule.floor,
                            ps_servers=c.ps_servers).dilation
        return {**cfg, "target_gbps": float(self.target_gbps), "dilation_floor": float(floor),
                "engine": rule.engine, "repeat": int(self.repeat)}

    @property
    def name(self) -> str:
        """The entry's file name: readable (model, N, configuration, target, repeat) and unique
        (a digest of the whole key)."""
        c = self.config
        digest = hashlib.sha256(json.dumps(self.key(), sort_keys=True).encode()).hexdigest()[:10]
        rep = f"-r{self.repeat}" if self.repeat else ""
        device = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in str(c.replay_device))
        return f"{c.model}-n{c.nodes}-{c.key}-{self.target_gbps:g}g-{device}{rep}-{digest}.json"

    @property
    def label(self) -> str:
        c = self.config
        rep = f", repeat {self.repeat}" if self.repeat else ""
        return f"{c.model} N={c.nodes} {c.label} @ {self.target_gbps:g} Gb/s ({c.replay_device}{rep})"


def points(spec: MeasureSpec) -> list[Point]:
    """The Points of a replayed spec in the order run.measure runs them (every configuration at
    every target, then the next repeat): the order of MeasureSpec.plans."""
    if not spec.replayed:
        raise ValueError("the store holds replayed configurations only (real compute maps its link "
                         "rates from this machine's own timing rounds)")
    cfgs = [dataclasses.replace(spec.run_config(v), dilation=1.0) for v in spec.variants()]
    return [Point(cfg, float(g), spec.dilation_rule, rep)
            for rep in range(spec.repeats) for g in spec.target_gbps for cfg in cfgs]


def configuration(key: dict[str, Any]) -> dict[str, Any]:
    """A store key without its step counts: the configuration whatever steps a version timed."""
    return {k: v for k, v in key.items() if k not in ("steps", "warmup")}


def configuration_id(key: dict[str, Any]) -> str:
    """configuration(key) as one hashable string (equal for the versions of one configuration)."""
    return json.dumps(configuration(key), sort_keys=True)


def timed_steps(point: Point) -> int:
    return point.config.steps - point.config.warmup


def check_timed_steps(point: Point) -> None:
    """A ValueError unless `point` times at least MIN_TIMED_STEPS steps (version 2's rule)."""
    if timed_steps(point) < MIN_TIMED_STEPS:
        c = point.config
        raise ValueError(f"{point.label} times {timed_steps(point)} step(s) ({c.steps} steps, {c.warmup} warm-up); "
                         f"a stored run times at least {MIN_TIMED_STEPS} (measurement version {MEASUREMENT_VERSION})")


def host() -> dict[str, Any]:
    """Where a run is measured: host name, CPUs, platform, load average now."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"host": socket.gethostname(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "loadavg": list(load) if load else None}


class Store:
    """One JSON file per configuration under `root` (the module docstring); `get` counts what it reused."""

    def __init__(self, root: str | os.PathLike = STORE_DIR, version: int = MEASUREMENT_VERSION):
        self.root = Path(root)
        self.version = version
        self.reused: list[str] = []
        self._entries: list[dict[str, Any]] | None = None

    def path(self, point: Point) -> Path:
        return self.root / point.name

    def read(self, point: Point) -> dict[str, Any] | None:
        """The stored entry of `point` whatever its version (None: no file for it)."""
        path = self.path(point)
        if not path.is_file():
            return None
        entry = json.loads(path.read_text())
        return entry if entry.get("key") == point.key() else None  # a digest collision: not this point

    def get(self, point: Point) -> dict[str, Any] | None:
        """The entry of `point` if stored at the current version, else None."""
        entry = self.read(point)
        if entry is None or entry.get("version") != self.version:
            return None
        self.reused.append(point.name)
        return entry

    def status(self, point: Point) -> str:
        """"stored" (current version), "old" (only another version holds this configuration, at
        this key or with other step counts: to measure again) or "missing"."""
        entry = self.read(point)
        if entry is not None and entry.get("version") == self.version:
            return "stored"
        return "old" if entry is not None or self.older(point) is not None else "missing"

    def entries(self) -> list[dict[str, Any]]:
        """Every entry in the folder, whatever its version, each with its file name under "file"
        (read once per Store)."""
        if self._entries is None:
            self._entries = [{**json.loads(p.read_text()), "file": p.name} for p in sorted(self.root.glob("*.json"))]
        return self._entries

    def older(self, point: Point) -> dict[str, Any] | None:
        """The newest entry of an older version that measured `point`'s configuration (its key
        but for the step counts, which version 2 raised), or None."""
        ident = configuration(point.key())
        old = [e for e in self.entries() if e.get("version", 0) < self.version and configuration(e["key"]) == ident]
        return max(old, key=lambda e: e["version"]) if old else None

    def latest(self) -> list[dict[str, Any]]:
        """Each configuration's newest entry (the current version's where it is stored, else the
        newest older one), in file order: what reports show, each with its version."""
        best: dict[str, dict[str, Any]] = {}
        for e in self.entries():
            ident = configuration_id(e["key"])
            if ident not in best or e.get("version", 0) > best[ident].get("version", 0):
                best[ident] = e
        return list(best.values())

    def put(self, point: Point, *, plan: dict[str, Any], config: dict[str, Any], run: dict[str, Any],
            seconds: float, load_before: list[float] | None = None) -> Path:
        """Write `point`'s entry: the resolved plan (RunPlan.row) and RunConfig, the Measurement row
        `run`, its summary row, and when and where it was measured (`seconds`: the wall time it
        took, engine seconds and cluster set-up included)."""
        check_timed_steps(point)
        where = host()
        entry = {"version": self.version, "key": point.key(), "label": point.label, "plan": plan, "config": config,
                 "summary": summarize([run])[0], "run": run,
                 "measured": {"at": time.strftime("%Y-%m-%d %H:%M:%S %z"), "seconds": round(seconds, 1),
                              **{k: v for k, v in where.items() if k != "loadavg"},
                              "loadavg_before": load_before, "loadavg_after": where["loadavg"]}}
        path = self.path(point)
        atomic.write_text(path, json.dumps(entry, indent=1, sort_keys=True) + "\n")
        self._entries = None
        return path

    def report(self) -> dict[str, Any]:
        return {"dir": str(self.root), "version": self.version, "reused": len(self.reused)}
