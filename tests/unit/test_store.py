"""The store of measured configurations (benchmarks/results/full) and the full grid filled within
a budget, without running anything: a fake measure function and a fake clock stand in for the
emulated cluster."""
import dataclasses
import json

import pytest

from stanza_core.runs import replayed, run
from stanza_core.runs.dilation_rule import DilationRule
from stanza_core.runs.spec import MeasureSpec
from stanza_core.runs.store import MEASUREMENT_VERSION, Point, Store, points
from stanza_core.launch import JobError
from stanza_core.reproduce import grid
from stanza_core.reproduce import main as reproduce_main


def _spec(**kw) -> MeasureSpec:
    """AlexNet at 224 px on 4 replayed nodes at 10 and 100 Gb/s: ps, ddp, stanza k=1 (a ReplaySet's),
    3 timed steps (runs.store.MIN_TIMED_STEPS)."""
    s = replayed.ReplaySet(**{"models": ["alexnet"], "nodes": [4], "strategies": ["ps", "ddp", "stanza"],
                              "fc_workers": [1], "target_gbps": [10.0], "steps": 4, "warmup": 1, **kw})
    return s.specs[0]


def _fake_run(pt: Point, throughput: float = 2.0) -> tuple[dict, dict, dict]:
    """What replayed_point would return (plan row, RunConfig dict, Measurement row), made up."""
    c = pt.config
    plan_row = {"label": c.label, "target_gbps": pt.target_gbps, "link_mbit": 250.0, "payload_gbps": 0.25,
                "dilation": 40.0, "target_step_s": 0.3, "engine_s": 0.5, "global_batch": c.global_batch,
                "batch_per_worker": 32, "fc_batch": 0}
    row = {"strategy": c.strategy, "fc_workers": c.layout()["fc_workers"], "ps_servers": 0, "ps_overlap": False,
           "throughput": throughput, "step_time_median_s": 12.0, "bytes_per_step": 1000, "wall_s": 60.0,
           **plan_row, "repeat": pt.repeat}
    return plan_row, dataclasses.replace(c, link_mbit=250.0, dilation=40.0).to_dict(), row


def _grid(spec: MeasureSpec, name: str = "throughput") -> list[grid.GridPoint]:
    return [grid.GridPoint(pt, [name]) for pt in points(spec)]


def test_the_store_round_trips_one_readable_file_per_configuration(tmp_path):
    st = Store(tmp_path)
    pts = points(_spec())
    assert [p.config.label for p in pts] == ["ps", "ddp", "stanza k=1"] and st.get(pts[0]) is None
    plan_row, cfg, row = _fake_run(pts[1], throughput=3.25)
    path = st.put(pts[1], plan=plan_row, config=cfg, run=row, seconds=61.04, load_before=[1.0, 0.5, 0.25])
    assert path.parent == tmp_path and path.name.startswith("alexnet-n4-ddp-10g-v100-")
    entry = json.loads(path.read_text())
    assert entry["version"] == MEASUREMENT_VERSION and entry["key"] == pts[1].key()
    assert entry["plan"] == plan_row and entry["config"] == cfg and entry["run"] == row
    assert entry["summary"]["throughput"] == 3.25 and entry["summary"]["target_throughput"] == 3.25 * 40
    m = entry["measured"]
    assert m["seconds"] == 61.0 and m["loadavg_before"] == [1.0, 0.5, 0.25] and m["host"] and m["cpus"] >= 1
    got = Store(tmp_path).get(pts[1])  # a later run (any machine: nothing but the folder is read)
    assert got["run"] == row and Store(tmp_path).get(pts[0]) is None
    assert [Store(tmp_path).status(p) for p in pts] == ["missing", "stored", "missing"]


def test_an_entry_of_another_version_is_not_reused(tmp_path):
    pt = points(_spec())[0]
    plan_row, cfg, row = _fake_run(pt)
    Store(tmp_path, version=MEASUREMENT_VERSION + 1).put(pt, plan=plan_row, config=cfg, run=row, seconds=1.0)
    st = Store(tmp_path)
    assert st.get(pt) is None and st.status(pt) == "old" and not st.reused
    assert grid.listing(_grid(_spec()), st)["old_version"] == 1
    # a file under the point's name holding another configuration's key is not this point's
    other = points(_spec())[1]
    st.put(other, plan=plan_row, config=cfg, run=row, seconds=1.0)
    st.path(pt).write_text(st.path(other).read_text())
    assert st.get(pt) is None and st.status(pt) == "missing"


def test_an_older_version_at_other_step_counts_is_old_shown_by_latest_and_replaced(tmp_path):
    """Version 2 raised the grid's steps: a version 1 entry of the same configuration (another key:
    fewer steps) is "old", never reused, and reports show it (latest) until version 2 measures it."""
    one_step = points(_spec(steps=3, warmup=2))[0]  # what version 1 stored: 1 timed step
    now = points(_spec())[0]  # 4 steps, 1 warm-up
    assert one_step.name != now.name
    plan_row, cfg, row = _fake_run(one_step)
    v1 = Store(tmp_path, version=1)
    with pytest.raises(ValueError, match=r"times 1 step\(s\) \(3 steps, 2 warm-up\); a stored run times at least 3"):
        v1.put(one_step, plan=plan_row, config=cfg, run=row, seconds=1.0)
    # an entry written before the rule (as the committed version 1 files were)
    entry = {"version": 1, "key": one_step.key(), "label": one_step.label, "plan": plan_row, "config": cfg,
             "summary": {}, "run": row, "measured": {"seconds": 1.0}}
    v1.path(one_step).write_text(json.dumps(entry))
    st = Store(tmp_path, version=2)
    assert st.get(now) is None and st.status(now) == "old" and st.older(now)["key"] == one_step.key()
    assert st.status(points(_spec())[1]) == "missing"
    assert [(e["version"], e["file"]) for e in st.latest()] == [(1, one_step.name)]
    lst = grid.listing(_grid(_spec()), st)
    assert (lst["stored"], lst["old_version"], lst["missing"]) == (0, 1, 3)
    plan_row, cfg, row = _fake_run(now)
    st.put(now, plan=plan_row, config=cfg, run=row, seconds=1.0)
    assert st.status(now) == "stored" and [(e["version"], e["file"]) for e in st.latest()] == [(2, now.name)]


def test_the_fill_refuses_a_point_of_too_few_timed_steps_before_measuring_any(tmp_path):
    gps = _grid(_spec()) + _grid(_spec(steps=3, warmup=1, target_gbps=[100.0]))
    measured = []
    with pytest.raises(ValueError, match=r"@ 100 Gb/s \(v100\) times 2 step\(s\) \(3 steps, 1 warm-up\)"):
        grid.fill(gps, Store(tmp_path), lambda pt, e: measured.append(pt), budget_s=3600, say=lambda s: None)
    assert measured == [] and list(tmp_path.iterdir()) == []


def test_every_point_of_the_full_grid_times_enough_steps():
    from stanza_core.reproduce.spec import REPO_ROOT, load_specs
    from stanza_core.runs.store import MIN_TIMED_STEPS, timed_steps

    gps = grid.grid(load_specs(REPO_ROOT / "reproductions"), "full")
    assert len(gps) == 125 and min(timed_steps(gp.point) for gp in gps) == MIN_TIMED_STEPS


def test_the_key_is_stable_for_the_same_configuration_and_differs_for_another():
    a, b = points(_spec()), points(_spec())
    assert [p.name for p in a] == [p.name for p in b] and [p.key() for p in a] == [p.key() for p in b]
    key = a[0].key()
    assert "link_mbit" not in key and "dilation" not in key  # resolved on the measuring machine: in the entry
    assert key["target_gbps"] == 10.0 and key["dilation_floor"] == 40.0 and key["engine"] is True
    # the floor of D stated as the user's 1 (notebook 09) or as the links' 40 (ReplaySet): one key
    assert [p.name for p in points(_spec(dilation_rule=DilationRule(floor=40)))] == [p.name for p in a]
    assert points(_spec(dilation_rule=DilationRule(floor=41)))[0].name != a[0].name  # above the links': another
    # a different target, step count, device or engine term is another configuration
    others = [points(_spec(target_gbps=[100.0]))[0],
              points(_spec(steps=5))[0], points(_spec(replay_device="a100"))[0],
              points(_spec(dilation_rule=DilationRule(engine=False)))[0]]
    assert len({p.name for p in others} | {a[0].name}) == 5
    # repeats are their own entries
    rep = points(_spec(repeats=2))
    assert len(rep) == 6 and "-r1-" in rep[3].name and rep[3].key()["repeat"] == 1


def test_every_committed_entry_is_found_under_its_file_name_by_its_point():
    """Each file of benchmarks/results/full: its Point, rebuilt from its config (at the placeholder
    rate, D = 1 and F = 1) and its key's target, floor of D, engine term and repeat, has the
    entry's key and file name, so the store's names and keys are what Point makes today."""
    from stanza_core.runs.runconfig import UNSET_LINK_MBIT, RunConfig

    entries = Store().entries()
    assert len(entries) >= 100  # the committed store (110 entries when this was written)
    for e in entries:
        k = e["key"]
        cfg = RunConfig(**{**e["config"], "link_mbit": UNSET_LINK_MBIT, "dilation": 1.0, "payload_scale": 1})
        pt = Point(cfg, k["target_gbps"], DilationRule(floor=k["dilation_floor"], engine=k["engine"]), k["repeat"])
        assert (pt.key(), pt.name) == (k, e["file"])


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_budget_stops_new_runs_and_a_later_fill_measures_only_the_rest(tmp_path):
    st, clock, calls = Store(tmp_path), _Clock(), []
    gps = _grid(_spec()) + _grid(_spec(target_gbps=[100.0]))  # 6 points

    def measure_point(pt, engine_s=None):  # each run takes ten minutes by the clock
        calls.append(pt.name)
        clock.t += 600
        return _fake_run(pt)

    said = []
    got = grid.fill(gps, st, measure_point, budget_s=25 * 60, clock=clock, say=said.append)
    # started at 0, 10 and 20 min; at 30 min the 25 min budget is spent: no fourth run
    assert len(calls) == 3 and got["left"] == 3 and len(got["measured"]) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(calls) and "budget" in said[-1]
    order = grid.listing(gps, Store(tmp_path))["order"]
    assert len(order) == 3 and not set(order) & set(calls)
    calls.clear()
    got = grid.fill(gps, Store(tmp_path), measure_point, budget_s=grid.budget_seconds(None), clock=clock,
                    say=said.append)
    assert sorted(calls) == sorted(order) and got["left"] == 0
    calls.clear()
    assert grid.fill(gps, Store(tmp_path), measure_point, budget_s=60, clock=clock, say=said.append)["measured"] == []
    assert not calls


def test_the_listing_counts_stored_and_missing_and_estimates_the_fill(tmp_path):
    st = Store(tmp_path)
    gps = _grid(_spec()) + [grid.GridPoint(gps.point, ["bandwidth_sweep"])
                            for gps in _grid(_spec(target_gbps=[100.0]))]
    gps[0].experiments.append("bandwidth_sweep")
    empty = grid.listing(gps, st)
    assert (empty["points"], empty["stored"], empty["missing"]) == (6, 0, 6)
    assert empty["by_experiment"] == {"throughput": {"points": 3, "stored": 0},
                                      "bandwidth_sweep": {"points": 4, "stored": 0}}
    ests = empty["estimate_s"]
    assert list(ests) == empty["order"] and empty["estimate_missing_s"] == pytest.approx(sum(ests.values()))
    assert all(e > grid.SETUP_S_PER_NODE * 4 for e in ests.values()) and empty["measured_over_estimate"] is None
    for gp in gps[:2]:
        plan_row, cfg, row = _fake_run(gp.point)
        st.put(gp.point, plan=plan_row, config=cfg, run=row, seconds=600.0)
    lst = grid.listing(gps, st)
    assert (lst["stored"], lst["missing"], lst["old_version"]) == (2, 4, 0)
    assert lst["by_experiment"]["throughput"] == {"points": 3, "stored": 2}
    assert lst["by_experiment"]["bandwidth_sweep"] == {"points": 4, "stored": 1}
    assert lst["estimate_missing_s"] < empty["estimate_missing_s"] and lst["measured_over_estimate"] > 0
    # one model here: its own factor is the overall one, applied to each missing estimate
    (model, factor), = lst["measured_over_estimate_by_model"].items()
    assert model == gps[0].point.config.model and factor == pytest.approx(lst["measured_over_estimate"])
    assert lst["corrected_missing_s"] == pytest.approx(factor * lst["estimate_missing_s"])
    grid.print_listing(lst, gps)  # prints; the counts above are what it says


def test_the_fill_time_takes_each_models_own_factor(tmp_path):
    """A model whose runs take twice their estimate doubles its missing points' time, not the others'."""
    st = Store(tmp_path)
    a = _grid(_spec())
    b = _grid(_spec(models=["vgg16"], nodes=[8]))  # estimates apart from a's (set-up per node)
    assert a[0].point.config.model != b[0].point.config.model
    for gp, factor in ((a[0], 1.0), (b[0], 2.0)):
        plan_row, cfg, row = _fake_run(gp.point)
        # a stored run's estimate: the plan it ran on (its D and F), set-up and its dilated steps
        est = grid.stored_estimate_s(gp.point, {"key": gp.point.key(), "plan": plan_row})
        c = gp.point.config
        assert est == pytest.approx(grid.SETUP_S_PER_NODE * c.cluster_nodes + c.steps * 40.0 * 0.3)
        st.put(gp.point, plan=plan_row, config=cfg, run=row, seconds=factor * est)
    lst = grid.listing(a + b, st)
    by = lst["measured_over_estimate_by_model"]
    # (the store keeps seconds rounded: 1e-3)
    assert by[a[0].point.config.model] == pytest.approx(1.0, rel=1e-3)
    assert by[b[0].point.config.model] == pytest.approx(2.0, rel=1e-3)
    est = lst["estimate_s"]
    want = sum(est[gp.point.name] * (2.0 if gp in b else 1.0) for gp in a + b if gp.point.name in est)
    assert lst["corrected_missing_s"] == pytest.approx(want, rel=1e-3)
    # not the overall factor applied to every point
    assert lst["corrected_missing_s"] != pytest.approx(lst["measured_over_estimate"] * lst["estimate_missing_s"],
                                                       rel=1e-2)


def test_measure_reads_stored_configurations_and_measures_nothing(tmp_path, monkeypatch):
    spec = _spec()
    st = Store(tmp_path)
    rows = []
    for pt in points(spec):
        plan_row, cfg, row = _fake_run(pt)
        st.put(pt, plan=plan_row, config=cfg, run=row, seconds=60.0)
        rows.append(row)
    # no emulated cluster here and no engine-seconds run: everything comes from the store
    monkeypatch.setattr(run, "netem_unavailable", lambda: "no root")
    monkeypatch.setattr(run, "replayed_point", lambda *a: pytest.fail("a stored configuration was measured"))
    m = run.measure(spec, None, progress=False, store_dir=tmp_path)
    assert m.unavailable is None and m.runs == rows and m.cache["store"]["reused"] == 3
    assert [r["label"] for r in m.summary] == sorted(r["label"] for r in rows)
    # one missing configuration and no emulated cluster: skipped, as before
    st.path(points(spec)[2]).unlink()
    assert run.measure(spec, None, progress=False, store_dir=tmp_path).unavailable == "no root"
    # with the emulator, only the missing one is measured
    monkeypatch.setattr(run, "netem_unavailable", lambda: None)
    measured = []
    monkeypatch.setattr(run, "replayed_point", lambda pt, cache: (measured.append(pt), _fake_run(pt)[2]))
    m = run.measure(spec, None, progress=False, store_dir=tmp_path)
    assert [p.config.label for p in measured] == ["stanza k=1"] and m.runs == rows
    with pytest.raises(ValueError, match="replayed configurations only"):
        points(MeasureSpec(model="alexnet", image_size=224, num_classes=1000, nodes=4, strategies=["ddp"],
                           fc_workers=[1], global_batch=64, steps=3, target_gbps=[10.0]))


@pytest.mark.parametrize("argv, message", [
    (["--list"], "--list, --budget-min and --points are about the full grid: add --full, or FULL=1 with make"),
    (["--budget-min", "30"], "--list, --budget-min and --points are about the full grid: add --full, or FULL=1 with make"),
    (["--points", "*N=16*"], "--list, --budget-min and --points are about the full grid: add --full, or FULL=1 with make"),
    (["--full", "--only", "throughput", "--points", "*N=32*"],
     "--points '*N=32*' matches none of the grid's 72 configurations; labels read like "
     "'alexnet N=4 ps @ 10 Gb/s (v100)'"),
    (["--full", "--budget-min", "0"], "--budget-min must be a positive number of minutes, got 0.0"),
    (["--full", "--budget-min", "nan"], "--budget-min must be a positive number of minutes, got nan"),
])
def test_bad_grid_options_fail_in_one_line(argv, message, capsys, tmp_path):
    assert reproduce_main(argv + ["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {message}\n" and not (tmp_path / "out").exists()



def test_a_failed_point_is_one_line_left_missing_and_two_in_a_row_stop_the_fill(tmp_path):
    st, clock, calls = Store(tmp_path), _Clock(), []
    gps = _grid(_spec()) + _grid(_spec(target_gbps=[100.0]))  # 6 points
    order = grid.listing(gps, st)["order"]
    bad = {order[1], order[3], order[4]}

    def measure_point(pt, engine_s=None):
        calls.append(pt.name)
        clock.t += 60
        if pt.name in bad:
            raise JobError(f"stanza-alexnet-n4-k1: a rank raised RuntimeError: boom\nsecond line ({pt.name})")
        return _fake_run(pt)

    said = []
    got = grid.fill(gps, st, measure_point, budget_s=grid.budget_seconds(None), clock=clock, say=said.append)
    # 0 ok, 1 fails and the fill goes on, 2 ok, 3 and 4 fail in a row: stopped before 5
    assert calls == order[:5]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([order[0], order[2]]) and len(got["measured"]) == 2
    assert len(got["failed"]) == 3 and all("\n" not in f and "boom" in f for f in got["failed"])
    assert sum("failed after" in s and "left missing" in s for s in said) == 3 and "fill stopped" in said[-1]
    assert len(list(tmp_path.iterdir())) == 2 and grid.listing(gps, Store(tmp_path))["missing"] == 4


def test_a_failed_job_says_what_the_rank_raised_not_the_launcher():
    from stanza_core.launch import job_failure

    stderr = "\n".join([
        "Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
        "[rank0]: torch.distributed.DistBackendError: Timed out waiting 120000ms for recv",
        "W1205 Sending process 11303 closing signal SIGTERM", "Traceback (most recent call last):",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60, "stanza_core.train FAILED"])
    assert job_failure(stderr, 1) == ("a rank raised [rank0]: torch.distributed.DistBackendError: Timed out waiting "
                                      "120000ms for recv (exit 1)")
    assert job_failure("x\nerror: --fc-workers 3 leaves no CONV worker\nerror: later", 2) == \
        "--fc-workers 3 leaves no CONV worker"
    assert job_failure("starting\nKilled", -9) == "exit -9: starting | Killed"


def test_the_fill_leaves_engine_seconds_to_the_plan(tmp_path):
    """A configuration's engine seconds depend on its payload scale F, which its target decides:
    the fill hands none in (the plan measures them once per configuration and F in the runs
    cache, tests/unit/test_replayed_runs.py), and every point is measured."""
    gps = _grid(_spec()) + _grid(_spec(target_gbps=[100.0]))  # 3 configurations x 2 targets
    seen = []

    def measure_point(pt, engine_s=None):
        seen.append((pt.config.label, pt.target_gbps, engine_s))
        return _fake_run(pt)

    got = grid.fill(gps, Store(tmp_path), measure_point, budget_s=grid.budget_seconds(None), say=lambda s: None)
    assert len(seen) == 6 and got["left"] == 0 and {g for _, _, g in seen} == {None}
