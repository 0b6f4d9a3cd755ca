"""benchmarks/grid_spread.py: the spread statistics, the default set chosen from the real store,
and the refusal to overwrite. Measures nothing (no network namespaces)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gs():
    spec = importlib.util.spec_from_file_location("grid_spread", ROOT / "benchmarks" / "grid_spread.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up there
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


def test_spread_over_one_percent_is_flagged_and_one_below_is_not(gs):
    noisy = gs.spread_stats([10.0, 10.3, 10.1, 9.95, 10.05])  # (10.3 - 9.95) / 10.05 = 3.5 %
    quiet = gs.spread_stats([10.0, 10.02, 10.01, 9.99, 10.0])  # (10.02 - 9.99) / 10.0 = 0.3 %
    assert noisy["median_s"] == 10.05 and noisy["min_s"] == 9.95 and noisy["max_s"] == 10.3
    assert noisy["spread"] == pytest.approx(0.35 / 10.05)
    assert quiet["spread"] == pytest.approx(0.003)
    assert noisy["over"] and not quiet["over"]
    assert 0 < quiet["cv"] < noisy["cv"] < noisy["spread"]
    recs = [{"label": "noisy", **noisy}, {"label": "quiet", **quiet}, {"label": "broken", "error": "JobError: x"}]
    s = gs.summary(recs)
    assert (s["measured"], s["failed"], s["over_threshold"], s["over_labels"]) == (2, 1, 1, ["noisy"])
    assert s["worst_label"] == "noisy" and s["worst_spread"] == pytest.approx(noisy["spread"])
    assert s["median_spread"] == pytest.approx((noisy["spread"] + quiet["spread"]) / 2)
    assert gs.spread_stats([5.0])["cv"] is None  # one timed step: no standard deviation


def test_default_set_is_varied_stored_and_within_budget(gs):
    store = gs.Store()
    cands = gs.from_store(store, 5)
    assert len(cands) >= 40  # the committed store (87 entries at version 1 when this was written)
    chosen = gs.choose(cands, 8, 40 * 60)
    names = [c.point.name for c in chosen]
    assert len(chosen) >= 8 and len(set(names)) == len(names)
    assert all((store.root / n).is_file() for n in names)
    assert len({c.point.config.strategy for c in chosen}) >= 3
    kinds = {c.features()["kind"] for c in chosen}
    assert {c.features()["kind"] for c in cands} == kinds  # every kind of configuration stored
    assert {c.point.config.model for c in chosen} == {c.point.config.model for c in cands}
    assert len({c.point.target_gbps for c in chosen}) >= 3
    assert sum(c.estimate_s for c in chosen) <= 40 * 60
    assert [c.estimate_s for c in chosen] == sorted(c.estimate_s for c in chosen)  # cheapest first


def test_configs_pattern_and_a_plan_that_is_the_stored_one(gs):
    cands = gs.from_store(gs.Store(), 5)
    got = gs.by_pattern(cands, "alexnet N=4 ps @ 10 Gb/s*")
    assert [c.label for c in got] == ["alexnet N=4 ps @ 10 Gb/s (v100)"]
    assert gs.by_pattern(cands, got[0].point.name[:-5]) == got  # by the store's file name
    with pytest.raises(ValueError, match="matches none"):
        gs.by_pattern(cands, "resnet*")
    plan, today = gs.stored_plan(got[0], 5)
    stored = got[0].entry["plan"]
    assert plan.dilation == stored["dilation"] and plan.link.wire_mbit == stored["link_mbit"]
    assert plan.config.steps == got[0].entry["config"]["warmup"] + 5
    assert plan.config.warmup == got[0].entry["config"]["warmup"]
    # stored with whole messages (F = 1); today's rule with the stored engine seconds alone does not
    # know the configuration's messages, so it keeps them whole too, and plans the stored D
    assert stored.get("payload_scale", 1) == 1 and plan.link.payload_scale == 1
    assert today["payload_scale"] == 1 and today["same"]


def test_refuses_to_overwrite_or_to_write_into_the_store(gs, tmp_path, capsys):
    out = tmp_path / "spread.json"
    out.write_text(json.dumps({"saved": "by a user"}))
    assert gs.main(["--out", str(out), "--configs", "alexnet*"]) == 2
    assert "exists" in capsys.readouterr().err
    assert json.loads(out.read_text()) == {"saved": "by a user"}
    with pytest.raises(ValueError, match="inside the store"):
        gs.check_out(gs.STORE_DIR / "x.json", True)
    gs.check_out(out, True)  # --overwrite: allowed
