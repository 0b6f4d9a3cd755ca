"""predict() against hand-computed step times for every term and overlap rule.

The hand model: Pc = 200k and Pf = 1M parameters (0.8 MB and 4 MB of fp32 gradients),
A = 10,000 boundary values, no layer rows (each part is one unit of backward), and a device
with conv 1 ms / 2 ms and fc 0.1 ms / 0.2 ms per sample (fwd / bwd), no floors, no optimizer
cost. 8 Gb/s = 1e9 B/s. Times are compared with rel=1e-9 (float round-off only).
"""
import pytest

from stanza_core import get_model, profile_model
from stanza_core.anatomy import PartTotals, Profile
from stanza_core.perf import Cluster, DeviceProfile, expected_bytes, predict
from stanza_core.variant import Variant

REL = 1e-9


def hand_profile(pf=1_000_000):
    return Profile("hand", (3, 8, 8), 1, "fc", 10_000, PartTotals(200_000, 1e9), PartTotals(pf, 1e6), [])


def device(**kw):
    base = dict(name="hand", conv_fwd_s=1e-3, conv_bwd_s=2e-3, fc_fwd_s=1e-4, fc_bwd_s=2e-4)
    return DeviceProfile(**{**base, **kw})


def cluster(n, gbps=8.0, latency=0.0, **dev):
    return Cluster(n, gbps, latency, device(**dev))


# ---- ddp: bucketed allreduce overlapping the backward -------------------------------------------

def test_ddp_two_node_ring_overlaps_backward():
    # b = 10: fwd 10 ms + 1 ms; bwd: fc 2 ms, then conv 20 ms. 1 MiB buckets: the FC bucket (4 MB)
    # is ready at 2 ms, reduced in 2(1)/2 * 4e6 / 1e9 = 4 ms (ends 6 ms); the CONV bucket
    # (0.8 MB) is ready at 22 ms and takes 0.8 ms: step = 11 + 22.8 ms.
    p = predict(hand_profile(), cluster(2), Variant("ddp"), batch_per_worker=10, bucket_mb=1)
    assert p.iteration_s == pytest.approx(0.0338, rel=REL)
    assert p.throughput == pytest.approx(20 / 0.0338, rel=REL)
    assert p.exposed_comm_s == pytest.approx(0.0008, rel=1e-6)  # only the last bucket's tail shows
    assert p.breakdown["grads_allreduce_s"] == pytest.approx(0.0048, rel=REL)
    assert p.breakdown["allreduce_buckets"] == 2


def test_ddp_comm_bound_hides_the_backward_under_the_allreduce():
    # 1e8 B/s: FC bucket 40 ms (2 -> 42 ms), CONV bucket waits for the link: 42 -> 50 ms
    p = predict(hand_profile(), cluster(2, gbps=0.8), Variant("ddp"), batch_per_worker=10, bucket_mb=1)
    assert p.iteration_s == pytest.approx(0.011 + 0.050, rel=REL)  # not 0.011 + 0.022 + 0.048


def test_ddp_one_bucket_cannot_overlap():
    # the default 25 MiB cap holds all 4.8 MB: one allreduce after the whole backward
    p = predict(hand_profile(), cluster(2), Variant("ddp"), batch_per_worker=10)
    assert p.iteration_s == pytest.approx(0.011 + 0.022 + 0.0048, rel=REL)


def test_ddp_latency_terms():
    # N = 4, 1 ms per message: each bucket pays 2(n-1) = 6 latencies
    p = predict(hand_profile(), cluster(4, latency=1e-3), Variant("ddp"), batch_per_worker=10, bucket_mb=1)
    # bucket 1: 0.75 * 2 * 4e6/1e9 + 6 ms = 12 ms (2 -> 14 ms); bucket 2: 1.2 + 6 ms (22 -> 29.2 ms)
    assert p.iteration_s == pytest.approx(0.011 + 0.0292, rel=REL)
    assert p.breakdown["latency_s"] == pytest.approx(0.012, rel=REL)


def test_ddp_optimizer_step_is_added():
    base = predict(hand_profile(), cluster(2), Variant("ddp"), batch_per_worker=10)
    upd = predict(hand_profile(), cluster(2, update_s_per_param=1e-9), Variant("ddp"), batch_per_worker=10)
    assert upd.iteration_s - base.iteration_s == pytest.approx(1.2e6 * 1e-9, rel=1e-6)


# ---- ps: push, shard update, pull; the busiest link sets each phase ------------------------------

def test_ps_three_shards_on_five_nodes():
    # P = 1.2M -> 3 shards of 1.6 MB. Push: a shard owner takes in 4 messages = 4 x 0.1 ms + 6.4 MB /
    # 1e9 = 6.8 ms (a non-owner sends 3 x 1.6 MB in 5.1 ms); pull mirrors it. Compute 33 ms.
    p = predict(hand_profile(), cluster(5, latency=1e-4), Variant("ps", ps_shards=3), batch_per_worker=10)
    assert p.breakdown["ps_push_s"] == pytest.approx(0.0068, rel=REL)
    assert p.iteration_s == pytest.approx(0.033 + 2 * 0.0068, rel=REL)
    assert p.breakdown["latency_s"] == pytest.approx(2 * 4e-4, rel=REL)


def test_ps_fully_sharded_moves_the_ring_volume_without_overlap():
    # S = N = 3: each rank sends and takes in 2/3 of 4.8 MB per phase -> 2 x 3.2 ms after compute
    p = predict(hand_profile(), cluster(3), Variant("ps"), batch_per_worker=10)
    assert p.ps_shards == 3
    assert p.iteration_s == pytest.approx(0.033 + 0.0064, rel=REL)
    assert p.iteration_s - 0.033 == pytest.approx(cluster(3).ring_allreduce_s(4.8e6, 3), rel=REL)


def test_ps_single_server_is_the_bottleneck():
    # S = 1 on 4 nodes: rank 0 takes in 3 x 4.8 MB = 14.4 ms per phase
    p = predict(hand_profile(), cluster(4), Variant("ps", ps_shards=1), batch_per_worker=10)
    assert p.iteration_s == pytest.approx(0.033 + 2 * 0.0144, rel=REL)


# ---- stanza: pipelined exchange, CONV side vs FC side --------------------------------------------

def test_stanza_k1_pipeline_then_conv_backward_and_allreduce():
    # N = 3, k = 1: 2 CONV workers, b = 10. fwd 10 ms. Per chunk: in 0.40008 ms (400 kB + 80 B),
    # FC 3 ms, out 0.4 ms; 2 chunks: 0.40008 + 3 + 0.4 + 1 x 3 = 6.80008 ms. Then conv bwd 20 ms
    # with its 0.8 MB allreduce (0.8 ms) after it: 10 + 6.80008 + 20.8 ms.
    p = predict(hand_profile(), cluster(3), Variant("stanza", fc_workers=1), batch_per_worker=10)
    assert p.breakdown["exchange_span_s"] == pytest.approx(0.00680008, rel=REL)
    assert p.iteration_s == pytest.approx(0.03760008, rel=REL)
    assert p.breakdown["fc_allreduce_s"] == 0.0
    assert p.throughput == pytest.approx(20 / 0.03760008, rel=REL)


def test_stanza_k2_fc_allreduce_overlaps_conv_side():
    # N = 4, k = 2: one chunk per FC worker (3.80008 ms); FC allreduce 4 MB among 2 = 4 ms runs on
    # the FC workers' links while the CONV side does its 20.8 ms: step = the CONV side.
    p = predict(hand_profile(), cluster(4), Variant("stanza", fc_workers=2), batch_per_worker=10)
    assert p.breakdown["fc_side_end_s"] == pytest.approx(0.01 + 0.00380008 + 0.004, rel=REL)
    assert p.iteration_s == pytest.approx(0.01 + 0.00380008 + 0.0208, rel=REL)


def test_stanza_fc_side_can_be_the_critical_one():
    # Pf = 20M: an 80 MB FC allreduce (80 ms) outlasts the CONV side
    p = predict(hand_profile(pf=20_000_000), cluster(4), Variant("stanza", fc_workers=2), batch_per_worker=10)
    assert p.iteration_s == pytest.approx(0.01 + 0.00380008 + 0.080, rel=REL)


def test_stanza_ingress_bound_exchange():
    # 1e8 B/s: in 4.0008 ms > FC 3 ms, so the FC worker's ingress link paces the pipeline
    p = predict(hand_profile(), cluster(3, gbps=0.8), Variant("stanza", fc_workers=1), batch_per_worker=10)
    span = 0.0040008 + 0.003 + 0.004 + 0.0040008
    assert p.breakdown["exchange_span_s"] == pytest.approx(span, rel=REL)
    assert p.iteration_s == pytest.approx(0.01 + span + 0.02 + 0.008, rel=REL)


def test_stanza_latency_terms():
    # 0.1 ms per message: activations+labels are 2 messages, a gradient 1, the 2-rank ring 2
    p = predict(hand_profile(), cluster(3, latency=1e-4), Variant("stanza", fc_workers=1), batch_per_worker=10)
    span = 0.00060008 + 0.003 + 0.0005 + 0.003
    assert p.iteration_s == pytest.approx(0.01 + span + 0.02 + 0.001, rel=REL)
    assert p.breakdown["latency_s"] == pytest.approx(2 * 3e-4 + 2e-4, rel=REL)


def test_fc_chunk_roofline_floor():
    # a 10 ms floor on the FC forward (weights streamed per call) beats 10 x 0.1 ms
    p = predict(hand_profile(), cluster(3, fc_fwd_call_s=0.01), Variant("stanza", fc_workers=1), batch_per_worker=10)
    assert p.breakdown["fc_compute_s"] == pytest.approx(0.012, rel=REL)
    assert p.breakdown["fc_worker_compute_s"] == pytest.approx(2 * 0.012, rel=REL)


def test_uneven_global_batch_is_paced_by_the_largest_share():
    p = predict(hand_profile(), cluster(4), Variant("stanza", fc_workers=1), global_batch=10)  # CONV batches 4, 3, 3
    assert (p.global_batch, p.batch_per_worker) == (10, 4)
    q = predict(hand_profile(), cluster(4), Variant("stanza", fc_workers=1), batch_per_worker=4)
    assert p.iteration_s == pytest.approx(q.iteration_s, rel=REL)
    assert p.throughput == pytest.approx(10 / q.iteration_s, rel=REL)


# ---- bytes, measured devices, errors ------------------------------------------------------------

@pytest.mark.parametrize("strategy, n, k, s", [("ddp", 4, None, None), ("ps", 5, None, 3),
                                               ("stanza", 5, 2, None), ("stanza", 7, 3, None)])
def test_prediction_bytes_are_expected_bytes(strategy, n, k, s):
    p = predict(hand_profile(), cluster(n), Variant(strategy, fc_workers=k, ps_shards=s), global_batch=12 * (n - (k or 0)))
    rows = expected_bytes(hand_profile(), Variant(strategy, fc_workers=k, ps_shards=s), n, global_batch=12 * (n - (k or 0)))
    assert p.ranks == rows
    assert p.bytes_per_step == sum(sum(r["sent"].values()) for r in rows)
    assert p.max_node_sent == max(sum(r["sent"].values()) for r in rows)
    assert p.to_dict()["bytes_per_node"][rows[0]["role"]]["sent"] == rows[0]["sent"]


def test_measured_profile_drives_the_model():
    prof = profile_model(get_model("tiny_cnn", 10), (3, 16, 16), 4, time=True, reps=2)
    dev = DeviceProfile.from_profile(prof)
    c = Cluster(3, 0.1, 1e-4, dev)
    p = predict(prof, c, Variant("stanza", fc_workers=1), batch_per_worker=4)
    free = predict(prof, Cluster(3, 1e6, 0.0, dev), Variant("stanza", fc_workers=1), batch_per_worker=4)
    assert p.device.startswith("cpu (measured")
    assert p.iteration_s > free.iteration_s >= 4 * (prof.conv.fwd_s + prof.conv.bwd_s)
    assert p.exposed_comm_s > 0


@pytest.mark.parametrize("kw, fragment", [
    ({"global_batch": 8, "batch_per_worker": 2}, "not both"),
    ({"batch_per_worker": 0}, "batch_per_worker must be a positive integer"),
    ({"bucket_mb": 0}, "bucket_mb must be > 0"),
    ({"fc_workers": 3}, "fc_workers 3 on 4 nodes leaves an FC worker with no CONV worker"),
])
def test_predict_rejects_bad_arguments(kw, fragment):
    k = kw.pop("fc_workers", 1)
    with pytest.raises(ValueError, match=fragment):
        predict(hand_profile(), cluster(4), Variant("stanza", fc_workers=k), **kw)
    with pytest.raises(ValueError, match="expected a stanza_core.variant.Variant"):
        predict(hand_profile(), cluster(4), "stanza")
    with pytest.raises(ValueError, match="cluster must be a Cluster"):
        predict(hand_profile(), 4, Variant("ddp"))


# ---- ps deployments: dedicated servers, overlapped push --------------------------------------------

def test_ps_dedicated_servers_carry_every_workers_traffic():
    # N = 4 with S = 1 dedicated server: 3 workers push 4.8 MB each into the server's link ->
    # 14.4 ms per phase, as a single colocated shard on 4 nodes. S = 2: 2 workers, 2 servers of
    # 2.4 MB: each server takes in 2 x 2.4 MB = 4.8 ms, each worker sends 4.8 MB = 4.8 ms.
    one = predict(hand_profile(), cluster(4), Variant("ps", ps_servers=1), batch_per_worker=10)
    assert one.iteration_s == pytest.approx(0.033 + 2 * 0.0144, rel=REL)
    assert one.global_batch == 30 and one.ps_shards == 1 and one.variant.options.ps_servers == 1
    two = predict(hand_profile(), cluster(4), Variant("ps", ps_servers=2), batch_per_worker=10)
    assert two.iteration_s == pytest.approx(0.033 + 2 * 0.0048, rel=REL)
    assert two.breakdown["ps_push_s"] == pytest.approx(0.0048, rel=REL)
    assert two.bytes_per_node["ps_server"]["recv"] == {"grads": 2 * 2_400_000}


def test_ps_overlapped_push_hides_behind_the_backward():
    # bucket_mb = 1: the FC gradients (4 MB, backward 2 ms) form bucket 0, the CONV ones (0.8 MB,
    # ready at 22 ms) bucket 1. S = 2 servers hold values [0, 600k) and [600k, 1.2M).
    # Bucket 0 pushed from 2 ms: the worker sends 4 MB (4 ms), server 1 takes in 2 x 2.4 MB
    # (4.8 ms): in at 6.8 ms, long before the backward ends. Bucket 1 from 22 ms: server 0 takes
    # in 2 x 0.8 MB, in at 23.6 ms. A pull starts as soon as its piece is updated (the workers
    # post it with the push): server 1 sends bucket 0 back from 6.8 ms (2 x 2.4 MB -> 11.6 ms),
    # during the backward; server 0 sends bucket 1 back from 23.6 ms (2 x 0.8 MB -> 25.2 ms).
    # Step = fwd 11 ms + 25.2 ms; without overlap 11 + 22 + 2 x 4.8 ms.
    kw = dict(batch_per_worker=10, bucket_mb=1)
    over = predict(hand_profile(), cluster(4), Variant("ps", ps_servers=2, ps_overlap=True), **kw)
    plain = predict(hand_profile(), cluster(4), Variant("ps", ps_servers=2), **kw)
    assert over.breakdown["ps_buckets"] == 2 and plain.breakdown["ps_buckets"] == 1
    assert over.iteration_s == pytest.approx(0.0362, rel=REL)
    assert plain.iteration_s == pytest.approx(0.0426, rel=REL)
    assert over.bytes_per_step == plain.bytes_per_step and over.ranks == plain.ranks
    assert over.variant.options.ps_overlap and "as the backward produces them" in over.overlap


@pytest.mark.parametrize("n, s", [(3, 0), (5, 0), (4, 1), (6, 2)])
def test_ps_overlap_never_slower_and_free_network_costs_nothing(n, s):
    # without per-message latency (more buckets mean more messages, which can cost more)
    prof = profile_model(get_model("tiny_cnn", 10), (3, 16, 16), 4)
    for gbps in (0.01, 1.0):
        kw = dict(batch_per_worker=4, bucket_mb=0.01)
        plain = predict(prof, Cluster(n, gbps, 0.0), Variant("ps", ps_servers=s), **kw)
        over = predict(prof, Cluster(n, gbps, 0.0), Variant("ps", ps_servers=s, ps_overlap=True), **kw)
        assert over.breakdown["ps_buckets"] > 1
        assert over.iteration_s <= plain.iteration_s * (1 + 1e-9)
    free = predict(prof, Cluster(n, 1e9, 0.0), Variant("ps", ps_servers=s, ps_overlap=True), **kw)
    assert free.exposed_comm_s == pytest.approx(0.0, abs=1e-9)


def test_ps_dedicated_bytes_are_expected_bytes():
    p = predict(hand_profile(), cluster(5), Variant("ps", ps_servers=2, ps_overlap=True), global_batch=12)
    assert p.ranks == expected_bytes(hand_profile(), Variant("ps", ps_servers=2), 5, global_batch=12)
    assert p.bytes_per_step == 2 * 3 * 4_800_000
    assert p.max_node_recv == 3 * 2_400_000


@pytest.mark.parametrize("kw, fragment", [
    ({"ps_servers": 4}, "leaves no data worker among 4 nodes"),
    ({"ps_servers": 2, "ps_shards": 3}, "each dedicated server holds one shard"),
    ({"ps_servers": -1}, "ps_servers must be an integer >= 0"),
])
def test_ps_deployment_rejects_bad_arguments(kw, fragment):
    with pytest.raises(ValueError, match=fragment):
        predict(hand_profile(), cluster(4), Variant("ps", **kw))
    with pytest.raises(ValueError, match="applies to ps only"):
        predict(hand_profile(), cluster(4), Variant("ddp", ps_overlap=True))
