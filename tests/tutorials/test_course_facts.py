"""Statements the course makes, checked against the engine's traffic formulas (perf.expected_bytes,
which the engine's byte counters equal), the split, the H200 records and the float-order
benchmark: (a) T5 / lab 5's PS-over-Stanza limit at fixed b, and notebook 02's curve that falls
towards it; (b) T1's and split.py's cut cost counts both directions of both terms; (d) gloo holds
every send until its receive is posted (T3); (e) notebook 02's condition for k = 1 to move the
fewest bytes; (f) T2's ring volume; (g) lecture 1's DDP-over-Stanza ratio, per step and per
sample; (h) notebook 01's saving per CONV worker and on the FC worker; (i) T8's launch-bound
reading of the H200 records and its operation counts; (j) T6's one-step float-order difference."""
import importlib.util
import json

import pytest
import torch
import torch.nn.functional as F

from stanza_core import get_model, perf, split_model
from stanza_core.experiments.traffic import ratio_curve
from stanza_core.opcount import OpCounter
from stanza_core.perf.records import RECORDS_DIR
from stanza_core.reproduce import REPO_ROOT
from stanza_core.variant import Variant

# (P, P_conv, A) at 224 x 224 (the table of labs 1 and 5)
COUNTS = {"vgg16": (138_357_544, 14_714_688, 25_088), "resnet50": (25_557_032, 23_508_032, 2_048),
          "alexnet": (61_100_840, 2_469_696, 9_216)}


def _bytes(counts, strategy, N, k, G):
    return perf.totals(perf.expected_bytes(counts, Variant(strategy, fc_workers=k), N, global_batch=G))["bytes_per_step"]


@pytest.mark.parametrize("b", [1, 32])
def test_a_ps_over_stanza_tends_to_p_over_pc_plus_boundary(b):
    P, Pc, A = COUNTS["vgg16"]
    counts, N = perf.ModelCounts(Pc, P - Pc, A), 4096
    ratio = _bytes(counts, "ps", N, None, b * N) / _bytes(counts, "stanza", N, 1, b * (N - 1))
    assert ratio == pytest.approx(P / (Pc + b * (A + 1)), rel=1e-3)
    if b == 32:  # the parameter ratio alone is 5 % off at the lab's batch
        assert ratio == pytest.approx(8.92, abs=0.01) and abs(ratio / (P / Pc) - 1) > 0.04


@pytest.mark.parametrize("model,size,b", [("alexnet", 64, 4), ("cifar_alexnet", 32, 8), ("tiny_cnn", 16, 3)])
def test_b_cut_cost_is_the_conv_workers_sent_plus_received_bytes(model, size, b):
    """split.py's cost, 2*4*b*A + 2*2*4*Pc, is the CONV worker's sent + received bytes per step
    (activations, their gradients, the CONV ring) less the labels, taken at large n."""
    prof = perf.named_profile(model, image_size=size, batch_size=b)
    A, Pc = prof.boundary_values, prof.conv.params
    for nc in (2, 5, 64):
        row = perf.expected_bytes(prof, Variant("stanza", fc_workers=1), nc + 1, global_batch=b * nc)[0]
        moved = sum(row["sent"].values()) + sum(row["recv"].values())
        ring = 2 * round(2 * (nc - 1) * 4 * Pc / nc)  # sent and received
        assert moved == 2 * 4 * b * A + 8 * b + ring
    # the cost's allreduce term is the ring's sent + received at large n: 2 * 2 * 4 Pc (n - 1) / n
    assert (moved - 8 * b - 2 * 4 * b * A) * 64 / 63 == pytest.approx(2 * 2 * 4 * Pc, abs=64)


def test_b_split_counts_the_allreduce_in_both_directions():
    """The one zoo case where counting the ring only as sent chose another cut: vgg11_bn at 32 x 32
    and b = 1. Cutting before the last batch norm moves 2048 values instead of 512 per sample but
    keeps its 1,024 parameters out of the CONV allreduce: 8 * 1536 B more boundary traffic,
    16 * 1024 B less allreduce traffic (sent and received)."""
    model = get_model("vgg11_bn", 10)  # one model, split twice: split_model leaves it as it was
    split = split_model(model, input_shape=(3, 32, 32), batch_size=1)
    assert split.boundary == "features.26"
    assert split_model(model, input_shape=(3, 32, 32), batch_size=2).boundary == "avgpool"


@pytest.mark.parametrize("name", sorted(COUNTS))
@pytest.mark.parametrize("b", [1, 32, 256])
def test_e_k1_moves_fewest_bytes_only_while_pf_exceeds_pc_plus_boundary(name, b):
    P, Pc, A = COUNTS[name]
    Pf, counts, N = P - Pc, perf.ModelCounts(Pc, P - Pc, A), 8
    k1, k2 = (_bytes(counts, "stanza", N, k, b * (N - k)) for k in (1, 2))
    assert (k1 < k2) == (Pf > Pc + b * (A + 1))
    # one CONV worker fewer, one FC ring member more (each rank rounds its ring share: a few bytes)
    assert k2 - k1 == pytest.approx(8 * (Pf - Pc - b * (A + 1)), abs=2 * N)
    if name == "resnet50" and b == 32:
        assert (round(k1 / 1e6), round(k2 / 1e6)) == (1132, 960)  # notebook 02's figures


def _send_wait(rank, port, out):
    import os
    import time

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    for numel in (1, 1 << 20):  # 4 bytes, 4 MiB
        dist.barrier()
        if rank == 0:
            t0 = time.perf_counter()
            dist.send(torch.zeros(numel), 1)
            with open(out / f"send_{numel}", "w") as f:
                f.write(str(time.perf_counter() - t0))
        else:
            time.sleep(1.0)  # the receive is posted 1 s late
            dist.recv(torch.empty(numel), 0)
    dist.destroy_process_group()


@pytest.mark.slow
def test_d_gloo_holds_every_send_until_the_receive_is_posted(tmp_path):
    """T3's answer: not MPI's eager/rendezvous split. Under gloo a 4-byte send waits for the
    receive as long as a 4 MiB one does."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_send_wait, args=(port, tmp_path), nprocs=2)
    for numel in (1, 1 << 20):
        assert float((tmp_path / f"send_{numel}").read_text()) > 0.8, numel


def test_a_notebook_02_ratio_falls_with_n_towards_its_floor():
    """Notebook 02: the PS-over-Stanza curve it draws (VGG-16, k = 1, b = 32) falls with N and
    stays above P / (P_c + b(A+1)) = 8.9: a floor, not a ceiling; 10.3 at N = 8; the floor is
    P / P_c = 9.4 only with few samples (b = 1)."""
    P, Pc, A = COUNTS["vgg16"]
    curve = ratio_curve(perf.ModelCounts(Pc, P - Pc, A), per_worker=32)
    total, floor = curve["total"], P / (Pc + 32 * (A + 1))
    assert curve["nodes"][0] == 2 and total[0] > 100  # one CONV worker: no allreduce at all
    assert all(a > b for a, b in zip(total, total[1:])) and min(total) > floor
    assert total[curve["nodes"].index(8)] == pytest.approx(10.3, abs=0.05)
    assert round(floor, 1) == 8.9 and round(P / Pc, 1) == round(P / (Pc + A + 1), 1) == 9.4


@pytest.mark.parametrize("n", [2, 3, 8, 64])
def test_f_the_counted_allreduce_is_the_ring_volume(n):
    """T2: a ring member sends 2(n-1)/n of the buffer S (the counters' volume); at n = 2 that is
    S, what in-network reduction moves per GPU at any n; at large n about twice it."""
    P, Pc, A = COUNTS["alexnet"]
    S = 4 * P
    row = perf.expected_bytes(perf.ModelCounts(Pc, P - Pc, A), Variant("ddp"), n, global_batch=32 * n)[0]
    assert row["sent"]["grads"] == row["recv"]["grads"] == pytest.approx(2 * (n - 1) / n * S, abs=1)
    assert (row["sent"]["grads"] / S == pytest.approx(1.0, abs=1e-8)) == (n == 2)
    if n == 64:
        assert row["sent"]["grads"] / S > 1.95


def test_g_lecture_1_ddp_over_stanza_per_step_and_per_sample():
    """N = 8, b = 32: DDP trains 256 samples a step, Stanza k = 1 (seven CONV workers) 224. Per
    step 25x (AlexNet) and 1.3x (ResNet-50); per sample 22x and 1.1x."""
    N, b, got = 8, 32, {}
    for name in ("alexnet", "resnet50"):
        P, Pc, A = COUNTS[name]
        counts = perf.ModelCounts(Pc, P - Pc, A)
        ddp, stanza = _bytes(counts, "ddp", N, None, b * N), _bytes(counts, "stanza", N, 1, b * (N - 1))
        got[name] = (ddp / stanza, (ddp / (b * N)) / (stanza / (b * (N - 1))))
    assert [round(v) for v in got["alexnet"]] == [25, 22]
    assert [round(v, 1) for v in got["resnet50"]] == [1.3, 1.1]


def test_h_notebook_01_saving_per_conv_worker_and_on_the_fc_worker():
    """AlexNet, b = 32: a ring allreduce of the head sends 2(n-1)/n x 235 MB per node; a CONV
    worker sends its activations and labels (about 400x less at large n, 350x at n = 8), the one
    FC worker the activation gradients of all n - 1 CONV workers (about 400 / n: 50x at n = 8)."""
    P, Pc, A = COUNTS["alexnet"]
    Pf, b = P - Pc, 32
    assert round(4 * Pf / 1e6) == 235 and round(4 * b * A / 1e6, 1) == 1.2 and round(Pf / (b * A), -1) == 200

    def saving(n):
        head_ring = perf.expected_bytes(perf.ModelCounts(0, Pf, A), Variant("ddp"), n, global_batch=b * n)[0]["sent"]["grads"]
        rows = perf.expected_bytes(perf.ModelCounts(Pc, Pf, A), Variant("stanza", fc_workers=1), n, global_batch=b * (n - 1))
        conv = next(r for r in rows if r["role"] == "conv_worker")["sent"]
        fc = next(r for r in rows if r["role"] == "fc_worker")["sent"]
        assert set(fc) == {"activation_grads"} and fc["activation_grads"] == (n - 1) * 4 * b * A
        return head_ring / (conv["activations"] + conv["labels"]), head_ring / fc["activation_grads"]

    conv8, fc8 = saving(8)
    assert round(conv8, -1) == 350 and round(fc8) == 50
    conv_large, fc_large = saving(1024)
    assert round(conv_large, -2) == 400 and fc_large * 1024 == pytest.approx(400, rel=0.01)


def _h200(name, batch):
    return json.loads((RECORDS_DIR / "h200" / f"{name}-b{batch}-tf32.json").read_text())


def _line(name):
    """T8's fit T(b) = t0 + b c through the measured forward + backward at batches 64 and 128."""
    t64, t128 = (_h200(name, b)["plain_fwd_bwd_s"] for b in (64, 128))
    c = (t128 - t64) / 64
    return t64 - 64 * c, c


def test_i_t8_alexnet_is_launch_bound_at_16_and_on_the_edge_at_32():
    """The line's fixed part is half the step at t0 / c (lab 8's rule): batch 19 for AlexNet, 4.7
    for VGG-16. At 32, t0 is 37 % of the line's 2.7 ms, yet the measured step lies 1.13x above
    it (1.7x at 16): the host's floor, ~3.1 ms, which the line reaches at batch 41."""
    t0, c = _line("alexnet")
    assert t0 / c == pytest.approx(19.0, abs=0.05)
    assert _line("vgg16")[0] / _line("vgg16")[1] == pytest.approx(4.7, abs=0.05)
    assert t0 / (t0 + 32 * c) == pytest.approx(0.37, abs=0.005) and t0 + 32 * c == pytest.approx(2.7e-3, abs=0.05e-3)
    m16, m32 = (_h200("alexnet", b)["plain_fwd_bwd_s"] for b in (16, 32))
    assert m16 / (t0 + 16 * c) == pytest.approx(1.7, abs=0.05) and m32 / (t0 + 32 * c) == pytest.approx(1.13, abs=0.005)
    assert m16 == pytest.approx(3.1e-3, abs=0.05e-3) and (m16 - t0) / c == pytest.approx(41, abs=0.5)


def _count(fn):
    """aten calls dispatched while fn() runs (the engine's own counter, stanza_core.opcount)."""
    with OpCounter() as counter:
        fn()
    return counter.total


def test_i_t8_alexnet_dispatches_about_110_calls_and_sgd_foreach_a_handful():
    """T8: 111 aten calls in AlexNet's forward, loss and backward, ~28 µs each of the 3.1 ms
    measured at batch 16; SGD's step 50 calls as a per-parameter loop, 5 as foreach (CUDA's
    default for CUDA tensors)."""
    from torch.optim.optimizer import _default_to_fused_or_foreach

    torch.manual_seed(0)
    net = get_model("alexnet", 1000)
    x, y = torch.randn(2, 3, 64, 64), torch.randint(1000, (2,))
    sgd = {}
    for foreach in (False, True):
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, foreach=foreach)
        for _ in range(2):  # the second step: momentum buffers exist
            opt.zero_grad()
            fwd_bwd = _count(lambda: F.cross_entropy(net(x), y).backward())
            sgd[foreach] = _count(opt.step)
    assert fwd_bwd == 111 and sgd == {False: 50, True: 5}
    assert _h200("alexnet", 16)["plain_fwd_bwd_s"] / fwd_bwd * 1e6 == pytest.approx(28, abs=0.5)
    # the default picks foreach only for tensors on a foreach device (CUDA), the loop on the CPU
    assert _default_to_fused_or_foreach(list(net.parameters()), False, False) == (False, False)


def test_j_t6_one_step_from_the_same_parameters_differs_by_about_1e_minus_6():
    """T6: the gradient of one step from the same fp32 parameters, summed over chunks of 4 or the
    whole batch of 24, differs by about 1e-6 relative (not 1e-7), far below a max-pool switch's
    ~1e-4. The benchmark's functions, one thread (deterministic kernels)."""
    from stanza_core.data import batch_indices, open_dataset

    spec = importlib.util.spec_from_file_location("float_order_drift", REPO_ROOT / "benchmarks" / "float_order_drift.py")
    fod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fod)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        q = dict(fod.QUICK, steps=6)
        G = q["global_batch"]
        ds = open_dataset("digits", 32, 10, q["seed"])
        batches = [ds.get(batch_indices(ds, t, G, q["seed"], slice(0, G))) for t in range(q["steps"])]
        params = fod.train(batches, G, torch.float32, q)[1]

        def grad_at(state, t, chunk):
            net = get_model(q["model"], 10)
            net.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
            x, y = batches[t]
            for s in range(0, G, chunk):
                with fod.sample_keys(q["seed"], t, torch.arange(s, s + chunk)):
                    (F.cross_entropy(net(x[s:s + chunk]), y[s:s + chunk], reduction="sum") / G).backward()
            return {k: p.grad.double() for k, p in net.named_parameters()}

        diffs = []
        for t in range(1, q["steps"]):
            a, b = grad_at(params[t - 1], t, 4), grad_at(params[t - 1], t, G)
            diffs.append(max(float((a[k] - b[k]).norm() / b[k].norm()) for k in b))
    finally:
        torch.set_num_threads(threads)
    assert all(3e-7 < d < 5e-6 for d in diffs), diffs


def _lab_text(lab):
    return " ".join((REPO_ROOT / "tutorials" / "labs" / "source" / lab / f"{lab}.py").read_text().replace("#", " ").split())


def test_ddp_gives_the_first_bucket_the_explicit_cap_and_1_mib_only_by_default():
    """Lab 10's statement: with an explicit bucket_cap_mb the installed torch's DDP gives the first
    bucket that cap too; only its default cap gives the first bucket dist._DEFAULT_FIRST_BUCKET_BYTES."""
    import os
    import socket

    import torch.distributed as dist
    from torch import nn
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        model = nn.Linear(8, 4)
        explicit = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=3.0)._bucket_config
        default = nn.parallel.DistributedDataParallel(model)._bucket_config
    finally:
        dist.destroy_process_group()
    assert explicit.first_bucket_bytes_cap == explicit.bucket_bytes_cap == 3 * 2**20
    assert default.first_bucket_bytes_cap == dist._DEFAULT_FIRST_BUCKET_BYTES == 2**20 < default.bucket_bytes_cap
    text = _lab_text("lab10")
    assert "caps its first bucket at 1 MiB" not in text
    assert "with an explicit cap, as here, the first bucket has that cap too" in text
    assert "with an explicit cap, as here, DDP's first bucket has that cap too" in text


def test_lab10_attributes_each_bucket_rule_as_lecture_3_does():
    """Lecture 3 gives DDP's "at least" rule and names "before it would exceed" as the engine's variant."""
    l3 = " ".join((REPO_ROOT / "tutorials" / "lectures" / "l3_overlap.py").read_text().replace("#", " ").split())
    assert "*at least* `bucket_cap_mb`" in l3 and "*before* it would exceed the cap" in l3
    text = _lab_text("lab10")
    assert "lecture 3's \"closes before it would exceed\"" not in text
    assert "which lecture 3 names as the engine's variant of DDP's \"at least\" rule" in text


def test_t6_calls_single_process_sgd_by_its_name():
    """"Local SGD" names periodic averaging of workers that step apart; T6's strategies all compute
    one process's SGD on the global batch."""
    for name in ("t6_convergence.py", "t6_convergence.ipynb", "t6_models.py"):
        text = (REPO_ROOT / "tutorials" / name).read_text().replace('"local SGD"', "").replace('\\"local SGD\\"', "")
        assert "local SGD" not in text, name
    assert "single-process SGD on the same" in (REPO_ROOT / "tutorials" / "t6_convergence.py").read_text()


def test_the_syllabus_names_the_tutorials_each_coding_lab_goes_with():
    import re
    syllabus = (REPO_ROOT / "docs" / "course.md").read_text()
    for lab in ("lab9", "lab10", "lab11"):
        header = (REPO_ROOT / "tutorials" / "labs" / "source" / lab / f"{lab}.py").read_text()
        said = re.search(r"goes with tutorials? ([^)]*)\)", header)
        if not said:
            continue
        tutorials = re.findall(r"T\d", said.group(1))
        line = re.search(rf"- Lab {lab[3:]} \(\d+ points, after ([^)]*)\)", syllabus)
        assert line and re.findall(r"T\d", line.group(1)) == tutorials, (lab, said.group(1), line and line.group(1))
