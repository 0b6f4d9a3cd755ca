"""Per-rank, per-category bytes against the hand formulas of docs/architecture.md."""
import itertools
from fractions import Fraction

import pytest

from stanza_core import get_model, profile_model
from stanza_core.perf import ModelCounts, expected_bytes, ps_shard_sizes, totals
from stanza_core.perf.traffic import model_layout, rank_bytes, split_batch, summary_bytes
from stanza_core.variant import Variant


def counts(pc, pf, a):
    return {"conv_params": pc, "fc_params": pf, "boundary_values": a}


def test_ps_shard_sizes_even_flat_split():
    assert ps_shard_sizes(10, 3) == [4, 3, 3]
    assert ps_shard_sizes(9, 3) == [3, 3, 3]
    for p, s in itertools.product([1, 7, 1000, 123_457], [1, 2, 3, 7]):
        if s <= p:
            sizes = ps_shard_sizes(p, s)
            assert sum(sizes) == p and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("n, p", [(2, 1000), (3, 1000), (4, 1000), (7, 12_345)])
def test_ddp_every_rank_moves_the_ring_share(n, p):
    exact = Fraction(2 * (n - 1), n) * 4 * p
    rows = expected_bytes(counts(p // 3, p - p // 3, 5), Variant("ddp"), n, global_batch=n * 2)
    assert [r["role"] for r in rows] == ["worker"] * n
    for r in rows:
        assert r["sent"] == {"grads": round(exact)} and r["recv"] == {"grads": round(exact)}


def test_ring_fraction_is_rounded_half_to_even_at_report_time():
    # 16 ranks: 2*15/16 * 4P = 7.5 P bytes; P = 1 -> 7.5 -> 8, P = 3 -> 22.5 -> 22 (Python's round)
    assert expected_bytes(counts(0, 1, 1), Variant("ddp"), 16, global_batch=16)[0]["sent"]["grads"] == 8
    assert expected_bytes(counts(1, 2, 1), Variant("ddp"), 16, global_batch=16)[0]["sent"]["grads"] == 22


def test_ps_three_shards_on_five_ranks_by_hand():
    # P = 10 values -> shards of 4, 3, 3 values = 16, 12, 12 bytes on ranks 0, 1, 2
    rows = expected_bytes(counts(4, 6, 2), Variant("ps", ps_shards=3), 5, global_batch=5)
    r0, r1, r3 = rows[0], rows[1], rows[3]
    assert r0["sent"] == {"grads": 24, "params": 4 * 16} and r0["recv"] == {"grads": 4 * 16, "params": 24}
    assert r1["sent"] == {"grads": 28, "params": 4 * 12} and r1["recv"] == {"grads": 4 * 12, "params": 28}
    assert r3["sent"] == {"grads": 40} and r3["recv"] == {"params": 40}  # no shard: pushes and pulls all


def test_ps_default_is_one_shard_per_rank():
    assert expected_bytes(counts(4, 6, 2), Variant("ps"), 3, global_batch=3) == \
        expected_bytes(counts(4, 6, 2), Variant("ps", ps_shards=3), 3, global_batch=3)


def test_stanza_k2_by_hand():
    # N = 5, k = 2: CONV workers 0,1,2 (b = 4), FC worker 3 serves 0 and 2, FC worker 4 serves 1
    rows = expected_bytes(counts(100, 1000, 7), Variant("stanza", fc_workers=2), 5, global_batch=12)
    conv_ar = round(Fraction(2 * 2, 3) * 400)  # 533.33 -> 533
    for i in range(3):
        assert rows[i]["role"] == "conv_worker"
        assert rows[i]["sent"] == {"activations": 4 * 4 * 7, "labels": 8 * 4, "conv_grads": conv_ar}
        assert rows[i]["recv"] == {"activation_grads": 4 * 4 * 7, "conv_grads": conv_ar}
    fc_ar = 4000  # 2(k-1)/k * 4 Pf with k = 2
    assert rows[3] == {"rank": 3, "role": "fc_worker",
                       "sent": {"activation_grads": 2 * 112, "fc_grads": fc_ar},
                       "recv": {"activations": 2 * 112, "labels": 2 * 32, "fc_grads": fc_ar}}
    assert rows[4]["recv"] == {"activations": 112, "labels": 32, "fc_grads": fc_ar}


def test_stanza_k1_has_no_fc_allreduce_and_one_conv_worker_no_conv_allreduce():
    rows = expected_bytes(counts(100, 1000, 7), Variant("stanza", fc_workers=1), 3, global_batch=4)
    assert "fc_grads" not in rows[2]["sent"] and rows[2]["recv"]["activations"] == 2 * 4 * 2 * 7
    rows = expected_bytes(counts(100, 1000, 7), Variant("stanza", fc_workers=1), 2, global_batch=4)
    assert rows[0]["sent"] == {"activations": 4 * 4 * 7, "labels": 32}


@pytest.mark.parametrize("n, k", [(2, 1), (4, 1), (4, 2), (7, 2), (9, 4), (16, 5), (16, 8)])
@pytest.mark.parametrize("pc, pf, a", [(3, 5, 1), (1000, 70_001, 33)])
def test_stanza_formulas_over_n_and_k(n, k, pc, pf, a):
    nc, b = n - k, 3
    rows = expected_bytes(counts(pc, pf, a), Variant("stanza", fc_workers=k), n, global_batch=nc * b)
    conv_ar, fc_ar = round(Fraction(2 * (nc - 1), nc) * 4 * pc), round(Fraction(2 * (k - 1), k) * 4 * pf)
    for j in range(k):
        m = len(range(j, nc, k))  # CONV workers i with i % k == j
        r = rows[nc + j]
        assert r["recv"].get("activations", 0) == m * 4 * b * a and r["recv"].get("labels", 0) == m * 8 * b
        assert r["sent"].get("activation_grads", 0) == m * 4 * b * a
        assert r["sent"].get("fc_grads", 0) == fc_ar == r["recv"].get("fc_grads", 0)
    assert all(rows[i]["sent"].get("conv_grads", 0) == conv_ar for i in range(nc))
    # point-to-point traffic is conserved: what CONV workers send, FC workers receive
    for cat in ("activations", "labels"):
        assert sum(r["sent"].get(cat, 0) for r in rows) == sum(r["recv"].get(cat, 0) for r in rows)


@pytest.mark.parametrize("strategy, n, k, s", [("ddp", 1, None, None), ("ddp", 5, None, None),
                                               ("ps", 1, None, None), ("ps", 6, None, 1), ("ps", 6, None, 4),
                                               ("ps", 6, None, None), ("stanza", 2, 1, None),
                                               ("stanza", 9, 2, None), ("stanza", 33, 7, None),
                                               ("stanza", 8, 4, None)])
@pytest.mark.parametrize("g_per", [1, 3])
def test_summary_equals_the_sum_of_rows(strategy, n, k, s, g_per):
    c = ModelCounts(1001, 70_003, 37)
    nd = n - (k or 0)
    v = Variant(strategy, fc_workers=k, ps_shards=s)
    for extra in (0, 1, nd - 1):  # even and uneven splits
        batches = split_batch(g_per * nd + extra, nd)
        topo, _ = model_layout(v, n, sum(batches))
        rows = rank_bytes(c, v, topo, batches)
        assert summary_bytes(c, v, topo, batches) == totals(rows)


@pytest.mark.parametrize("strategy, n, k, servers", [("ddp", 4, None, 0), ("ps", 4, None, 0), ("ps", 5, None, 1),
                                                     ("ps", 7, None, 3), ("ps", 2, None, 1), ("stanza", 5, 2, 0)])
def test_summary_counts_batch_norm_traffic_as_the_rows_do(strategy, n, k, servers):
    """Batch-norm statistics (global) in every layout, dedicated ps servers included (they run
    no forward pass: the statistics move among the data workers only)."""
    c = ModelCounts(1001, 70_003, 37, bn_conv_channels=96, bn_fc_channels=24)
    v = Variant(strategy, fc_workers=k, ps_servers=servers)
    topo, batches = model_layout(v, n, 12)
    assert batches == split_batch(12, n - (k or 0) - servers)
    rows = rank_bytes(c, v, topo, batches)
    assert summary_bytes(c, v, topo, batches) == totals(rows)
    data_rows = [r for r in rows if r["role"] in ("worker", "conv_worker")]
    assert all(r["sent"].get("bn_stats", 0) > 0 for r in data_rows) == (len(data_rows) > 1)


def test_expected_bytes_from_a_real_profile():
    prof = profile_model(get_model("tiny_cnn", 10), (3, 16, 16), 2)
    rows = expected_bytes(prof, Variant("stanza", fc_workers=1), 3, global_batch=4)
    assert rows[0]["sent"]["activations"] == 4 * 2 * prof.boundary_values
    assert rows[0]["sent"]["conv_grads"] == round(Fraction(2, 2) * 4 * prof.conv.params)


@pytest.mark.parametrize("call, fragment", [
    (lambda: expected_bytes(counts(1, 1, 1), Variant("ddp"), 4, global_batch=6), "does not split evenly over 4"),
    (lambda: expected_bytes(counts(1, 1, 1), Variant("stanza", fc_workers=4), 4, global_batch=8), "fc_workers 4 leaves no CONV worker with 4 nodes"),
    (lambda: expected_bytes(counts(1, 1, 1), Variant("stanza", fc_workers=3), 5, global_batch=8), "k <= N - k, i.e. k <= 2"),
    (lambda: expected_bytes(counts(1, 1, 1), Variant("stanza", fc_workers=1), 1, global_batch=8), "at least 2 nodes"),
    (lambda: expected_bytes(counts(1, 1, 1), Variant("ps", ps_shards=5), 4, global_batch=8), "ps_shards 5 exceeds the 4 nodes"),
    (lambda: expected_bytes(counts(1, 1, 1), Variant("ddp", fc_workers=1), 4, global_batch=8), "stanza only"),
    (lambda: expected_bytes(counts(1, 1, 1), Variant("allreduce"), 4, global_batch=8), "unknown strategy"),
    (lambda: expected_bytes(counts(1, 1, 1), Variant("ddp"), 4, global_batch=2), "global_batch must be"),
    (lambda: expected_bytes({"conv_params": 1}, Variant("ddp"), 4, global_batch=8), "need fc_params, boundary_values"),
])
def test_bad_configurations_fail_in_one_line(call, fragment):
    with pytest.raises(ValueError, match=fragment) as e:
        call()
    assert "\n" not in str(e.value)
