"""The GPU path's host-side logic, checked on CPU: the boundary probe (device, eval mode, BN
buffers), device resolution and who prints a config error, the emulated nodes' GPU/NCCL
environment, dropout masks drawn identically on every device, the exact-mode record, and
the NCCL watchdog/wait timeout ordering."""
import types

import pytest
import torch
import torch.nn as nn

from stanza_core import train

from stanza_core.engine import exit_policy
from stanza_core.comm import join_timeout_s, nccl_watchdog_timeout_s
from stanza_core.comm.failures import HOST_RANKS_ENV
from stanza_core.engine.config import ConfigError, TrainConfig
from stanza_core.netem.host import NetemError
from stanza_core.netem.launch import gpu_env, gpu_plan, node_env
from stanza_core.numerics import numerics_record, set_numerics
from stanza_core.split import module_device, split_model


def bn_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                         nn.Flatten(), nn.Linear(16, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))


def test_probe_leaves_batch_norm_statistics_and_modes_untouched():
    model = bn_net().train()
    model[1].momentum = 1.0  # any forward in train mode would overwrite the statistics outright
    before = {k: v.clone() for k, v in model.state_dict().items()}
    split = split_model(model, input_shape=(3, 8, 8), batch_size=4)
    assert split.boundary_shape == (4, 2, 2)  # the pooled CONV output (cut before Flatten)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k  # running_mean/var and num_batches_tracked included
    assert all(m.training for m in model.modules())  # train mode restored everywhere


def test_probe_follows_the_models_device():
    # On "meta" a CPU-built probe input would fail (device mismatch): the probe must build its
    # input where the model lives, as on CUDA.
    model = bn_net().to("meta")
    assert module_device(model).type == "meta"
    split = split_model(model, input_shape=(3, 8, 8), batch_size=4)
    assert split.boundary_shape == (4, 2, 2)
    assert module_device(nn.ReLU()) == torch.device("cpu")


@pytest.fixture
def fake_gpus(monkeypatch):
    """Pretend this host has n GPUs (no CUDA call is made: set_device is recorded)."""
    chosen = []

    def make(n):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
        return chosen
    return make


def test_auto_with_fewer_gpus_than_local_ranks_is_one_host_error(fake_gpus):
    fake_gpus(1)
    with pytest.raises(ConfigError, match="4 ranks on this machine but 1 GPU") as e:
        train.rank_device(TrainConfig(device="auto"), 2, local_world=4)
    assert e.value.scope == "host" and "\n" not in str(e.value)


def test_one_gpu_per_local_rank_and_gloo_sharing(fake_gpus):
    chosen = fake_gpus(2)
    assert train.rank_device(TrainConfig(device="auto"), 1, local_world=2) == torch.device("cuda", 1)
    # gloo may put several ranks on one GPU: round-robin
    assert train.rank_device(TrainConfig(device="cuda", backend="gloo"), 3, local_world=4) == torch.device("cuda", 1)
    assert chosen == [1, 1]
    assert train.rank_device(TrainConfig(device="cpu"), 3, local_world=4) == torch.device("cpu")


def test_who_prints_a_config_error():
    job, host, rank = ConfigError("bad flag"), ConfigError("no GPU", scope="host"), ConfigError("no ckpt", scope="rank")
    assert exit_policy.error_line(job, 0, 0) == "error: bad flag" and exit_policy.error_line(job, 3, 1) is None
    assert exit_policy.error_line(host, 5, 0) == "error: rank 5: no GPU" and exit_policy.error_line(host, 6, 1) is None
    assert exit_policy.error_line(rank, 6, 1) == "error: rank 6: no ckpt"


def test_backend_validation():
    with pytest.raises(ConfigError, match="unknown backend"):
        TrainConfig(backend="mpi")
    with pytest.raises(ConfigError, match="--backend nccl needs CUDA"):
        TrainConfig(backend="nccl", device="cpu")


def test_netem_gpu_plan_and_node_environment(capsys):
    assert gpu_plan(4, "auto", gpus=8) and not gpu_plan(4, "cpu", gpus=8) and not gpu_plan(4, "auto", gpus=0)
    assert not gpu_plan(4, "auto", gpus=2) and "every node runs on CPU" in capsys.readouterr().err
    with pytest.raises(NetemError, match="4 emulated nodes need one GPU each, 2 visible"):
        gpu_plan(4, "cuda", gpus=2)
    e = gpu_env(2, "stz1-n2", "stz1-node2")
    assert e["CUDA_VISIBLE_DEVICES"] == "2" and e["NCCL_SOCKET_IFNAME"] == "stz1-n2" and e["NCCL_NET"] == "Socket"
    assert e["NCCL_P2P_DISABLE"] == e["NCCL_SHM_DISABLE"] == e["NCCL_IB_DISABLE"] == "1"
    assert e["NCCL_HOSTID"] == "stz1-node2"
    assert gpu_env(1, "x", "h", visible="4,5,6")["CUDA_VISIBLE_DEVICES"] == "5"  # node i -> i-th visible GPU
    cl = types.SimpleNamespace(prefix="stz1", nodes=[types.SimpleNamespace(iface=f"stz1-n{i}") for i in range(3)])
    envs = [node_env(cl, i, gpu=True) for i in range(3)]
    assert [v["CUDA_VISIBLE_DEVICES"] for v in envs] == ["0", "1", "2"]
    assert len({v["NCCL_HOSTID"] for v in envs}) == 3 and envs[1]["GLOO_SOCKET_IFNAME"] == "stz1-n1"
    assert node_env(cl, 0)["CUDA_VISIBLE_DEVICES"] == ""  # CPU nodes: GPUs hidden
    # every node's rank shares this host's cores: its join waits for all of them (comm.join_timeout_s)
    assert {v[HOST_RANKS_ENV] for v in envs} == {"3"}
    assert join_timeout_s(120.0, 16, 2) == 960.0 and join_timeout_s(120.0, 3, 8) == 120.0


@pytest.fixture
def restore_numerics():
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark, torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled())
    yield
    (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic,
     torch.backends.cudnn.benchmark) = saved[:4]
    torch.use_deterministic_algorithms(saved[4], warn_only=saved[5])


def test_exact_mode_is_applied_and_recorded(restore_numerics):
    rec = set_numerics(True)
    assert rec["exact"] and not rec["matmul_tf32"] and not rec["cudnn_tf32"] and rec["cudnn_deterministic"]
    assert rec["deterministic_algorithms"] == "warn_only" and rec["tolerance_vs_local"]["rtol"] == 1e-5
    assert numerics_record(False)["exact"] is False


def test_exact_flag_lands_in_metrics(monkeypatch, tmp_path, restore_numerics):
    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    m = tmp_path / "m.json"
    assert train.main(["--strategy", "local", "--steps", "2", "--global-batch", "4", "--image-size", "16",
                       "--exact", "--device", "cpu", "--metrics", str(m), "--quiet"]) == 0
    import json
    num = json.loads(m.read_text())["config"]["numerics"]
    assert num["exact"] and num["cudnn_deterministic"] and not num["cudnn_tf32"]


def test_nccl_watchdog_outlives_our_waits():
    for t in (1.0, 10.0, 120.0, 3600.0):
        assert nccl_watchdog_timeout_s(t) > t


def test_gpu_check_says_so_on_a_host_without_gpu(tmp_path):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=root)
    p = subprocess.run([sys.executable, "scripts/gpu_check.py", "--out", str(tmp_path / "o")], cwd=root, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 3 and "no CUDA GPU visible" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
