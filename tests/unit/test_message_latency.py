"""benchmarks/message_latency.py: p2p latency from a timeline, grouped by messages posted at once."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("message_latency", ROOT / "benchmarks" / "message_latency.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ev(step, t, event, peer, category="activations"):
    return {"step": step, "t": t, "event": event, "category": category, "peer": peer, "bytes": 100}


def test_latency_runs_from_the_send_to_the_receivers_wait_and_counts_the_messages_sent_at_once():
    # step 0 (warm-up) is left out. Step 1: ranks 0 and 1 send to rank 2 within 1 ms, rank 3 30 ms later.
    ranks = [{"rank": 0, "timeline": [_ev(0, 0.0, "send", 2), _ev(1, 0.010, "send", 2)]},
             {"rank": 1, "timeline": [_ev(0, 0.0, "send", 2), _ev(1, 0.011, "send", 2)]},
             {"rank": 3, "timeline": [_ev(0, 0.0, "send", 2), _ev(1, 0.041, "send", 2),
                                      _ev(1, 0.041, "send", 2, "labels")]},
             {"rank": 2, "timeline": [_ev(0, 9.0, "recv_done", 0), _ev(0, 9.0, "recv_done", 1), _ev(0, 9.0, "recv_done", 3),
                                      _ev(1, 0.030, "recv_done", 0), _ev(1, 0.025, "recv_done", 1),
                                      _ev(1, 0.048, "recv_done", 3), _ev(1, 0.090, "recv_done", 3, "labels")]}]
    metrics = {"config": {"warmup": 1}, "steps": [{"step": 0}, {"step": 1}], "ranks": ranks}
    got = sorted(_bench().latencies(metrics, "activations", 0.004))
    assert [n for n, _ in got] == [0, 1, 1]  # rank 3's message travelled alone
    assert [lat for _, lat in got] == pytest.approx([0.007, 0.014, 0.020])
    assert _bench().latencies(metrics, "labels", 0.004) == [(0, pytest.approx(0.049))]
