"""benchmarks/full_grid_table.py: the store's table, bytes judged against perf.expected_bytes."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "benchmarks" / "results" / "full"


def _table():
    spec = importlib.util.spec_from_file_location("full_grid_table", ROOT / "benchmarks" / "full_grid_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_stored_configuration_moved_the_models_bytes():
    rs = _table().rows(STORE)
    assert len(rs) >= 39
    off = [(r["label"], r["bytes_per_step"], r["expected_bytes_per_step"]) for r in rs
           if r["bytes_per_step"] != r["expected_bytes_per_step"]]
    assert off == []


def test_a_run_whose_bytes_differ_is_marked(tmp_path, capsys):
    src = next(STORE.glob("alexnet-n16-ps_S1-*.json"))
    entry = json.loads(src.read_text())
    entry["run"]["bytes_per_step"] += 4  # one float more than the model says
    (tmp_path / src.name).write_text(json.dumps(entry))
    shutil.copy(next(STORE.glob("alexnet-n16-ddp-*.json")), tmp_path)
    assert _table().main(["--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| NO |" in out and out.count("| yes |") == 1
    assert "bytes per step differ from perf.expected_bytes in 1 of 2: alexnet N=16 ps S=1 @ 10 Gb/s (v100)" in out
