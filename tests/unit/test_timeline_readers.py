"""Timeline readers of the benchmarks: replay_fidelity.py --timeline (each compute phase of a
step, per role), message_latency.py (p2p latency, grouped by the messages posted at once) and
ps_timeline.py (a parameter-server step's milestones)."""
from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ev(step, t, event, peer=None, category="compute"):
    return {"step": step, "t": t, "event": event, "category": category, "peer": peer, "bytes": 0}


def _conv(rank, step, fwd, bwd):
    return [_ev(step, 0.0, "forward_start"), _ev(step, fwd, "forward_end"),
            _ev(step, 0.5, "backward_start"), _ev(step, 0.5 + bwd, "backward_end"),
            _ev(step, 0.9, "optimizer_start"), _ev(step, 0.92, "optimizer_end")]


def test_phases_are_summed_per_step_and_the_median_taken_over_ranks_and_timed_steps():
    # step 0 is the warm-up and is left out; two CONV workers, one FC worker serving both
    conv = [{"rank": r, "role": "conv_worker",
             "timeline": _conv(r, 0, 0.4, 0.4) + _conv(r, 1, 0.10 + 0.02 * r, 0.20) + _conv(r, 2, 0.12, 0.30)}
            for r in (0, 1)]
    fc_tl = []
    for step in (0, 1, 2):
        for src, start in ((0, 0.2), (1, 0.3)):
            fc_tl += [_ev(step, start, "forward_start", src), _ev(step, start + 0.05, "backward_end", src)]
    fc = {"rank": 2, "role": "fc_worker", "timeline": fc_tl}
    metrics = {"steps": [{"step": 0, "time_s": 9.0}, {"step": 1, "time_s": 1.0}, {"step": 2, "time_s": 1.2}],
               "ranks": [*conv, fc]}
    got = _bench("replay_fidelity").phase_medians(metrics, warmup=1)
    c = got["conv_worker"]
    # forwards of the timed steps: 0.10, 0.12 (rank 0), 0.12, 0.12 (rank 1) -> median 0.12
    assert c["forward"] == pytest.approx(0.12)
    assert c["backward"] == pytest.approx(0.25)  # 0.20, 0.30, 0.20, 0.30
    assert c["optimizer step"] == pytest.approx(0.02)
    # the rest of each step: 1.0 - 0.10 - 0.2 - 0.02 = 0.68, 0.66 (rank 1), 1.2 - 0.12 - 0.3 - 0.02 = 0.76
    assert c["other"] == pytest.approx(statistics.median([0.68, 0.66, 0.76, 0.76]))
    f = got["fc_worker"]
    assert f["FC forward + backward"] == pytest.approx(0.10)  # two served chunks of 0.05 per step
    assert f["other"] == pytest.approx(statistics.median([0.9, 1.1]))


def test_jitter_factors_are_each_phase_over_its_mean_per_role_and_keep_the_ranks_of_a_step_together():
    # two CONV workers and one FC worker; step 0 is the warm-up
    conv = [{"rank": r, "role": "conv_worker",
             "timeline": _conv(r, 0, 0.4, 0.4) + _conv(r, 1, 0.10, 0.20 + 0.1 * r) + _conv(r, 2, 0.30, 0.20)}
            for r in (0, 1)]
    fc_tl = []
    for step, length in ((0, 0.5), (1, 0.05), (2, 0.15)):
        for src, start in ((0, 0.2), (1, 0.3)):
            fc_tl += [_ev(step, start, "forward_start", src), _ev(step, start + length, "backward_end", src)]
    fc = {"rank": 2, "role": "fc_worker", "timeline": fc_tl}
    metrics = {"config": {"strategy": "stanza"}, "steps": [{"step": s, "time_s": 1.0} for s in (0, 1, 2)],
               "ranks": [fc, *conv]}
    got = _bench("replay_fidelity").jitter_factors(metrics, warmup=1, source="a test run")
    assert got["source"] == "a test run" and len(got["steps"]) == 2  # the timed steps
    step1, step2 = got["steps"]
    # CONV forwards 0.10, 0.10 (step 1), 0.30, 0.30 (step 2): mean 0.20
    assert [f["fwd"] for f in step1[:2]] == [pytest.approx(0.5)] * 2
    assert [f["fwd"] for f in step2[:2]] == [pytest.approx(1.5)] * 2
    # backwards 0.20, 0.30, 0.20, 0.20: mean 0.225; rank 1 was slow in step 1 only
    assert step1[1]["bwd"] == pytest.approx(0.30 / 0.225) and step2[1]["bwd"] == pytest.approx(0.20 / 0.225)
    assert step1[0]["update"] == pytest.approx(1.0)  # every optimizer step 0.02
    # the FC worker (rank 2, listed first in the metrics): 0.10 and 0.30 per step, both ways
    assert step1[2] == {"fwd": pytest.approx(0.5), "bwd": pytest.approx(0.5), "update": 1.0}  # no optimizer marks
    assert step2[2]["fwd"] == pytest.approx(1.5)
    metrics["config"]["strategy"] = "ddp"  # its backward mark holds the allreduces: the forward's factor
    ddp = _bench("replay_fidelity").jitter_factors({**metrics, "ranks": conv}, warmup=1, source="")
    assert [f["bwd"] for s in ddp["steps"] for f in s] == [f["fwd"] for s in ddp["steps"] for f in s]


def test_latency_runs_from_the_send_to_the_receivers_wait_and_counts_the_messages_sent_at_once():
    def act(step, t, event, peer):
        return _ev(step, t, event, peer, "activations")

    # step 0 (warm-up) is left out. Step 1: ranks 0 and 1 send to rank 2 within 1 ms, rank 3 30 ms later.
    ranks = [{"rank": 0, "timeline": [act(0, 0.0, "send", 2), act(1, 0.010, "send", 2)]},
             {"rank": 1, "timeline": [act(0, 0.0, "send", 2), act(1, 0.011, "send", 2)]},
             {"rank": 3, "timeline": [act(0, 0.0, "send", 2), act(1, 0.041, "send", 2),
                                      _ev(1, 0.041, "send", 2, "labels")]},
             {"rank": 2, "timeline": [act(0, 9.0, "recv_done", 0), act(0, 9.0, "recv_done", 1),
                                      act(0, 9.0, "recv_done", 3), act(1, 0.030, "recv_done", 0),
                                      act(1, 0.025, "recv_done", 1), act(1, 0.048, "recv_done", 3),
                                      _ev(1, 0.090, "recv_done", 3, "labels")]}]
    metrics = {"config": {"warmup": 1}, "steps": [{"step": 0}, {"step": 1}], "ranks": ranks}
    bench = _bench("message_latency")
    got = sorted(bench.latencies(metrics, "activations", 0.004))
    assert [n for n, _ in got] == [0, 1, 1]  # rank 3's message travelled alone
    assert [lat for _, lat in got] == pytest.approx([0.007, 0.014, 0.020])
    assert bench.latencies(metrics, "labels", 0.004) == [(0, pytest.approx(0.049))]


def test_ps_milestones_take_each_ranks_first_or_last_event_per_step():
    def rank(r, push_arrivals, pull_done):
        tl = [_ev(0, 0.2, "backward_end"), _ev(0, 0.21, "send", 1 - r, "grads"),
              *[_ev(0, t, "recv_done", 1 - r, "grads") for t in push_arrivals],
              _ev(0, max(push_arrivals) + 0.01, "optimizer_start"), _ev(0, max(push_arrivals) + 0.02, "send", 1 - r, "params"),
              *[_ev(0, t, "recv_done", 1 - r, "params") for t in pull_done]]
        return {"rank": r, "timeline": tl}

    metrics = {"steps": [{"step": 0, "time_s": 1.0}], "ranks": [rank(0, [0.5, 0.7], [0.9]), rank(1, [0.6], [0.8, 0.95])]}
    got = _bench("ps_timeline").milestones(metrics)[0]
    assert got["first push arrived"] == [0.5, 0.6]
    assert got["last push arrived"] == [0.7, 0.6]
    assert got["first update"] == pytest.approx([0.71, 0.61])
    assert got["last pull done"] == [0.9, 0.95]
    assert got["backward end"] == [0.2, 0.2]


@pytest.mark.parametrize("argv, msg", [
    (["--wait", "cpu", "--jitter"], "--wait cpu and --jitter"),
    (["--wait", "cpu", "--spin"], "--spin and --wait cpu: choose one"),
])
def test_replay_fidelity_refuses_waits_that_contradict(argv, msg, capsys):
    """Checked before any timing process or network namespace exists."""
    with pytest.raises(SystemExit):
        _bench("replay_fidelity").main(argv)
    assert msg in capsys.readouterr().err
