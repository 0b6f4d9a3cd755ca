"""Replayed compute (stanza_core/replay.py): true shapes, gradients delivered through autograd,
waits equal to the performance model's compute, and one-line errors for bad input."""
import json

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from stanza_core import replay, train
from stanza_core.config import ConfigError
from stanza_core.models import get_model, sample_keys
from stanza_core.perf import DeviceProfile, named_profile


class Recording(replay.Replayer):
    """Records the seconds each wait asks for instead of sleeping (the test checks the sums)."""

    def wait(self, seconds):
        if self.armed:
            self.asked.append(seconds)


def replayed(model_name="tiny_cnn", size=32, batch=4, device="v100", dilation=10.0):
    model = get_model(model_name, 10)
    profile = named_profile(model_name, size, 10, batch)
    dev = DeviceProfile.from_table(device, profile) if isinstance(device, str) else device
    rep = Recording(model, profile, dev, dilation)
    rep.asked = []
    return model, rep, dev


def test_outputs_and_gradients_have_true_shapes_and_fire_hooks():
    model, rep, _ = replayed()
    real = get_model("tiny_cnn", 10)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    fired = []
    for n, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda p, n=n: fired.append(n))
    with sample_keys(0, 0, torch.arange(4)):
        out = model(x)
        loss = F.cross_entropy(out, y)
    assert out.shape == real(x).shape == (4, 10)
    loss.backward()
    names = [n for n, _ in model.named_parameters()]
    assert sorted(fired) == sorted(names) and len(fired) == len(names)
    assert fired[0].startswith("classifier.3")  # backward order: last layer's grads first
    for p in model.parameters():
        assert p.grad is not None and p.grad.shape == p.shape


def test_global_batch_norm_still_moves_its_statistics():
    """Replay removes arithmetic, never traffic: a global-statistics BN layer allreduces 2 x C
    values forward and 2 x C backward (stanza_core.batchnorm), here as in a real step."""
    from stanza_core.anatomy import profile_model
    from stanza_core.batchnorm import use_global_batch_stats

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3), torch.nn.BatchNorm2d(6), torch.nn.ReLU(),
                                torch.nn.Conv2d(6, 5, 3), torch.nn.BatchNorm2d(5), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(5, 10))
    profile = profile_model(model, (3, 16, 16), 4)
    rep = Recording(model, profile, DeviceProfile.from_table("v100", profile), 10.0)
    rep.asked = []
    sizes = []
    assert use_global_batch_stats(model, lambda t: sizes.append(t.numel()), 2) == 2
    out = model(torch.randn(4, 3, 16, 16))
    assert sizes == [6, 6, 5, 5]
    out.sum().backward()
    assert sizes == [6, 6, 5, 5, 5, 5, 6, 6]
    model.eval()  # running statistics in eval mode: no traffic
    model(torch.randn(4, 3, 16, 16))
    assert len(sizes) == 8


def test_activation_gradient_reaches_a_leaf_input():
    """An FC worker's boundary activations are a leaf: their gradient (sent back) has their shape."""
    model, rep, _ = replayed()
    a = torch.randn(4, 16, 4, 4, requires_grad=True)
    model.classifier(torch.flatten(model.avgpool(a), 1)).sum().backward()
    assert a.grad.shape == a.shape


def test_waits_equal_the_model_compute_times():
    """Armed, a forward+backward on b samples waits D x DeviceProfile.step_compute_s(b): the
    compute perf.predict uses, layer by layer; the optimizer step waits D x update x params."""
    model, rep, dev = replayed(batch=4, dilation=7.0)
    x = torch.randn(4, 3, 32, 32)
    model(x).sum().backward()  # not armed: set-up probes wait nothing
    assert rep.asked == []
    rep.begin_step()  # waits D x step_overhead_s (0 for a table device)
    assert rep.asked == [0.0]
    rep.asked.clear()
    model(x).sum().backward()
    assert sum(rep.asked) == pytest.approx(7.0 * dev.step_compute_s(4), rel=1e-9)
    assert len(rep.asked) == 4 * 2  # four parameterised layers, forward and backward
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = [p.detach().clone() for p in model.parameters()]
    rep.replay_optimizer(opt)
    rep.asked.clear()
    opt.step()
    n = sum(p.numel() for p in model.parameters())
    assert rep.asked == [pytest.approx(7.0 * dev.update_s_per_param * n)]
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters()))  # replayed: no update


def test_activation_gradients_between_layers_are_not_materialised():
    """At 224x224 a replayed forward returns uninitialised storage of the true shape and the
    activation gradients passed between layers are expanded zeros (stride 0): VGG-16-sized
    activations cost no arithmetic and no touched memory."""
    model, rep, _ = replayed("tiny_cnn", 224, batch=2)
    seen = []
    out = model.features[0](torch.randn(2, 3, 224, 224))
    out.register_hook(lambda g: seen.append(g))
    assert out.shape == (2, 8, 224, 224)
    model.features[3](model.features[2](model.features[1](out))).sum().backward()
    assert seen[0].shape == out.shape and seen[0].stride() == (0, 0, 0, 0)


def test_load_device_from_files(tmp_path):
    profile = named_profile("tiny_cnn", 32, 10, 4)
    dp = DeviceProfile.from_table("a100", profile)
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(dp.to_dict()))
    assert replay.load_device(str(path), profile) == dp
    from stanza_core.anatomy import profile_model
    timed = profile_model(get_model("tiny_cnn", 10), (3, 32, 32), 4, time=True, reps=1)
    path2 = tmp_path / "prof.json"
    path2.write_text(json.dumps(timed.to_dict()))
    got = replay.load_device(str(path2), profile)
    assert got.conv_fwd_s == timed.conv.fwd_s and got.fc_bwd_s == timed.fc.bwd_s


@pytest.mark.parametrize("content,msg", [
    ("{not json", "not JSON"),
    ('{"conv_fwd_s": -1, "conv_bwd_s": 1, "fc_fwd_s": 1, "fc_bwd_s": 1, "name": "x"}', "malformed profile"),
    ('{"conv_fwd_s": 1}', "malformed profile"),
    ('[1, 2]', "neither a DeviceProfile"),
])
def test_malformed_profile_file(tmp_path, content, msg):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=msg):
        replay.load_device(str(path), named_profile("tiny_cnn", 32, 10, 4))


REPLAY = ["--strategy", "ddp", "--compute", "replay"]
CASES = [
    (REPLAY + ["--replay-device", "v100", "--dilation", "0"], "--dilation must be > 0"),
    (REPLAY + ["--replay-device", "v100", "--dilation", "-2"], "--dilation must be > 0"),
    (REPLAY + ["--replay-device", "v100", "--dilation", "nan"], "--dilation must be a finite number"),
    (REPLAY + ["--replay-device", "v100", "--dilation", "inf"], "--dilation must be a finite number"),
    (REPLAY, "--compute replay needs --replay-device"),
    (REPLAY + ["--replay-device", "v100", "--save", "m.pt"], "--save is refused with --compute replay"),
    (REPLAY + ["--replay-device", "tpu9"], "unknown --replay-device 'tpu9'"),
    (REPLAY + ["--replay-device", "/nonexistent/dev.json"], "no such file"),
    (["--strategy", "ddp", "--compute", "magic"], "unknown --compute 'magic'"),
    (["--strategy", "ddp", "--dilation", "4"], "need --compute replay"),
]


@pytest.mark.parametrize("args,msg", CASES, ids=[" ".join(c[0][3:]) or "no device" for c in CASES])
def test_bad_replay_input_one_line_exit_2(as_rank0_of, capsys, args, msg):
    as_rank0_of(4)
    assert train.main(args + ["--quiet", "--global-batch", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert not dist.is_initialized()


def test_replay_local_run_reports_target_times(as_rank0_of, tmp_path):
    as_rank0_of(1)
    m = tmp_path / "m.json"
    assert train.main(["--strategy", "local", "--steps", "2", "--global-batch", "4", "--compute", "replay",
                       "--replay-device", "v100", "--dilation", "50", "--metrics", str(m), "--quiet"]) == 0
    d = json.loads(m.read_text())
    assert d["compute"] == "replay" and d["replay"]["dilation"] == 50 and d["replay"]["device"] == "v100 (table)"
    assert all(s["loss"] is None for s in d["steps"])
    assert d["target_step_time_median_s"] == pytest.approx(d["step_time_median_s"] / 50)


def test_dilation_rule():
    from stanza_core.perf import emulated_bandwidth, replay_dilation

    assert emulated_bandwidth(10, dilation=40) == pytest.approx(0.25)
    assert emulated_bandwidth(10, 0.1, 4.0) == emulated_bandwidth(10, dilation=40)  # t_here = D t_target
    with pytest.raises(ValueError, match="not both"):
        emulated_bandwidth(10, 0.1, 4.0, dilation=40)
    with pytest.raises(ValueError, match="dilation"):
        emulated_bandwidth(10, dilation=0)
    # N links at 10 Gb/s / D must fit 1000 Mbit/s aggregate: D = 8 * 10000 / 1000 = 80
    assert replay_dilation(10, 8, max_link_mbit=1000, max_aggregate_mbit=1000) == 80
    assert replay_dilation(10, 1, max_link_mbit=500, max_aggregate_mbit=1e6) == 20  # one link's limit
    assert replay_dilation(0.01, 2, max_link_mbit=1000, max_aggregate_mbit=1000) == 1
    # engine: 3 s of CPU per step here must stay within 5 % of D x 0.5 s -> D = 120
    assert replay_dilation(0.01, 2, max_link_mbit=1000, max_aggregate_mbit=1000, engine_s=3.0,
                           target_step_s=0.5) == 120
    with pytest.raises(ValueError):
        replay_dilation(10, 0, max_link_mbit=1000, max_aggregate_mbit=1000)
