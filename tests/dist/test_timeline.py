"""`--timeline`: per-rank event timestamps in the metrics JSON (off by default).

One stanza job (N = 3, k = 1, tiny buckets so the CONV allreduce goes out in several buckets)
checks what tutorials/t4_overlap reads from the timeline: every post has its completion, the
bytes posted per step equal the byte counters, the first CONV bucket's allreduce is launched
before the CONV backward ends (overlap), and the FC worker returns the first activation
gradient before it has processed the last CONV worker's activations (pipelining)."""
from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from stanza_core.engine.config import TrainConfig

from dist_launch import grouped_runs, train

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_timeline_records_the_overlap_and_matches_the_counters(tmp_path):
    args = ("--strategy", "stanza", "--model", "tiny_cnn", "--global-batch", "6", "--steps", "2",
            "--fc-workers", "1", "--bucket-mb", "0.001")
    assert TrainConfig().timeline is False  # off by default: no timestamps, no timeline key
    m, _, _ = train(tmp_path, "on", 3, *args, "--timeline")
    assert m["config"]["timeline"] is True
    for r in m["ranks"]:
        tl = r["timeline"]
        assert {e["step"] for e in tl} == {0, 1} and all(e["t"] >= 0 for e in tl)
        ev = Counter(e["event"] for e in tl)
        for post in ("send", "recv", "allreduce") if r["role"] == "conv_worker" else ("send", "recv"):
            assert ev[post] == ev[post + "_done"] > 0, (r["rank"], ev)
        posted = defaultdict(int)
        for e in tl:
            if e["event"] == "send":
                posted[e["category"]] += e["bytes"]
        assert {c: v // 2 for c, v in posted.items()} == {c: v for c, v in r["sent"].items()
                                                          if c in ("activations", "labels", "activation_grads")}
        step0 = [e for e in tl if e["step"] == 0]
        first = {e["event"]: e["t"] for e in reversed(step0)}  # earliest time of each event
        last = {e["event"]: e["t"] for e in step0}
        if r["role"] == "conv_worker":
            assert first["forward_end"] <= first["send"] <= first["recv_done"] <= first["backward_start"]
            assert first["allreduce"] < last["backward_end"]  # a bucket leaves while backward runs
            assert last["allreduce_done"] <= first["optimizer_start"]
        else:
            assert "allreduce" not in ev  # k = 1: no FC allreduce
            assert ev["forward_start"] == 2 * 2  # one FC forward per served CONV worker per step
            assert first["send"] < last["forward_start"]  # first gradient back before the last chunk


@pytest.fixture(scope="module")
def two_rank_runs(tmp_path_factory):
    """ps (overlapped push) and ddp on 2 ranks, both in one torchrun launch (dist_launch.grouped_runs)."""
    return grouped_runs(tmp_path_factory, {
        s: (2, ["--strategy", s, "--model", "tiny_cnn", "--global-batch", "4", "--steps", "2", "--bucket-mb", "0.001",
                "--timeline", *(["--ps-overlap"] if s == "ps" else [])]) for s in ("ps", "ddp")})


@pytest.mark.parametrize("strategy", ["ps", "ddp"])
def test_ps_and_ddp_mark_their_compute_and_overlap_it_with_the_gradients(two_rank_runs, strategy):
    """ps with the overlapped push and ddp: forward, backward and the update are on the timeline;
    with tiny buckets the first gradient leaves while the backward still runs; a colocated
    server updates each piece of its shard once every push of it has arrived."""
    m, _ = two_rank_runs(strategy)
    for r in m["ranks"]:
        step0 = [e for e in r["timeline"] if e["step"] == 0]
        ev = Counter(e["event"] for e in step0)
        first = {e["event"]: e["t"] for e in reversed(step0)}
        last = {e["event"]: e["t"] for e in step0}
        assert ev["forward_start"] == ev["forward_end"] == ev["backward_start"] == ev["backward_end"] == 1
        assert first["forward_end"] <= first["backward_start"] < last["backward_end"]
        out = "allreduce" if strategy == "ddp" else "send"  # ddp's buckets; ps's pushes
        assert first["forward_end"] < first[out] < last["backward_end"]  # a bucket leaves during the backward
        assert ev["optimizer_start"] == ev["optimizer_end"] >= 1
        if strategy == "ps":  # the server's updates: after the pushes of the piece arrived
            assert first["recv_done"] <= first["optimizer_start"]
        else:
            assert last["allreduce_done"] <= first["optimizer_start"]
