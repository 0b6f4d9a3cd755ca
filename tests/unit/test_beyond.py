"""Hybrid FC workers, micro-batches and compression: the batch layout (topology), the traffic
formulas and the step-time model (perf), and the optimiser's wider search."""
import pytest

from stanza_core.anatomy import PartTotals, Profile
from stanza_core.engine.config import ConfigError, TrainConfig
from stanza_core.perf import Cluster, DeviceProfile, best_assignment, expected_bytes, predict
from stanza_core.perf.optimize import COMPRESSIONS, MICRO_BATCHES, share_grid
from stanza_core.perf.traffic import ModelCounts
from stanza_core.strategies.stanza.layout import hybrid_batches
from stanza_core.strategies.stanza.wire import conv_grad_bytes, powersgd_numel
from stanza_core.topology import chunk_slices, make_topology
from stanza_core.variant import Variant

# ---- topology: who computes which samples ---------------------------------------------------


def test_hybrid_layout_covers_the_global_batch_once():
    t = make_topology(Variant("stanza", fc_workers=2, fc_conv_share=3 / 42), 5, 42)  # bh = 3, bc = (42 - 6) / 3 = 12
    assert t.fc_batch == 3 and t.conv_group == [0, 1, 2, 3, 4] and t.groups()["conv"] == [0, 1, 2, 3, 4]
    slices = [t.batch_slice(r, 42) for r in range(5)]
    assert [s.stop - s.start for s in slices] == [12, 12, 12, 3, 3]
    assert sorted(i for s in slices for i in range(s.start, s.stop)) == list(range(42))
    assert make_topology(Variant("stanza", fc_workers=2), 5, 42).groups()["conv"] == [0, 1, 2]  # paper: CONV workers only


@pytest.mark.parametrize("g,nc,k,share,want", [(24, 2, 1, 0.25, (9, 6)), (96, 3, 1, 0.25, (24, 24)),
                                               (24, 2, 2, 1 / 6, (8, 4)), (30, 3, 1, 0.0, (10, 0))])
def test_hybrid_batches(g, nc, k, share, want):
    assert hybrid_batches(g, nc, k, share) == want
    bc, bh = want
    assert nc * bc + k * bh == g


@pytest.mark.parametrize("args,fragment", [((24, 2, 1, 0.1), "2.4 samples"), ((24, 4, 1, 0.125), "do not split"),
                                           ((24, 2, 1, 23 / 24), "leaves 1 samples"), ((24, 2, 1, 1.0), "[0, 1)")])
def test_hybrid_batches_errors_are_one_line(args, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[").replace(")", r"\)")) as e:
        hybrid_batches(*args)
    assert "\n" not in str(e.value)


def test_layout_in_rank_order_and_chunks():
    t = make_topology(Variant("stanza", fc_workers=1, fc_conv_share=0.25), 3, 24)
    assert [t.batch_slice(r, 24) for r in range(3)] == [slice(0, 9), slice(9, 18), slice(18, 24)]
    assert chunk_slices(slice(9, 18), 4) == [slice(9, 12), slice(12, 14), slice(14, 16), slice(16, 18)]
    with pytest.raises(ConfigError, match="micro-batches 7 exceeds the 6 samples"):
        make_topology(Variant("stanza", fc_workers=1, fc_conv_share=0.25, micro_batches=7), 3, 24)


def test_config_rejects_options_outside_stanza_and_bad_values():
    with pytest.raises(ConfigError, match="applies to --strategy stanza only"):
        TrainConfig(strategy="ddp", micro_batches=2)
    with pytest.raises(ConfigError, match="boundary-dtype"):
        TrainConfig(boundary_dtype="int8")
    with pytest.raises(ConfigError, match="grad-compression"):
        TrainConfig(grad_compression="topk")


# ---- traffic ---------------------------------------------------------------------------------

COUNTS = ModelCounts(conv_params=1000, fc_params=50_000, boundary_values=64,
                     conv_shapes=((10, 3, 3, 3), (10,), (20, 10, 3, 3), (20,)))


def test_hybrid_fc_worker_joins_the_conv_allreduce_and_sends_nothing_of_its_own():
    rows = expected_bytes(COUNTS, Variant("stanza", fc_workers=1, fc_conv_share=0.25), 3, global_batch=24)
    ring3 = round(2 * 2 * 4 * 1000 / 3)
    assert rows[0]["sent"] == {"activations": 4 * 9 * 64, "labels": 8 * 9, "conv_grads": ring3}
    assert rows[2]["recv"] == {"activations": 4 * 18 * 64, "labels": 8 * 18, "conv_grads": ring3}
    assert rows[2]["sent"] == {"activation_grads": 4 * 18 * 64, "conv_grads": ring3}


def test_wire_dtypes_and_compressed_gradients():
    bf = expected_bytes(COUNTS, Variant("stanza", fc_workers=1, boundary_dtype="bf16", grad_compression="fp16"), 3, global_batch=24)
    assert bf[0]["sent"]["activations"] == 2 * 12 * 64 and bf[0]["sent"]["conv_grads"] == 2 * 2 * 1000 // 2
    # PowerSGD rank 1: (10, 27) -> 37, (20, 90) -> 110 values; biases (n x 1) stay whole
    assert powersgd_numel(COUNTS.conv_shapes) == 37 + 10 + 110 + 20
    assert conv_grad_bytes(COUNTS, "powersgd", step=0) == 4000  # vanilla first steps
    assert conv_grad_bytes(COUNTS, "powersgd") == 4 * 177
    same_m = expected_bytes(COUNTS, Variant("stanza", fc_workers=1, micro_batches=4), 3, global_batch=24)
    assert same_m == expected_bytes(COUNTS, Variant("stanza", fc_workers=1), 3, global_batch=24)  # chunking moves the same bytes


# ---- step time -------------------------------------------------------------------------------


def hand_profile():
    return Profile("hand", (3, 8, 8), 1, "fc", 10_000, PartTotals(200_000, 1e9), PartTotals(1_000_000, 1e6), [],
                   conv_shapes=[[200, 1000]])


def cluster(n, gbps=8.0):
    return Cluster(n, gbps, 0.0, DeviceProfile(name="hand", conv_fwd_s=1e-3, conv_bwd_s=2e-3, fc_fwd_s=1e-4,
                                               fc_bwd_s=2e-4))


def test_hybrid_share_moves_work_onto_the_idle_fc_worker():
    # N = 4, k = 1, G = 30: paper b = 10 per CONV worker; share 0.2 -> bh = 6, bc = 8
    paper = predict(hand_profile(), cluster(4, gbps=800), Variant("stanza", fc_workers=1), global_batch=30)
    hyb = predict(hand_profile(), cluster(4, gbps=800), Variant("stanza", fc_workers=1, fc_conv_share=0.2), global_batch=30)
    assert (hyb.batch_per_worker, hyb.fc_batch) == (8, 6)
    assert hyb.iteration_s < paper.iteration_s
    assert hyb.global_batch == paper.global_batch == 30


def test_micro_batches_hide_the_exchange_when_ingress_bound():
    # 0.8 Gb/s: 4 ms per 10-sample activation transfer vs 10 ms forward: chunking overlaps them
    one = predict(hand_profile(), cluster(2, gbps=0.8), Variant("stanza", fc_workers=1), batch_per_worker=10)
    four = predict(hand_profile(), cluster(2, gbps=0.8), Variant("stanza", fc_workers=1, micro_batches=5), batch_per_worker=10)
    assert four.iteration_s < one.iteration_s
    assert four.bytes_per_step == one.bytes_per_step


def test_compression_shortens_a_bandwidth_bound_step():
    slow = predict(hand_profile(), cluster(3, gbps=0.8), Variant("stanza", fc_workers=1), batch_per_worker=10)
    bf = predict(hand_profile(), cluster(3, gbps=0.8), Variant("stanza", fc_workers=1, boundary_dtype="bf16", grad_compression="powersgd"), batch_per_worker=10)
    assert bf.iteration_s < slow.iteration_s and bf.bytes_per_step < slow.bytes_per_step


# ---- optimiser ---------------------------------------------------------------------------------


def test_share_grid_gives_only_valid_shares():
    k1 = Variant("stanza", fc_workers=1)
    for s in share_grid(96, 4, k1):
        assert hybrid_batches(96, 3, 1, s)
    assert share_grid(96, 4, k1)[0] == 0.0 and len(share_grid(96, 4, k1)) <= 9


def test_optimiser_searches_share_and_m_and_never_loses_to_the_paper():
    c = cluster(4, gbps=8)
    paper = best_assignment(hand_profile(), c, batch_per_worker=10)
    wide = best_assignment(hand_profile(), c, batch_per_worker=10, shares="auto", micro_batches=MICRO_BATCHES)
    assert len(wide.ranking) > len(paper.ranking)
    assert wide.best.throughput >= paper.best.throughput
    assert wide.paper_stanza().throughput == pytest.approx(paper.best_stanza().throughput)
    comp = best_assignment(hand_profile(), c, batch_per_worker=10, shares="auto", micro_batches=(1, 2),
                           compressions=COMPRESSIONS)
    assert comp.best.throughput >= wide.best.throughput * (1 - 1e-12) or comp.best.variant.get("micro_batches", 1) <= 2
    assert {p.variant.options.grad_compression for p in comp.ranking if p.strategy == "stanza"} == {"none", "bf16", "powersgd"}


# ---- convergence variants (notebook 06) --------------------------------------------------------


def test_convergence_variants_resolve_to_engine_options():
    pytest.importorskip("plotly", reason="experiments.convergence imports nbtools, which needs plotly "
                        "(some GPU VM images lack it)")
    from stanza_core.experiments import convergence as C

    p = C.plan(steps=4, strategies=["local", "stanza_hybrid_m2", "stanza_powersgd"])
    assert p["options"]["stanza_hybrid_m2"] == {"fc_conv_share": 8 / 24, "micro_batches": 2}  # 8 of 24: an even split
    assert p["options"]["stanza_powersgd"] == {"grad_compression": "powersgd"}
    # each job resolved once: ranks, k, label and batches per role from topology (3 nodes, G = 24)
    jobs = {name: (j["nodes"], j["fc_workers"], j["label"], j["batch_per_worker"], j["fc_batch"])
            for name, j in p["jobs"].items()}
    assert jobs == {"local": (1, None, "local", 24, 0),
                    "stanza_hybrid_m2": (3, 1, "stanza k=1 share=0.333 M=2", 8, 8),  # 2 x 8 + 8 = 24
                    "stanza_powersgd": (3, 1, "stanza k=1 fp32|powersgd", 12, 0)}
    with pytest.raises(ValueError, match="strategies must be distinct names"):
        C.plan(strategies=["local", "stanza_int8"])
