"""Bad input: one line on stderr and exit 2, before any process group forms.

`main()` runs in-process with torchrun's environment variables set: a process group would need
MASTER_ADDR, which is not set, so reaching it would fail differently (and the check below that
no group was initialised would catch it). Every run names its device (--device cpu), so a GPU
on the machine changes nothing; the no-GPU refusal hides CUDA from this process itself."""
import pytest
import torch
import torch.distributed as dist

from stanza_core import train


CASES = [
    (4, ["--strategy", "allgather"], "unknown strategy 'allgather'"),
    (4, ["--strategy", "ddp", "--model", "lenet9"], "unknown model 'lenet9'; expected one of"),
    (4, ["--strategy", "ddp", "--dataset", "mnist"], "unknown dataset 'mnist'"),
    (3, ["--strategy", "stanza", "--fc-workers", "3", "--global-batch", "12"], "leaves no CONV worker"),
    (4, ["--strategy", "stanza", "--fc-workers", "0", "--global-batch", "12"], "--fc-workers must be a positive integer, got 0"),
    (3, ["--strategy", "stanza", "--model", "resnet18", "--micro-batches", "2", "--global-batch", "8"],
     "--micro-batches 2: resnet18 has BatchNorm, whose batch statistics would change per micro-batch"),
    (4, ["--strategy", "stanza", "--model", "resnet18", "--fc-conv-share", "0.25", "--global-batch", "16"],
     "--fc-conv-share 0.25: resnet18 has batch norm, and global batch statistics need equal CONV batches"),
    (3, ["--strategy", "ddp", "--global-batch", "10"], "not divisible by the 3 data workers"),
    (4, ["--strategy", "stanza", "--model", "tiny_cnn", "--boundary", "features.0", "--global-batch", "12"], "not a single-tensor cut"),
    (4, ["--strategy", "ddp", "--dataset", "cifar10:/nonexistent/cifar"], "is not a directory"),
    (4, ["--strategy", "ddp", "--dataset", "imagefolder:/nonexistent/imgs"], "is not a directory"),
    (4, ["--strategy", "ddp", "--device", "cuda"], "no CUDA GPU is visible"),
    (4, ["--strategy", "ddp", "--steps", "0"], "--steps must be >= 1"),
    (4, ["--strategy", "ddp", "--model", "alexnet", "--image-size", "32"], "too small for alexnet"),
    (4, ["--strategy", "ddp", "--lr", "abc"], "invalid float value"),
    (1, ["--strategy", "local", "--resume"], "--resume needs --checkpoint-dir"),
    # every number: finite and in range
    (2, ["--strategy", "ddp", "--lr", "nan"], "--lr must be a finite number"),
    (2, ["--strategy", "ddp", "--lr", "inf"], "--lr must be a finite number"),
    (2, ["--strategy", "ddp", "--lr", "-0.1"], "--lr must be > 0"),
    (2, ["--strategy", "ddp", "--momentum", "nan"], "--momentum must be a finite number"),
    (2, ["--strategy", "ddp", "--momentum", "1"], "--momentum must be in [0, 1)"),
    (2, ["--strategy", "ddp", "--weight-decay=-inf"], "--weight-decay must be a finite number"),
    (2, ["--strategy", "ddp", "--weight-decay", "-1"], "--weight-decay must be >= 0"),
    (2, ["--strategy", "ddp", "--timeout-s", "inf"], "--timeout-s must be a finite number"),
    (2, ["--strategy", "ddp", "--timeout-s", "0"], "--timeout-s must be > 0"),
    (2, ["--strategy", "ddp", "--timeout-s", "1e12"], "--timeout-s must be <="),
    (2, ["--strategy", "ddp", "--bucket-mb", "nan"], "--bucket-mb must be a finite number"),
    (2, ["--strategy", "ddp", "--bucket-mb", "0"], "--bucket-mb must be > 0"),
    (2, ["--strategy", "ddp", "--bucket-mb", "1e300"], "--bucket-mb must be <="),
    (2, ["--strategy", "ddp", "--dilation", "nan"], "--dilation must be a finite number"),
    (2, ["--strategy", "ddp", "--seed", "-1"], "--seed must be in [0, "),
    (2, ["--strategy", "ddp", "--seed", "99999999999999"], "--seed must be in [0, "),
    (2, ["--strategy", "ddp", "--seed", "1.5"], "invalid int value"),
    (2, ["--strategy", "ddp", "--num-classes", "0"], "--num-classes must be >= 1"),
    (2, ["--strategy", "ddp", "--image-size", "-3"], "--image-size must be >= 1"),
    (2, ["--strategy", "ddp", "--global-batch", "0"], "--global-batch must be >= 1"),
    (2, ["--strategy", "ddp", "--warmup", "-1"], "--warmup must be >= 0"),
    (2, ["--strategy", "ddp", "--checkpoint-every", "-2"], "--checkpoint-every must be >= 0"),
    (2, ["--strategy", "ddp", "--save-every", "-2"], "--save-every must be >= 0"),
    (2, ["--strategy", "ddp", "--save-every", "2"], "--save-every needs --save"),
    (2, ["--strategy", "ps", "--ps-shards", "-1"], "--ps-shards must be an integer >= 0, got -1"),
    (2, ["--strategy", "ps", "--ps-shards", "3"], "exceeds the 2 ranks"),
    (2, ["--strategy", "ddp", "--fc-workers", "-1"], "--fc-workers -1 applies to --strategy stanza only, not ddp"),
    (2, ["--strategy", "ddp", "--bn-stats", "sync"], "unknown --bn-stats 'sync'"),
    (2, ["--strategy", "ddp", "--image-size", "4", "--model", "cifar_alexnet"], "fails on an input of shape (2, 3, 4, 4)"),
    (1, ["--strategy", "local", "--boundary", "no_such_module"], "--boundary no_such_module: tiny_cnn has no module"),
    # batch norm needs more than one value per channel: resnet18's last stage is 1x1 at 32 px
    (1, ["--strategy", "local", "--model", "resnet18", "--global-batch", "1"], "layer4.0.bn1 sees 1 value per channel"),
    (2, ["--strategy", "ddp", "--model", "resnet18", "--global-batch", "2", "--bn-stats", "local"],
     "sees 1 value per channel (1 sample on a data worker"),
    # a user's model: import failures, factories that raise or return no model, wrong outputs, no split
    (2, ["--strategy", "ddp", "--model", "no_such_pkg.nets:build"], "cannot import 'no_such_pkg.nets'"),
    (2, ["--strategy", "ddp", "--model", "torch.nn:NoSuchNet"], "has no attribute 'NoSuchNet'"),
    (2, ["--strategy", "ddp", "--model", "math:pi"], "is not callable"),
    (2, ["--strategy", "ddp", "--model", "test_train_cli:raising_factory"], "the factory raised RuntimeError: out of ideas"),
    (2, ["--strategy", "ddp", "--model", "test_train_cli:not_a_model"], "the factory returned dict"),
    (2, ["--strategy", "ddp", "--model", "test_train_cli:wrong_classes"], "expected (2, 10)"),
    (2, ["--strategy", "ddp", "--model", "test_train_cli:aux_outputs"], "returns a tuple in training mode"),
    (3, ["--strategy", "stanza", "--global-batch", "12", "--model", "test_train_cli:conv_only"], "no single-tensor cut"),
    (3, ["--strategy", "stanza", "--global-batch", "12", "--model", "test_train_cli:bn_in_head"], "batch norm on the FC side"),
    (2, ["--strategy", "ddp", "--model", "/nonexistent/m.model.pkl"], "no such file"),
    (2, ["--strategy", "ps", "--ps-servers", "2"], "--ps-servers 2 leaves no data worker among 2 ranks"),
    (4, ["--strategy", "ps", "--ps-servers", "-1"], "--ps-servers must be an integer >= 0, got -1"),
    (4, ["--strategy", "ddp", "--ps-servers", "1"], "--ps-servers 1 applies to --strategy ps only"),
    (4, ["--strategy", "stanza", "--ps-overlap"], "--ps-overlap applies to --strategy ps only"),
]


def raising_factory(num_classes=10):
    raise RuntimeError("out of ideas")


def not_a_model():
    return {"conv": 1}


def wrong_classes():  # takes no num_classes: called without it, and its 7 classes are refused
    import torch.nn as nn
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 7))


def conv_only(num_classes=10):
    import torch.nn as nn
    return nn.Sequential(nn.Conv2d(3, num_classes, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())


def bn_in_head(num_classes=10):
    import torch.nn as nn
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                         nn.Linear(16, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, num_classes))


def aux_outputs(num_classes=10):
    import torch.nn as nn

    class Aux(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc, self.aux = nn.Conv2d(3, 4, 3), nn.Linear(4, num_classes), nn.Linear(4, num_classes)

        def forward(self, x):
            h = self.conv(x).mean((2, 3))
            return (self.fc(h), self.aux(h)) if self.training else self.fc(h)
    return Aux()


CPU = ["--device", "cpu"]


@pytest.fixture
def no_cuda(monkeypatch):
    """This process sees no CUDA GPU, whether or not the machine has one."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.mark.parametrize("world,args,msg", CASES, ids=[c[2][:30] for c in CASES])
def test_bad_input_one_line_exit_2(as_rank0_of, capsys, request, world, args, msg):
    as_rank0_of(world)
    if "--device" in args:  # the no-GPU refusal: make the GPU absent here
        request.getfixturevalue("no_cuda")
    else:
        args = args + CPU
    assert train.main(args + ["--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert not dist.is_initialized()


PATH_CASES = [  # (flag, how the path is made bad, message)
    ("--save", "folder", "is a folder; expected a file path"),
    ("--metrics", "folder", "is a folder; expected a file path"),
    ("--save", "under_file", "is a file, not a folder"),
    ("--metrics", "under_file", "is a file, not a folder"),
    ("--checkpoint-dir", "file", "is a file; expected a folder"),
    ("--checkpoint-dir", "under_file", "is a file, not a folder"),
    ("--metrics", "readonly", "is not writable"),
]


@pytest.mark.parametrize("flag,how,msg", PATH_CASES, ids=[f"{c[0]}-{c[1]}" for c in PATH_CASES])
def test_bad_output_path_one_line_before_any_work(as_rank0_of, capsys, tmp_path, flag, how, msg):
    as_rank0_of(2)
    (tmp_path / "a_file").write_text("a user's file")
    (tmp_path / "a_folder").mkdir()
    path = {"folder": tmp_path / "a_folder", "file": tmp_path / "a_file",
            "under_file": tmp_path / "a_file" / "sub" / "out.json", "readonly": tmp_path / "ro" / "m.json"}[how]
    if how == "readonly":
        (tmp_path / "ro").mkdir()
        import os
        os.chmod(tmp_path / "ro", 0o500)
        if os.access(tmp_path / "ro", os.W_OK):  # root ignores mode bits
            pytest.skip("permission bits are not enforced for this user")
    assert train.main(["--strategy", "ddp", flag, str(path), "--quiet", *CPU]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert not dist.is_initialized()
    assert (tmp_path / "a_file").read_text() == "a user's file"


def test_missing_output_folders_are_created(as_rank0_of, tmp_path):
    as_rank0_of(1)
    m = tmp_path / "new" / "deeper" / "m.json"
    assert train.main(["--strategy", "local", "--steps", "2", "--global-batch", "4", "--metrics", str(m), "--quiet", *CPU]) == 0
    assert m.is_file()


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _read_checkpoint(directory):
    """(step, {key: tensor}) of the checkpoint `latest` names in `directory`."""
    import json

    from stanza_core.comm import checkpoint_io

    folder = directory / (directory / "latest").read_text().strip()
    state = {k: torch.empty(shape, dtype=dtype) for k, (shape, dtype) in checkpoint_io.tensors(str(folder)).items()}
    checkpoint_io.load(state, str(folder), None)
    return json.loads((folder / "stanza.json").read_text())["step"], state


def test_non_finite_loss_stops_naming_the_step_and_keeps_the_checkpoint(as_rank0_of, capsys, tmp_path):
    as_rank0_of(1)
    ck, m = tmp_path / "ck", tmp_path / "m.json"
    args = ["--strategy", "local", "--global-batch", "4", "--checkpoint-dir", str(ck), "--quiet", "--metrics", str(m), *CPU]
    assert train.main(args + ["--steps", "2", "--lr", "0.01"]) == 0
    good = _snapshot(ck)
    # resumed at a learning rate that diverges: refused as another layout, so diverge from scratch in a new dir
    ck2 = tmp_path / "ck2"
    args2 = ["--strategy", "local", "--global-batch", "4", "--checkpoint-dir", str(ck2), "--checkpoint-every", "1",
             "--quiet", "--lr", "1e30", "--steps", "8", *CPU]
    assert train.main(args2) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: the loss is ") and " at step " in err, err
    step = int(err.split(" at step ")[1].split(":")[0])
    import torch
    saved_step, saved = _read_checkpoint(ck2)
    assert saved_step == step  # the checkpoint before the bad step, intact
    assert any(k.startswith("model.") for k in saved)
    assert all(torch.isfinite(v).all() for k, v in saved.items() if k.startswith("model.") and v.is_floating_point())
    assert sorted(p.name for p in ck2.iterdir()) == ["latest", f"step-{step:08d}"]  # no temporary folder left
    assert _snapshot(ck) == good and not m.with_suffix(".json.tmp").exists()


def test_checkpoint_dir_holding_a_checkpoint_is_not_overwritten(as_rank0_of, capsys, tmp_path):
    """A fresh run into a folder with a checkpoint is refused before training (one line naming
    --resume and --overwrite); --overwrite replaces it."""
    as_rank0_of(1)
    ck = tmp_path / "ck"
    args = ["--strategy", "local", "--global-batch", "4", "--steps", "2", "--checkpoint-dir", str(ck), "--quiet", *CPU]
    assert train.main(args) == 0
    before = _snapshot(ck)
    assert train.main(args + ["--steps", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: --checkpoint-dir {ck} already holds checkpoint step-00000002; pass --resume to continue "
                   "it or --overwrite to replace it"), err
    assert _snapshot(ck) == before
    assert train.main(args + ["--steps", "3", "--overwrite"]) == 0
    assert sorted(p.name for p in ck.iterdir()) == ["latest", "step-00000003"]


def test_existing_outputs_are_not_overwritten(as_rank0_of, capsys, tmp_path):
    as_rank0_of(1)
    saved = tmp_path / "model.pt"
    saved.write_bytes(b"a user's file")
    assert train.main(["--strategy", "local", "--save", str(saved), "--quiet", *CPU]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert saved.read_bytes() == b"a user's file"


def test_existing_step_model_is_not_overwritten(as_rank0_of, capsys, tmp_path):
    """--save-every names its files after --save (model.pt -> model.step2.pt) and refuses to
    replace one a user has, before training."""
    as_rank0_of(1)
    earlier = tmp_path / "model.step2.pt"
    earlier.write_bytes(b"an earlier run's model")
    args = ["--strategy", "local", "--steps", "5", "--save", str(tmp_path / "model.pt"), "--save-every", "2", "--quiet", *CPU]
    assert train.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: --save-every: {earlier} already exists; pass --overwrite to replace it", err
    assert earlier.read_bytes() == b"an earlier run's model" and not (tmp_path / "model.pt").exists()


def test_save_steps_and_their_paths():
    from stanza_core.engine.config import TrainConfig, step_save_path

    assert TrainConfig(strategy="local", steps=7, save="/tmp/m.pt", save_every=3).save_steps() == [3, 6]
    assert TrainConfig(strategy="local", steps=6, save="/tmp/m.pt", save_every=3).save_steps() == [3]
    assert TrainConfig(strategy="local", steps=6, save="/tmp/m.pt").save_steps() == []
    assert step_save_path("/a/b/model.pt", 20) == "/a/b/model.step20.pt"
    assert step_save_path("model", 3) == "model.step3"


def test_missing_checkpoint_is_one_line(as_rank0_of, capsys, tmp_path):
    as_rank0_of(1)
    assert train.main(["--strategy", "local", "--checkpoint-dir", str(tmp_path), "--resume", "--quiet", *CPU]) == 2
    assert f"error: rank 0: --resume: no checkpoint in {tmp_path}: no latest file" in capsys.readouterr().err


def test_resume_with_other_bn_stats_is_one_line(as_rank0_of, capsys, tmp_path):
    """A checkpoint trained with global batch-norm statistics does not continue per worker."""
    from stanza_core.comm import Comm
    from stanza_core.engine import checkpoint

    as_rank0_of(2)
    args = ["--strategy", "ddp", "--model", "resnet18", "--image-size", "32", "--checkpoint-dir", str(tmp_path), *CPU]
    checkpoint.save(str(tmp_path), Comm(), 2, 1, train.parse_config(args).to_dict(), {})
    assert train.main(args + ["--bn-stats", "local", "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --resume: checkpoint was made with bn_stats='global', this run has 'local'"
    assert not dist.is_initialized()


@pytest.mark.parametrize("why,args,says", [
    ("bn_stats", ["--strategy", "ddp", "--model", "resnet18", "--bn-stats", "local"],
     "its batch-norm statistics are per data worker (--bn-stats local: a worker's batch, and so the training, "
     "depends on the world size): resume at world size 2"),
    ("powersgd", ["--strategy", "stanza", "--grad-compression", "powersgd"],
     "its PowerSGD error feedback is per rank (--grad-compression powersgd): resume at world size 2")])
def test_resume_at_another_world_size_with_per_rank_state_is_one_line(as_rank0_of, capsys, tmp_path, why, args, says):
    """State kept per rank ties a checkpoint to its world size: refused before any group forms."""
    from stanza_core.comm import Comm
    from stanza_core.engine import checkpoint

    args = [*args, "--image-size", "32", "--global-batch", "12", "--checkpoint-dir", str(tmp_path), *CPU]
    cfg = train.parse_config(args).to_dict()
    checkpoint.save(str(tmp_path), Comm(), 2, 1, cfg, {"model.x": torch.zeros(2),
                                                     checkpoint.per_rank_key(why, 0, "x"): torch.zeros(1)})
    as_rank0_of(2)  # the same world size: accepted (fails later, reaching for a process group)
    assert checkpoint.locate(str(tmp_path), 2, cfg).step == 1
    as_rank0_of(3)
    assert train.main(args + ["--resume", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: --resume: checkpoint was made at world size 2, this run has 3, and {says}", err
    assert not dist.is_initialized()


def test_checkpoint_metadata_is_read_without_running_code(as_rank0_of, capsys, tmp_path):
    """DCP's .metadata is a pickle: one that would call a function is refused in one line, not run."""
    import os
    import pickle

    from stanza_core.comm import Comm
    from stanza_core.engine import checkpoint

    as_rank0_of(1)
    args = ["--strategy", "local", "--global-batch", "4", "--checkpoint-dir", str(tmp_path), *CPU]
    checkpoint.save(str(tmp_path), Comm(), 1, 1, train.parse_config(args).to_dict(), {"model.x": torch.zeros(2)})
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    (tmp_path / "step-00000001" / ".metadata").write_bytes(pickle.dumps(Payload()))
    assert train.main(args + ["--resume", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: rank 0: --resume: checkpoint {tmp_path / 'step-00000001'} is unreadable "
                          "(UnpicklingError: posix.system is not part of a checkpoint's metadata)"), err
    assert len(err.splitlines()) == 1 and not marker.exists()


def test_ps_momentum_is_cut_anew_for_another_shard_layout():
    """Momentum pieces stored by flat range under one shard layout (3 shards, buckets of 40) read
    back exactly under another (2 shards, one bucket); a layout the pieces do not cover is refused."""
    from stanza_core.errors import ConfigError
    from stanza_core.strategies import state
    from stanza_core.strategies.ps import engine as ps

    flat = torch.arange(100, dtype=torch.float32)
    shards3 = [slice(a, a + n) for a, n in zip((0, 34, 67), ps.shard_sizes(100, 3))]
    saved = [r for _, _, r in ps.pieces_of([slice(0, 40), slice(40, 80), slice(80, 100)], shards3)]
    keys = {state.flat_momentum_key(r): flat[r] for r in saved}
    ranges = {0: slice(0, 50), 1: slice(50, 100)}
    targets, covers = state.flat_momentum_targets(keys, ranges, torch.float32)
    for k, t in targets.items():
        t.copy_(keys[k])
    for i, r in ranges.items():
        assert torch.equal(state.cut(r, covers[i], targets, flat[r]), flat[r])
    assert len(covers[0]) == 3 and len(targets) == len(saved)
    with pytest.raises(ConfigError, match="does not cover parameters 0-110"):
        state.flat_momentum_targets(keys, {0: slice(0, 110)}, torch.float32)


def test_bn_statistics_are_kept_per_rank_only_when_local():
    """Under --bn-stats local a batch-norm buffer gets a per-rank key; parameters and momentum
    keep the model's names (stored once); under global every key is the model's."""
    from stanza_core.strategies import state

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3, 8, 8)).sum().backward()
    opt.step()
    names = state.tensor_names(model)
    local = state.module_state([model], names, opt, 3, bn_local=True)
    assert sorted(local) == sorted(["model.0.weight", "model.0.bias", "model.1.weight", "model.1.bias",
                                    "per_rank.bn_stats.rank0003.model.1.running_mean",
                                    "per_rank.bn_stats.rank0003.model.1.running_var",
                                    "per_rank.bn_stats.rank0003.model.1.num_batches_tracked",
                                    "momentum.0.weight", "momentum.0.bias", "momentum.1.weight", "momentum.1.bias"])
    assert sorted(state.module_state([model], names, opt, 3, bn_local=False)) == sorted(
        k.replace("per_rank.bn_stats.rank0003.", "") for k in local)
    assert torch.equal(local["momentum.0.weight"], opt.state[model[0].weight]["momentum_buffer"])


def test_local_run_in_process(as_rank0_of, tmp_path):
    as_rank0_of(1)
    m = tmp_path / "m.json"
    assert train.main(["--strategy", "local", "--steps", "3", "--global-batch", "8", "--metrics", str(m), "--quiet", *CPU]) == 0
    import json
    d = json.loads(m.read_text())
    assert [s["step"] for s in d["steps"]] == [0, 1, 2]
    assert d["config"]["strategy"] == "local" and d["bytes_per_step"] == 0 and d["throughput"] > 0


@pytest.mark.parametrize("flag,path", [("--metrics", "/proc/stanza-x/m.json"), ("--save", "/sys/stanza-x.pt"),
                                       ("--checkpoint-dir", "/proc/stanza-x/ck"), ("--metrics", "/proc/version")])
def test_output_path_the_system_refuses_is_one_line_before_any_work(as_rank0_of, capsys, flag, path):
    """Permission bits do not stop root, /proc and /sys do: the folder or file that writing the
    output needs is created (and removed) up front, so the run never trains and then fails to save."""
    as_rank0_of(1)
    assert train.main(["--strategy", "local", flag, path, "--overwrite", "--quiet", *CPU]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {flag} {path}"), err
    assert not dist.is_initialized()
