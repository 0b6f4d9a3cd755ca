"""The paper's parameter server made explicit (experiments.paper_ps): an assumption's checks and
label, the PS it predicts, the rule that chooses the stated set, and that the set
reproductions/bandwidth_sweep.yaml states is the one the rule picks with today's compute model.
Modelled only (perf.predict): a few seconds."""
import json
from pathlib import Path

import pytest
import yaml

from stanza_core.experiments import paper_ps
from stanza_core.experiments.paper_ps import SHARDED, PsAssumption, Speedups, choose
from stanza_core.perf import Cluster, device_profile, named_profile, predict
from stanza_core.variant import Variant

SWEEP_YAML = Path(__file__).resolve().parents[2] / "reproductions" / "bandwidth_sweep.yaml"


@pytest.mark.parametrize("change, message", [
    ({"server_share": 1.5}, "server_share must be at most 1"),
    ({"placement": "remote"}, "placement"),
    ({"goodput": 1.2}, "goodput must be a share of the line rate"),
    ({"batch_per_worker": 0}, "batch_per_worker"),
])
def test_a_bad_assumption_is_one_line(change, message):
    with pytest.raises(ValueError, match=message) as e:
        PsAssumption(**{"server_share": 0.5, "placement": "dedicated", **change})
    assert "\n" not in str(e.value)


def test_label_variant_and_what_the_engine_runs():
    a = PsAssumption(server_share=0.5, placement="dedicated", batch_per_worker=16)
    assert a.label == "S = N/2 dedicated beside the N workers, blocking push, 16 samples per worker, line rate"
    assert a.servers(16) == 8 and a.servers(4) == 2
    assert a.variant(16).label == "ps S=8" and SHARDED.variant(16).label == "ps"
    colocated_half = PsAssumption(server_share=0.5, placement="colocated")
    assert not colocated_half.runnable
    with pytest.raises(ValueError, match="no colocated S < N"):
        colocated_half.variant(16)


def test_the_ps_it_predicts():
    """Dedicated: S servers beside the N workers (N + S nodes); colocated: S shards on N; goodput
    scales every link, stanza's too."""
    prof = named_profile("alexnet")
    dev = device_profile("v100", prof, 16).profile
    a = PsAssumption(server_share=0.5, placement="dedicated", batch_per_worker=16, goodput=0.5)
    got = paper_ps.ps_prediction(prof, a, 16, 100.0)
    want = predict(prof, Cluster(24, 50.0, device=dev), Variant("ps", ps_servers=8), batch_per_worker=16, with_ranks=False)
    assert got.iteration_s == want.iteration_s and got.global_batch == 256
    col = paper_ps.ps_prediction(prof, PsAssumption(server_share=0.25, placement="colocated", batch_per_worker=16), 16,
                                 100.0)
    assert col.ps_shards == 4 and col.nodes == 16


def _row(share, placement, alexnet, vgg16):
    a = PsAssumption(server_share=share, placement=placement)
    return {"assumption": a.to_dict(), "alexnet": alexnet, "vgg16": vgg16,
            "both": paper_ps.both_hold({"alexnet": alexnet, "vgg16": vgg16})}


def test_the_rule_takes_the_first_runnable_set_where_both_figures_hold_else_the_nearest():
    rows = [_row(1.0, "colocated", 0.8, 1.0),  # the sharded baseline: neither holds
            _row(0.5, "colocated", 1.5, 1.7),  # both hold, but the engine's Variant cannot run it
            _row(0.5, "dedicated", 1.6, 2.0),  # VGG-16 outside 1.72 +- 0.25
            _row(0.375, "dedicated", 1.7, 1.8),  # the pick
            _row(0.25, "dedicated", 1.55, 1.72)]  # closer, but later in the order
    assert choose(rows) == PsAssumption(server_share=0.375, placement="dedicated")
    # none holds: the runnable set whose worse figure is nearest (0.28 off, not the sharded 0.75;
    # the colocated S = N/2 is nearer still but not runnable)
    assert choose(rows[:3]) == PsAssumption(server_share=0.5, placement="dedicated")
    assert choose([rows[1]]) is None


def _stated() -> PsAssumption:
    """reproductions/bandwidth_sweep.yaml's paper_ps_* (every mode alike)."""
    d = yaml.safe_load(SWEEP_YAML.read_text())
    sets = [PsAssumption(server_share=d[m]["paper_ps_share"], placement=d[m]["paper_ps_placement"],
                         overlap=d[m]["paper_ps_overlap"], batch_per_worker=d[m]["paper_ps_batch"],
                         goodput=d[m]["paper_ps_goodput"]) for m in ("quick", "full", "tiny")]
    assert sets[0] == sets[1] == sets[2]
    claims = {c["ours"]: c for c in d["claims"]}
    assert claims["paper_ps.at_100.alexnet.stated"]["ps"].startswith(sets[0].label.replace(
        "dedicated beside", "dedicated servers beside"))
    return sets[0]


@pytest.fixture(scope="module")
def section():
    """paper_ps_report.results under the stated set, without the 10 Gb/s range: the whole search
    (576 predictions, each device row priced once: a second or two) once for the module."""
    from stanza_core.experiments import paper_ps_report

    return paper_ps_report.results(_stated(), range_10=False)


def test_the_stated_set_is_the_rules_pick_with_todays_compute_model(section):
    """When the compute model changes, the set must be chosen again by the same rule."""
    assert section["rule_picks_stated"] == 1 and section["rule_pick"] == _stated().label


def test_the_section_results_and_figures(section):
    """The decomposition adds up to each step, the sharded column is the workbench's baseline, the
    replay names the stated PS, the figures build."""
    from stanza_core.perf import best_assignment

    r = section
    assert len(r["search"]) == len(paper_ps.grid())
    for m, bars in r["decomposition"].items():
        assert [b["set"] for b in bars] == ["sharded", "sharded", "stated", "stated"]
        for b in bars:
            assert b["critical_compute_s"] + b["exposed_comm_s"] == pytest.approx(b["step_s"], rel=1e-12)
    prof = named_profile("alexnet")
    a = best_assignment(prof, Cluster(16, 100.0, device=device_profile("v100", prof, 32).profile), batch_per_worker=32)
    assert r["at_100"]["alexnet"]["sharded"] == pytest.approx(a.best_stanza().throughput / a.ps.throughput, rel=1e-12)
    assert [x["ps"] for x in r["replay"]] == [_stated().variant(16).label] * 2 and "range_10" not in r
    pytest.importorskip("plotly")
    from stanza_core.viz import paper_ps_figures

    assert set(paper_ps_figures(r)) == {"ps_decomposition", "ps_sweep", "ps_region"}


def _replay_row(model, strategy, sps, predicted_sps, **kw):
    base = {"model": model, "nodes": 16, "target_gbps": 100.0, "batch_per_worker": 16, "strategy": strategy,
            "fc_workers": 0, "ps_servers": 0, "ps_overlap": False, "label": strategy, "dilation": 3200.0,
            "link_mbit": 31.5, "target_steps_s": [0.1, 0.1, 0.1], "target_step_s": 0.1, "predicted_step_s": 0.1,
            "error": 0.0, "target_samples_per_s": sps, "predicted_samples_per_s": predicted_sps,
            "bytes_per_step": 1, "expected_bytes_per_step": 1}
    return {**base, **kw}


def test_the_committed_replay_is_read_under_the_stated_ps_only(tmp_path):
    from stanza_core.experiments.paper_ps_report import replayed
    stated = PsAssumption(server_share=1.0, placement="dedicated", batch_per_worker=16)
    runs = [_replay_row("alexnet", "ps", 1000.0, 1100.0, ps_servers=16),
            _replay_row("alexnet", "ps", 5000.0, 5000.0),  # colocated: another PS, never the stated one's
            _replay_row("alexnet", "ps", 9000.0, 9000.0, ps_servers=16, batch_per_worker=32),  # another batch
            _replay_row("alexnet", "stanza", 1800.0, 2200.0, fc_workers=1),
            _replay_row("alexnet", "stanza", 1500.0, 2000.0, fc_workers=2),
            _replay_row("alexnet", "stanza", 9000.0, 9000.0, fc_workers=1, fc_batch=4),  # hybrid: not the paper's stanza
            _replay_row("vgg16", "stanza", 800.0, 800.0, fc_workers=2)]  # vgg16's ps not replayed
    path = tmp_path / "replay.json"
    path.write_text(json.dumps({"runs": runs}))
    out = replayed(str(path), stated)
    a = out["by_model"]["alexnet"]
    assert (a["stanza_k"], a["ps_run"]["target_samples_per_s"]) == (1, 1000.0)
    assert a["speedup_replayed"] == pytest.approx(1.8) and a["speedup_modelled"] == pytest.approx(2.0)
    assert a["speedup_error"] == pytest.approx(-0.1)
    assert out["by_model"]["vgg16"] == {"missing": f"ps not replayed under this PS ({stated.label}) at N = 16"}
    assert all("missing" in v for v in replayed("", stated)["by_model"].values())
