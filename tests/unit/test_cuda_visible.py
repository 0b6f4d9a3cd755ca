"""Where CUDA is visible, every CPU path still chooses CPU when asked to (runs on CPU-only CI).

The fixture makes this process believe two CUDA GPUs are present (torch.cuda.is_available ->
True, device_count -> 2) and replaces the torch.cuda calls that would do GPU work (set_device,
synchronize, events, streams, device queries) with recorders. A CPU path that consulted CUDA
anyway shows up as a recorded call, a cuda device in its result, or (on a machine without a
GPU) a failed CUDA tensor operation. The checks that "auto" picks CUDA under the same fake show
that the fake takes effect, so the CPU checks can fail."""
import json
import socket

import pytest
import torch
import torch.distributed as dist

from stanza_core import train
from stanza_core.engine.config import TrainConfig
from stanza_core.netem.launch import gpu_plan

# torch.cuda calls that act on (or ask about) a real GPU; the fake records them instead
GPU_WORK = ("set_device", "synchronize", "Event", "Stream", "current_stream", "stream", "current_device",
            "get_device_name", "get_device_properties", "get_device_capability", "mem_get_info",
            "memory_allocated", "max_memory_allocated", "reset_peak_memory_stats", "empty_cache", "init")


class FakeCuda:
    """What the code under test asked of the fake CUDA: `availability` (is_available and
    device_count calls) and `work` (any call of GPU_WORK), each as (name, args)."""

    def __init__(self, monkeypatch, gpus: int = 2):
        self.availability: list[str] = []
        self.work: list[tuple[str, tuple]] = []

        def available():
            self.availability.append("is_available")
            return True

        def count():
            self.availability.append("device_count")
            return gpus

        monkeypatch.setattr(torch.cuda, "is_available", available)
        monkeypatch.setattr(torch.cuda, "device_count", count)
        for name in GPU_WORK:
            monkeypatch.setattr(torch.cuda, name, self._recorder(name))

    def _recorder(self, name):
        def call(*args, **kwargs):
            self.work.append((name, args))
            return "Fake GPU" if name == "get_device_name" else None
        return call

    def forget(self):
        self.availability.clear()
        self.work.clear()


@pytest.fixture
def cuda(monkeypatch) -> FakeCuda:
    return FakeCuda(monkeypatch)


def test_the_fake_takes_effect_auto_picks_cuda(cuda):
    assert train.rank_device(TrainConfig(device="auto"), 1, local_world=2) == torch.device("cuda", 1)
    assert ("set_device", (1,)) in cuda.work and "is_available" in cuda.availability
    assert train.rank_device(TrainConfig(device="cuda"), 0, local_world=1) == torch.device("cuda", 0)
    assert gpu_plan(2, "auto")  # the emulated nodes would take one GPU each


def test_train_rank_device_cpu_never_asks_cuda(cuda):
    for cfg in (TrainConfig(device="cpu"), TrainConfig(device="cpu", backend="gloo")):
        for rank, local_world in ((0, 1), (1, 2), (3, 4), (7, 8)):
            assert train.rank_device(cfg, rank, local_world=local_world) == torch.device("cpu")
    assert cuda.availability == [] and cuda.work == []


def test_cpu_configs_keep_gloo_and_refuse_nccl(cuda):
    from stanza_core.engine.config import ConfigError

    assert TrainConfig(device="cpu").backend == "auto"
    with pytest.raises(ConfigError, match="--backend nccl needs CUDA"):
        TrainConfig(device="cpu", backend="nccl")
    assert cuda.work == []


def test_netem_nodes_stay_on_cpu_when_told(cuda):
    assert not gpu_plan(2, "cpu")
    assert cuda.availability == [] and cuda.work == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("strategy", ["local", "ddp"])
def test_a_cpu_training_run_computes_on_cpu_over_gloo(cuda, as_rank0_of, monkeypatch, tmp_path, strategy):
    """The whole training CLI in-process with --device cpu: device, backend (a real gloo group of
    one rank for ddp), model and metrics all CPU, and no GPU call made."""
    as_rank0_of(1)
    if strategy == "ddp":  # a process group of one: the backend choice is exercised for real
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    m, saved = tmp_path / "m.json", tmp_path / "model.pt"
    try:
        code = train.main(["--strategy", strategy, "--device", "cpu", "--steps", "2", "--global-batch", "4",
                           "--image-size", "16", "--metrics", str(m), "--save", str(saved), "--quiet"])
    finally:  # a group of one rank is left to the process's exit by the CLI; this process goes on
        if dist.is_initialized():
            dist.destroy_process_group()
    assert code == 0
    config = json.loads(m.read_text())["config"]
    assert config["device_type"] == "cpu"
    assert config["backend"] == ("gloo" if strategy == "ddp" else "none")
    state = torch.load(saved, weights_only=True)
    assert state and all(v.device.type == "cpu" for v in state.values())
    assert cuda.work == [], cuda.work


def test_perf_calibrate_on_cpu_measures_the_cpu(cuda, tmp_path, capsys):
    from stanza_core.perf.__main__ import main

    out = tmp_path / "cpu.json"
    assert main(["calibrate", "--model", "tiny_cnn", "--device", "cpu", "--image-size", "16", "--num-classes", "10",
                 "--batch", "2", "--warmup", "0", "--reps", "1", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["name"].startswith("cpu (measured")
    assert cuda.work == [], cuda.work


def test_profile_model_timed_on_cpu(cuda):
    from stanza_core import get_model, profile_model

    p = profile_model(get_model("tiny_cnn", 10), (3, 16, 16), 2, time=True, device="cpu", reps=1)
    assert p.timed_on == "cpu" and cuda.work == []


def test_notebook_device_cpu_and_experiments_specs_stay_on_cpu(cuda):
    from stanza_core.experiments import convergence, traffic
    from stanza_core.runs.runconfig import RunConfig
    from stanza_core.local_device import local_device

    assert local_device("auto") == "cuda"  # the fake is seen here too
    cuda.forget()
    assert local_device("cpu") == "cpu"
    assert convergence.plan(steps=2, device="cpu")["device"] == "cpu"
    assert {c["device"] for c in traffic.plan(["tiny_cnn"], [3], [1], per_worker=2, steps=2, image_size=32,
                                              num_classes=10, device="cpu")} == {"cpu"}
    args = RunConfig(model="tiny_cnn", image_size=16, num_classes=10, nodes=2, strategy="ddp", fc_workers=0,
                     global_batch=4, steps=2, warmup=0, link_mbit=100.0).train_args("m.json")
    assert args[args.index("--device") + 1] == "cpu"
    assert cuda.availability == [] and cuda.work == []
