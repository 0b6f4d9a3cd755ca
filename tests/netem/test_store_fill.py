"""The full grid's store, for real: one small replayed configuration measured on the emulated
cluster into a store folder, then read back by run.measure without measuring anything."""
import json

import pytest

from stanza_core.runs import run
from stanza_core.runs.dilation_rule import DilationRule
from stanza_core.runs.spec import MeasureSpec
from stanza_core.runs.store import MEASUREMENT_VERSION, Store, points
from stanza_core.reproduce import grid


@pytest.mark.slow  # one emulated run of two ranks and its engine-seconds run: ~15 s
def test_a_replayed_configuration_is_measured_into_the_store_and_reused(netem_host, tmp_path, monkeypatch):
    spec = MeasureSpec(model="tiny_cnn", image_size=16, num_classes=10, nodes=2, strategies=["ddp"], fc_workers=[1],
                       batch_per_worker=2, steps=4, target_gbps=[10.0], compute="replay", replay_device="v100",
                       dilation_rule=DilationRule(engine=True))
    st = Store(tmp_path / "full")
    gps = [grid.GridPoint(p, ["fixture"]) for p in points(spec)]
    got = grid.fill(gps, st, grid.measure_point(tmp_path / "cache"), budget_s=600)
    (name,) = got["measured"]
    entry = json.loads((st.root / name).read_text())
    assert entry["version"] == MEASUREMENT_VERSION and entry["key"] == gps[0].point.key()
    row, plan = entry["run"], entry["plan"]
    # the run ran at its plan's rate and D, and its summary is what measure's would be
    assert row["link_mbit"] == pytest.approx(plan["link_mbit"], rel=1e-6) and row["dilation"] == plan["dilation"] > 1
    assert row["throughput"] > 0 and entry["summary"]["target_throughput"] == pytest.approx(
        row["throughput"] * plan["dilation"])
    assert entry["config"]["dilation"] == plan["dilation"] and entry["measured"]["seconds"] > 0
    lst = grid.listing(gps, Store(st.root))
    assert (lst["stored"], lst["missing"]) == (1, 0) and lst["measured_over_estimate"] > 0
    # a notebook's measure on a machine without the emulator: the stored run, nothing measured
    monkeypatch.setattr(run, "netem_unavailable", lambda: "no emulator")
    m = run.measure(spec, str(tmp_path / "other-cache"), progress=False, store_dir=st.root)
    assert m.runs == [row] and m.cache["store"]["reused"] == 1 and m.cache["measured"] == 0
