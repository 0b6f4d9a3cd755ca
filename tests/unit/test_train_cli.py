"""Bad input: one line on stderr and exit 2, before any process group forms.

`main()` runs in-process with torchrun's environment variables set: a process group would need
MASTER_ADDR, which is not set, so reaching it would fail differently (and the check below that
no group was initialised would catch it)."""
import pytest
import torch.distributed as dist

from stanza_core import train


@pytest.fixture
def as_rank0_of(monkeypatch):
    def setenv(world):
        monkeypatch.setenv("RANK", "0")
        monkeypatch.setenv("LOCAL_RANK", "0")
        monkeypatch.setenv("WORLD_SIZE", str(world))
        monkeypatch.delenv("MASTER_ADDR", raising=False)
    return setenv


CASES = [
    (4, ["--strategy", "allgather"], "unknown strategy 'allgather'"),
    (4, ["--strategy", "ddp", "--model", "lenet9"], "unknown model 'lenet9'; expected one of"),
    (4, ["--strategy", "ddp", "--dataset", "mnist"], "unknown dataset 'mnist'"),
    (3, ["--strategy", "stanza", "--fc-workers", "3", "--global-batch", "12"], "leaves no CONV worker"),
    (4, ["--strategy", "stanza", "--fc-workers", "0", "--global-batch", "12"], "--fc-workers must be >= 1"),
    (3, ["--strategy", "ddp", "--global-batch", "10"], "not divisible by the 3 data workers"),
    (4, ["--strategy", "stanza", "--model", "tiny_cnn", "--boundary", "features.0", "--global-batch", "12"], "not a single-tensor cut"),
    (4, ["--strategy", "ddp", "--dataset", "cifar10:/nonexistent/cifar"], "is not a directory"),
    (4, ["--strategy", "ddp", "--dataset", "imagefolder:/nonexistent/imgs"], "is not a directory"),
    (4, ["--strategy", "ddp", "--device", "cuda"], "no CUDA GPU is visible"),
    (4, ["--strategy", "ddp", "--steps", "0"], "--steps must be >= 1"),
    (4, ["--strategy", "ddp", "--model", "alexnet", "--image-size", "32"], "too small for alexnet"),
    (4, ["--strategy", "ddp", "--lr", "abc"], "invalid float value"),
    (1, ["--strategy", "local", "--resume"], "--resume needs --checkpoint-dir"),
    (2, ["--strategy", "ps", "--ps-servers", "2"], "--ps-servers 2 leaves no data worker among 2 ranks"),
    (4, ["--strategy", "ps", "--ps-servers", "-1"], "--ps-servers must be >= 0"),
    (4, ["--strategy", "ddp", "--ps-servers", "1"], "--ps-servers applies to --strategy ps only"),
    (4, ["--strategy", "stanza", "--ps-overlap"], "--ps-overlap applies to --strategy ps only"),
]


@pytest.mark.parametrize("world,args,msg", CASES, ids=[c[2][:30] for c in CASES])
def test_bad_input_one_line_exit_2(as_rank0_of, capsys, world, args, msg):
    as_rank0_of(world)
    assert train.main(args + ["--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert not dist.is_initialized()


def test_existing_outputs_are_not_overwritten(as_rank0_of, capsys, tmp_path):
    as_rank0_of(1)
    saved = tmp_path / "model.pt"
    saved.write_bytes(b"a user's file")
    assert train.main(["--strategy", "local", "--save", str(saved), "--quiet"]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert saved.read_bytes() == b"a user's file"


def test_missing_checkpoint_is_one_line(as_rank0_of, capsys, tmp_path):
    as_rank0_of(1)
    assert train.main(["--strategy", "local", "--checkpoint-dir", str(tmp_path), "--resume", "--quiet"]) == 2
    assert "no checkpoint rank0000-of-0001.pt" in capsys.readouterr().err


def test_local_run_in_process(as_rank0_of, tmp_path):
    as_rank0_of(1)
    m = tmp_path / "m.json"
    assert train.main(["--strategy", "local", "--steps", "3", "--global-batch", "8", "--metrics", str(m), "--quiet"]) == 0
    import json
    d = json.loads(m.read_text())
    assert [s["step"] for s in d["steps"]] == [0, 1, 2]
    assert d["config"]["strategy"] == "local" and d["bytes_per_step"] == 0 and d["throughput"] > 0
