"""The measured-runs cache shared by notebooks 03-07 and the bench.

Every timing round and every run is stored as one JSON file under the cache folder, keyed by
every parameter that determines it and by a fingerprint of the code that measures it, so
notebooks asking for the same run share it and a changed parameter or engine never reuses an
old one. What was reused is printed and recorded in the results (`Cache.report`).

This cache is local (reproductions/out/bench-cache). The full grid's replayed runs are kept in
the committed store (runs.store), whose validity is its MEASUREMENT_VERSION, not this
fingerprint; run.measure reads the store before this cache.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from .. import atomic

PACKAGE = Path(__file__).resolve().parents[1]
# What a measured run depends on: everything but the figures, the report and the notebook glue
# (the experiments' own measuring modules are added back by name below).
_NOT_MEASURING = ("viz", "reproduce", "nbtools.py", "widgets.py", "labels.py", "experiments/")
_MEASURING = ("runs/spec.py", "runs/runconfig.py", "runs/cache.py", "runs/run.py",
              "runs/compute_rounds.py", "runs/plan.py")


def code_fingerprint() -> str:
    """sha256 over the package's measuring code: engine, netem, perf, the bench and the
    experiments' measuring modules (not the notebooks' glue or the prediction code, which change
    nothing measured)."""
    h = hashlib.sha256()
    for rel in _MEASURING:
        h.update(rel.encode() + b"\0" + (PACKAGE / rel).read_bytes())
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
        entry = {"key": key, "code": self.fingerprint, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                 "value": value}
        atomic.write_text(self._path(kind, key), json.dumps(entry))

    def run_or_cached(self, p, repeat: int, run, **key_extra: Any) -> dict[str, Any]:
        """The row of one run of plan `p` (a RunPlan): from this cache (keyed by the plan, the
        repeat and `key_extra`), or `run()` and kept; the row carries its plan's values (p.row())."""
        key = p.cache_key(repeat=repeat, **key_extra)
        got = self.get("run", key)
        if got is None:
            got = run()
            self.put("run", key, got)
        return {**got, **p.row(), "repeat": repeat}

    def report(self) -> dict[str, Any]:
        when = sorted(r["measured_at"] for r in self.reused)
        return {"dir": str(self.root) if self.root else None, "code": self.fingerprint, "measured": self.measured,
                "reused": len(self.reused), "reused_measured_at": [when[0], when[-1]] if when else None}

    def say_reused(self) -> None:
        if self.reused:
            c = self.report()
            print(f"reused {c['reused']} cached measurements from {c['dir']} (measured {c['reused_measured_at'][0]}"
                  f" .. {c['reused_measured_at'][1]}, same parameters and code); delete the folder to measure afresh")


def cache_dir_for(cache_dir: str, out_dir: str) -> str | None:
    """The notebooks' `cache_dir` parameter: "auto" = `bench-cache` beside out_dir (shared by
    the notebooks of one reproduction run), "" = no cache, anything else = that folder."""
    if cache_dir == "auto":
        return str(Path(out_dir).resolve().parent / "bench-cache")
    return cache_dir or None
