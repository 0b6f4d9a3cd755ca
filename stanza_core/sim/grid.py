"""The full grid, simulated: every replayed configuration of the `full` parameter sets
(reproduce/grid.py's 125 points) timed on SimGrid at SIM_VERSION, one JSON file per point in
benchmarks/results/sim/ (the point's store name), beside the emulated store.

    python -m stanza_core.sim grid [--list] [--points "*N=16*"]

A simulated entry holds: sim_version, the point's key and label, the platform, the per-step
times, the timed median, per-rank busy and exposed communication, per-link bytes, the logical
bytes per step, and the wall seconds the simulation took. An entry of another SIM_VERSION is
simulated again. per_message_s is the value fitted by the validation (validation.FITTED_FILE).
"""
from __future__ import annotations

import fnmatch
import json
import time
from pathlib import Path
from typing import Any

from .. import atomic
from .run import SIM_VERSION, simulate

ROOT = Path(__file__).resolve().parents[2]
SIM_STORE = ROOT / "benchmarks" / "results" / "sim"
FITTED_FILE = ROOT / "benchmarks" / "results" / "sim_validation.json"
SIM_STEPS = 3


def fitted_per_message_s() -> float:
    """The validation's fitted per-message cost (0 if the validation was never run)."""
    if not FITTED_FILE.is_file():
        return 0.0
    return float(json.loads(FITTED_FILE.read_text())["fitted"]["value"])


def grid_points():
    from ..reproduce.grid import grid  # papermill (~470 modules): only when the grid is listed or run
    from ..reproduce.spec import REPO_ROOT, load_specs  # with reproduce.grid: jsonschema, yaml

    return grid(load_specs(REPO_ROOT / "reproductions"), "full")


def read(point, root: Path = SIM_STORE) -> dict[str, Any] | None:
    """The simulated entry of `point` at the current SIM_VERSION, else None."""
    path = root / point.name
    if not path.is_file():
        return None
    entry = json.loads(path.read_text())
    if entry.get("sim_version") != SIM_VERSION or entry.get("key") != point.key():
        return None
    return entry


def run(points, root: Path = SIM_STORE, *, say=print) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    alpha = fitted_per_message_s()
    t0, done, failed = time.monotonic(), [], []
    for i, gp in enumerate(points, 1):
        pt = gp.point
        if read(pt, root) is not None:
            continue
        t = time.monotonic()
        try:
            out = simulate(pt.config, pt.target_gbps, per_message_s=alpha, steps=SIM_STEPS)
        except (RuntimeError, ValueError) as e:
            failed.append(f"{pt.label}: {str(e).splitlines()[0]}")
            say(f"[{i}/{len(points)}] {pt.label}: failed: {failed[-1]}")
            continue
        entry = {"sim_version": SIM_VERSION, "key": pt.key(), "label": pt.label, "experiments": gp.experiments,
                 "per_message_s": alpha, "seconds": round(time.monotonic() - t, 2), **out}
        atomic.write_text(root / pt.name, json.dumps(entry, indent=1, sort_keys=True) + "\n")
        done.append(pt.name)
        say(f"[{i}/{len(points)}] {pt.label}: {out['step_s'] * 1e3:.2f} ms simulated in {entry['seconds']:.1f} s")
    return {"simulated": len(done), "failed": failed, "seconds": time.monotonic() - t0}


def listing(points, root: Path = SIM_STORE) -> str:
    have = sum(1 for gp in points if read(gp.point, root) is not None)
    return (f"simulated: {have} of {len(points)} grid configurations at simulator version {SIM_VERSION} "
            f"({root.relative_to(ROOT)}; python -m stanza_core.sim grid)")


def select(points, pattern: str | None):
    return points if pattern is None else [gp for gp in points if fnmatch.fnmatchcase(gp.point.label, pattern)]
