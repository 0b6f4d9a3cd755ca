"""Every exercise's solution (tutorials/solutions/t1 ... t5) checked against the engine, the
topology or the performance model, so an exercise can never silently go wrong."""
import dataclasses
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

from stanza_core import get_model, perf, profile_model
from stanza_core.data import batch_indices, open_dataset
from stanza_core.models import sample_keys
from stanza_core.strategies.stanza import GradBuckets
from stanza_core.topology import make_topology
from tutorials.solutions import t1, t2, t3, t4, t5


# -- T1 ------------------------------------------------------------------------------------------
def test_t1_fc_param_share_equals_the_profile():
    # parameter counts do not depend on the input size: 64x64 keeps the test cheap
    for name, share in (("vgg16", 0.894), ("resnet50", 0.080)):
        got = t1.fc_param_share(name, image_size=64)
        assert got == pytest.approx(share, abs=5e-4)
        assert got == pytest.approx(perf.named_profile(name, image_size=64).fc_param_share(), rel=1e-12)
    assert "8 %" in t1.why_resnet_gains_little()


def test_t1_boundary_bytes_equal_expected_bytes():
    sent, recv = t1.boundary_bytes_per_step("alexnet", 64, 4)
    row = perf.expected_bytes(perf.named_profile("alexnet", image_size=64), "stanza", 2, 1, global_batch=4)[0]
    assert sent == row["sent"]["activations"] + row["sent"]["labels"] and recv == row["recv"]["activation_grads"]


# -- T2 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("N,k,G", [(3, 1, 6), (4, 2, 8), (5, 2, 6), (7, 3, 8)])
def test_t2_total_bytes_equal_the_model(N, k, G):
    prof = profile_model(get_model("tiny_cnn", 10), (3, 16, 16), batch_size=2)
    want = perf.totals(perf.expected_bytes(prof, "stanza", N, k, G))["bytes_per_step"]
    assert t2.stanza_bytes_per_step(prof.conv.params, prof.fc.params, prof.boundary_values, N, k, G) == want


@pytest.mark.parametrize("N,k,G", [(4, 2, 8), (5, 2, 6), (7, 3, 8)])
def test_t2_samples_per_fc_worker_equal_the_model(N, k, G):
    counts = perf.ModelCounts(10, 10, 1)  # A = 1 value: activation bytes / 4 = samples
    rows = perf.expected_bytes(counts, "stanza", N, k, G)
    assert t2.samples_per_fc_worker(N, k, G) == {r["rank"]: r["recv"]["activations"] // 4
                                                 for r in rows if r["role"] == "fc_worker"}
    assert t2.samples_per_fc_worker(4, 2, 8)[2] == 4  # FC rank 2 serves CONV worker 0 only (b = 4)


def test_t2_loss_scale_error_is_what_autograd_gives():
    torch.manual_seed(0)
    model, G, nc = get_model("tiny_cnn", 10).eval(), 6, 2
    x, y = torch.randn(G, 3, 16, 16), torch.randint(10, (G,))
    with torch.no_grad():
        right = sum(F.cross_entropy(model(x[i::nc]), y[i::nc], reduction="sum") / G for i in range(nc))
        wrong = sum(F.cross_entropy(model(x[i::nc]), y[i::nc]) for i in range(nc))
    assert float(wrong / right) == pytest.approx(t2.loss_scale_error(G, nc), rel=1e-5) == nc


# -- T3 ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_t3_plain_run_with_two_fc_workers_equals_local_sgd(tmp_path):
    N, k, G, seed = 4, 2, 8, 0
    got = t3.plain_run(N, k, G, 1, tmp_path)
    torch.manual_seed(seed)  # the oracle: one momentum-SGD step of one process on the whole batch
    model = get_model("tiny_cnn", 10)
    data = open_dataset("synthetic", 16, 10, seed)
    x, y = data.get(batch_indices(data, 0, G, seed, slice(0, G)))
    with sample_keys(seed, 0, torch.arange(G)):
        (F.cross_entropy(model(x), y, reduction="sum") / G).backward()
    torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9).step()
    assert got.keys() == dict(model.named_parameters()).keys()
    for n, p in model.named_parameters():
        torch.testing.assert_close(got[n], p.detach(), rtol=1e-5, atol=1e-6)


def test_t3_label_bytes():
    counts = perf.ModelCounts(10, 10, 256)
    rows = perf.expected_bytes(counts, "stanza", 3, 1, 6)
    assert t3.label_bytes_per_step(6) == sum(r["sent"].get("labels", 0) for r in rows)
    boundary = sum(r["sent"].get(c, 0) for r in rows for c in ("activations", "activation_grads", "labels"))
    assert t3.label_share_of_boundary(256) == pytest.approx(t3.label_bytes_per_step(6) / boundary)


# -- T4 ------------------------------------------------------------------------------------------
def _bar(what, start, end, peer=None):
    return {"rank": 0, "lane": "compute", "what": what, "category": "x", "peer": peer, "bytes": 0,
            "start": start, "end": end}


def test_t4_hidden_fraction_of_hand_made_bars():
    bars = [_bar("backward", 1.0, 3.0), _bar("allreduce", 2.0, 4.0), _bar("allreduce", 3.5, 4.5)]
    assert t4.hidden_fraction(bars) == pytest.approx(1.0 / 3.0)  # 1 s of 3 s inside [1, 3]
    assert t4.hidden_fraction([_bar("backward", 0, 1), _bar("allreduce", 1, 2)]) == 0.0


def test_t4_pipeline_order_reads_the_fc_worker():
    tl = [{"step": 0, "t": t, "event": ev, "category": "compute", "peer": peer, "bytes": 0}
          for t, ev, peer in ((0.1, "forward_start", 1), (0.2, "backward_end", 1),
                              (0.3, "forward_start", 0), (0.4, "backward_end", 0))]
    metrics = {"ranks": [{"rank": 0, "role": "conv_worker", "timeline": []},
                         {"rank": 2, "role": "fc_worker", "timeline": tl}]}
    assert t4.pipeline_order(metrics, 0) == [1, 0]


@pytest.mark.parametrize("mb", [0.05, 0.5, 25.0])
def test_t4_bucket_count_equals_the_engine(mb):
    from stanza_core import split_model
    split = split_model(get_model("cifar_alexnet", 10), input_shape=(3, 32, 32))
    engine = GradBuckets(list(split.conv.parameters()), None, "conv", "conv_grads", mb, torch.device("cpu"))
    assert t4.bucket_count("cifar_alexnet", mb) == len(engine.buckets)


# -- T5 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,gbps,lat", [(2, 10, 5e-5), (16, 40, 0.0), (1, 10, 5e-5)])
def test_t5_allreduce_seconds(n, gbps, lat):
    assert t5.allreduce_seconds(553e6, n, gbps, lat) == pytest.approx(
        perf.Cluster(max(n, 1), gbps, lat).ring_allreduce_s(553e6, n), rel=1e-12)


@pytest.mark.parametrize("model,size,nodes,gbps", [("vgg16", 32, 16, 10.0), ("alexnet", 64, 8, 1.0),
                                                   ("vgg16", 32, 32, 100.0)])
def test_t5_best_stanza_k_equals_the_optimiser(model, size, nodes, gbps):
    prof, cluster = perf.named_profile(model, image_size=size), perf.Cluster(nodes, gbps, device="v100")
    assert t5.best_stanza_k(prof, cluster, 32) == perf.best_assignment(prof, cluster, batch_per_worker=32).best_stanza().fc_workers


def test_t5_ratio_tends_to_p_over_pconv():
    prof = perf.named_profile("vgg16", image_size=32)  # counts of parameters: any input size
    limit = t5.ps_over_stanza_limit(prof.params, prof.conv.params)
    assert limit == pytest.approx(9.40, abs=0.01)
    ratios = []
    for n in (16, 128, 1024):  # one sample per worker: the activations' share vanishes
        ps = perf.predict(prof, perf.Cluster(n, 10.0), "ps", batch_per_worker=1, with_ranks=False)
        st = perf.predict(prof, perf.Cluster(n, 10.0), "stanza", 1, batch_per_worker=1, with_ranks=False)
        ratios.append(ps.bytes_per_step / st.bytes_per_step)
    assert ratios == sorted(ratios, reverse=True) and ratios[-1] == pytest.approx(limit, rel=0.01)
