"""Statements the course makes, checked against the engine's traffic formulas (perf.expected_bytes,
which the engine's byte counters equal) and the split: (a) T5 / lab 5's PS-over-Stanza limit at
fixed b; (b) T1's and split.py's cut cost counts both directions of both terms; (e) notebook 02's
condition for k = 1 to move the fewest bytes."""
import pytest
import torch

from stanza_core import get_model, perf, split_model

# (P, P_conv, A) at 224 x 224 (the table of labs 1 and 5)
COUNTS = {"vgg16": (138_357_544, 14_714_688, 25_088), "resnet50": (25_557_032, 23_508_032, 2_048),
          "alexnet": (61_100_840, 2_469_696, 9_216)}


def _bytes(counts, strategy, N, k, G):
    return perf.totals(perf.expected_bytes(counts, strategy, N, k, global_batch=G))["bytes_per_step"]


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
        row = perf.expected_bytes(prof, "stanza", nc + 1, 1, global_batch=b * nc)[0]
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
    split = split_model(get_model("vgg11_bn", 10), input_shape=(3, 32, 32), batch_size=1)
    assert split.boundary == "features.26"
    assert split_model(get_model("vgg11_bn", 10), input_shape=(3, 32, 32), batch_size=2).boundary == "avgpool"


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
