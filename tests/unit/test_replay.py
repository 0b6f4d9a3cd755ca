"""Replayed compute (stanza_core/engine/replay.py): true shapes, gradients delivered through autograd,
waits equal to the performance model's compute, and one-line errors for bad input."""
import json

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from stanza_core import train

from stanza_core.engine import replay
from stanza_core.engine.config import ConfigError
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


def test_measured_jitter_scales_each_step_and_every_rank_takes_the_same_measured_step(tmp_path):
    """--replay-jitter: step t waits the profile's times x one measured step's factors for this
    rank (forward, backward, update), the measured step chosen by a permutation (by --seed) that
    every rank shares."""
    steps = [[{"fwd": 0.5 + s, "bwd": 2.0 + s, "update": 3.0 + s}, {"fwd": 10.0 + s, "bwd": 20.0 + s, "update": 30.0 + s}]
             for s in range(5)]
    path = tmp_path / "jitter.json"
    path.write_text(json.dumps({"source": "test", "steps": steps}))
    loaded = replay.load_jitter(str(path), world=2)
    x = torch.randn(4, 3, 32, 32)
    picked = []
    for rank in (0, 1):
        model, rep, dev = replayed(batch=4, dilation=7.0)
        rep.set_jitter(loaded, rank, seed=3, source=str(path))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        rep.replay_optimizer(opt)
        n = sum(p.numel() for p in model.parameters())
        mine = []
        for t in range(6):
            rep.begin_step(t)
            rep.asked.clear()
            rep.trace = []
            model(x).sum().backward()
            fwd = sum(sec for _, ph, _, sec in rep.trace if ph == "fwd")
            bwd = sum(sec for _, ph, _, sec in rep.trace if ph == "bwd")
            rep.asked.clear()
            opt.step()
            f = rep.factors
            base_f = 7.0 * sum(dev.time_s(p, "fwd", 4) for p in ("conv", "fc"))
            base_b = 7.0 * sum(dev.time_s(p, "bwd", 4) for p in ("conv", "fc"))
            assert fwd == pytest.approx(base_f * f["fwd"]) and bwd == pytest.approx(base_b * f["bwd"])
            assert rep.asked == [pytest.approx(7.0 * dev.update_s_per_param * n * f["update"])]
            mine.append(next(s for s in range(5) if steps[s][rank] == f))
        picked.append(mine)
        assert rep.describe()["jitter"]["steps"] == 5
    assert picked[0] == picked[1]  # the same measured step on both ranks
    assert sorted(picked[0][:5]) == list(range(5)) and picked[0][5] == picked[0][0]  # each once, then again
    model, rep, _ = replayed()
    rep.set_jitter(loaded, 0, seed=4, source="")
    assert [rep.jitter[t] for t in range(5)] != [loaded[picked[0][t]][0] for t in range(5)]  # another seed, another order


@pytest.mark.parametrize("content,msg", [
    ("not json", "expected a JSON object with a list of steps"),
    ('{"source": "x"}', "expected a JSON object with a list of steps"),
    ('{"steps": []}', "expected a non-empty list of steps"),
    ('{"steps": [[{"fwd": 1, "bwd": 1, "update": 1}]]}', "step 0 holds 1 ranks' factors; expected 2"),
    ('{"steps": [[{"fwd": 1, "bwd": 1, "update": 1}, {"fwd": 1, "bwd": 0, "update": 1}]]}',
     "step 0, rank 1: expected positive finite numbers fwd, bwd, update"),
    ('{"steps": [[{"fwd": 1, "bwd": 1, "update": 1}, {"fwd": 1, "bwd": 1}]]}', "step 0, rank 1"),
    ('{"steps": [[{"fwd": 1, "bwd": 1, "update": 1}, {"fwd": true, "bwd": 1, "update": 1}]]}', "step 0, rank 1"),
])
def test_malformed_jitter_file(tmp_path, content, msg):
    path = tmp_path / "jitter.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=msg) as e:
        replay.load_jitter(str(path), world=2)
    assert len(str(e.value).splitlines()) == 1


@pytest.mark.parametrize("mode", ["spin", "cpu"])
def test_a_busy_wait_holds_the_cpu_instead_of_sleeping(monkeypatch, mode):
    """--replay-wait spin and cpu: a wait never sleeps; spin lasts at least what it was asked on
    the wall clock, cpu until the waiting thread has had that much CPU time."""
    import time

    model = get_model("tiny_cnn", 10)
    profile = named_profile("tiny_cnn", 32, 10, 4)
    rep = replay.Replayer(model, profile, DeviceProfile.from_table("v100", profile), 1.0)
    rep.armed, rep.mode = True, mode
    monkeypatch.setattr(time, "sleep", lambda s: pytest.fail("a busy wait slept"))
    t0, c0 = time.perf_counter(), time.thread_time()
    rep.wait(0.02)
    assert (time.thread_time() - c0 if mode == "cpu" else time.perf_counter() - t0) >= 0.02
    assert rep.describe()["wait"] == mode


def test_a_cpu_wait_stretches_when_its_core_is_taken():
    """--replay-wait cpu counts this thread's CPU time, not the wall clock: while another thread of
    the process holds the interpreter, the waiting thread is not running, and the wait lasts its
    CPU time plus what the other took."""
    import sys
    import threading
    import time

    model = get_model("tiny_cnn", 10)
    profile = named_profile("tiny_cnn", 32, 10, 4)
    rep = replay.Replayer(model, profile, DeviceProfile.from_table("v100", profile), 1.0)
    rep.armed, rep.mode = True, "cpu"
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    stop = threading.Event()

    def hog():  # a pure-Python loop: holds the GIL, so the waiting thread runs about half the time
        while not stop.is_set():
            pass

    other = threading.Thread(target=hog)
    try:
        other.start()
        t0, c0 = time.perf_counter(), time.thread_time()
        rep.wait(0.05)
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    finally:
        stop.set()
        other.join()
        sys.setswitchinterval(switch)
    assert cpu >= 0.05
    assert wall > 1.3 * cpu, (wall, cpu)


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
    got = replay.load_device(str(path), profile)
    assert (got.profile, got.source, got.measured) == (dp, "profile file", None)
    from stanza_core.anatomy import profile_model
    timed = profile_model(get_model("tiny_cnn", 10), (3, 32, 32), 4, time=True, reps=1)
    path2 = tmp_path / "prof.json"
    path2.write_text(json.dumps(timed.to_dict()))
    got = replay.load_device(str(path2), profile).profile
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
    (["--strategy", "ddp", "--replay-wait", "spin"], "need --compute replay"),
    (["--strategy", "ddp", "--replay-jitter", "j.json"], "need --compute replay"),
    (REPLAY + ["--replay-device", "v100", "--replay-wait", "busy"], "unknown --replay-wait 'busy'"),
    (["--strategy", "ddp", "--payload-scale", "4"], "--payload-scale 4 needs --compute replay"),
    (REPLAY + ["--replay-device", "v100", "--payload-scale", "0"], "--payload-scale must be an integer >= 1"),
    (["--strategy", "stanza", "--compute", "replay", "--replay-device", "v100", "--payload-scale", "4",
      "--grad-compression", "powersgd"], "--payload-scale 4 does not apply to --grad-compression powersgd"),
    (REPLAY + ["--replay-device", "v100", "--replay-jitter", "/nonexistent/j.json"],
     "--replay-jitter /nonexistent/j.json: expected a JSON object"),
]


@pytest.mark.parametrize("args,msg", CASES, ids=[" ".join(c[0][3:]) or "no device" for c in CASES])
def test_bad_replay_input_one_line_exit_2(as_rank0_of, capsys, args, msg):
    as_rank0_of(4)
    assert train.main(args + ["--quiet", "--global-batch", "8", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert not dist.is_initialized()


def test_replay_local_run_reports_target_times(as_rank0_of, tmp_path):
    as_rank0_of(1)
    m = tmp_path / "m.json"
    assert train.main(["--strategy", "local", "--steps", "2", "--global-batch", "4", "--compute", "replay",
                       "--replay-device", "v100", "--dilation", "50", "--metrics", str(m), "--quiet",
                       "--device", "cpu"]) == 0
    d = json.loads(m.read_text())
    assert d["compute"] == "replay" and d["replay"]["dilation"] == 50 and d["replay"]["device"] == "v100 (table)"
    assert all(s["loss"] is None for s in d["steps"])
    assert d["target_step_time_median_s"] == pytest.approx(d["step_time_median_s"] / 50)


def test_replay_local_run_with_measured_jitter_and_spinning_waits(as_rank0_of, tmp_path):
    as_rank0_of(1)
    j, m = tmp_path / "j.json", tmp_path / "m.json"
    j.write_text(json.dumps({"source": "test", "steps": [[{"fwd": 2.0, "bwd": 0.5, "update": 1.0}]] * 3}))
    assert train.main(["--strategy", "local", "--steps", "2", "--global-batch", "4", "--compute", "replay",
                       "--replay-device", "v100", "--dilation", "50", "--replay-wait", "spin", "--replay-jitter",
                       str(j), "--metrics", str(m), "--quiet", "--device", "cpu"]) == 0
    d = json.loads(m.read_text())["replay"]
    assert d["wait"] == "spin"
    assert d["jitter"] == {"file": str(j), "steps": 3, "fwd": [2.0, 2.0], "bwd": [0.5, 0.5], "update": [1.0, 1.0]}


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
    # one dedicated server among 17 nodes: every byte crosses its link, so the links receiving at
    # once carry at most 2 links' worth (its download, and the workers' downloads its upload feeds)
    assert replay_dilation(10, 17, max_link_mbit=1000, max_aggregate_mbit=1000, ps_servers=1) == 20
    assert replay_dilation(10, 17, max_link_mbit=1000, max_aggregate_mbit=1000) == 170  # colocated: all 17
    assert replay_dilation(10, 6, max_link_mbit=1000, max_aggregate_mbit=1000, ps_servers=4) == 60  # min(N, 2 S)
    for bad in (-1, 1.0, True):
        with pytest.raises(ValueError, match="ps_servers must be an integer >= 0"):
            replay_dilation(10, 17, max_link_mbit=1000, max_aggregate_mbit=1000, ps_servers=bad)
    with pytest.raises(ValueError, match="ps_servers must be fewer than the 17 nodes"):
        replay_dilation(10, 17, max_link_mbit=1000, max_aggregate_mbit=1000, ps_servers=17)


# ---- measured per-layer records: each layer waits its own measured time ----------------------

def tiny_record(batch=4, scale=1.0):
    """A per-layer record of tiny_cnn (perf calibrate's format), every leaf with its own times;
    the unhooked totals are `scale` x the per-layer sums (1.0: no rescaling)."""
    profile = named_profile("tiny_cnn", 32, 10, batch)
    layers = [{"name": r.name, "kind": r.kind, "part": r.part, "fwd_s": (i + 1) * 1e-4, "bwd_s": (i + 1) * 3e-4}
              for i, r in enumerate(profile.layers)]
    unhooked = {f"{p}_{ph}": scale * batch * sum(r[f"{ph}_s"] for r in layers if r["part"] == p)
                for p in ("conv", "fc") for ph in ("fwd", "bwd")}
    return profile, {"device": "test", "model": "tiny_cnn", "image_size": 32, "num_classes": 10, "batch": batch,
                     "tf32": None, "unhooked": unhooked, "layers": layers}


def traced(model_name, size, classes, batch, spec, dilation):
    model = get_model(model_name, classes)
    profile = named_profile(model_name, size, classes, batch)
    dev = replay.load_device(spec, profile, batch)
    rep = Recording(model, profile, dev.profile, dilation, measured=dev.measured, source=dev.source)
    rep.asked, rep.trace = [], []
    rep.begin_step()
    rep.asked.clear()
    return model, rep


def test_a_measured_record_makes_each_layer_wait_its_own_time(tmp_path):
    """Replay of a per-layer record: every layer's forward and backward waits D x its record
    time per sample x the call's batch (parameterless layers too), not a FLOP share of its part."""
    profile, rec = tiny_record(batch=4)
    path = tmp_path / "tiny.layers.json"
    path.write_text(json.dumps(rec))
    model, rep = traced("tiny_cnn", 32, 10, 4, str(path), 7.0)
    assert rep.source == "measured record"
    model(torch.randn(4, 3, 32, 32)).sum().backward()
    want = {(r["name"], ph): 7.0 * r[f"{ph}_s"] * 4 for r in rec["layers"] for ph in ("fwd", "bwd")}
    got = {(name, ph): s for name, ph, b, s in rep.trace}
    assert sorted((name, ph) for name, ph, _, _ in rep.trace) == sorted(want)  # every leaf, once each way
    for key, s in got.items():
        assert s == pytest.approx(want[key], rel=1e-12), key
    assert rep.asked == [s for *_, s in rep.trace if s > 0]  # what was waited is what the trace says
    assert rep.describe()["measured"]["extrapolated_batches"] == []


def test_a_package_record_replays_at_and_between_measured_batches():
    """h200-measured on alexnet: at batch 16 each layer waits D x (its time in the b16 file x 16,
    scaled by the file's plain step over its per-layer sum); at batch 24 the per-call time is
    linear between the b16 and b32 files'."""
    from stanza_core.perf.records import RECORDS_DIR

    def per_call(b):  # raw file -> {(layer, phase): seconds per call at b}, scaled to the plain step
        d = json.loads((RECORDS_DIR / "h200" / f"alexnet-b{b}-tf32.json").read_text())
        k = d["plain_fwd_bwd_s"] / sum((r["fwd_s"] + (r["bwd_s"] or 0)) * b for r in d["layers"])
        return {(r["name"], ph): (r[f"{ph}_s"] or 0) * b * k for r in d["layers"] for ph in ("fwd", "bwd")}

    t16, t32 = per_call(16), per_call(32)
    for batch, want in ((16, t16), (24, {key: (t16[key] + t32[key]) / 2 for key in t16})):
        model, rep = traced("alexnet", 224, 1000, batch, "h200-measured", 40.0)
        model(torch.randn(batch, 3, 224, 224)).sum().backward()
        assert sorted((name, ph) for name, ph, _, _ in rep.trace) == sorted(want)  # every leaf, fwd and bwd
        for name, ph, b, s in rep.trace:
            assert b == batch and s == pytest.approx(40.0 * want[(name, ph)], rel=1e-9), (name, ph)
        fwd_bwd = sum(s for *_, s in rep.trace) / 40.0
        assert fwd_bwd == pytest.approx(sum(want.values()), rel=1e-9)
    assert rep.dev.step_compute_s(24) == pytest.approx(fwd_bwd, rel=1e-9)  # the model's profile agrees


def test_a_reused_module_waits_its_share_per_call():
    """ResNet's bottleneck calls one ReLU module three times: each call waits a third of its
    record time (the record sums a module's calls in a step)."""
    model, rep = traced("resnet50", 224, 1000, 16, "h200-measured", 1.0)
    model(torch.randn(16, 3, 224, 224)).sum()
    relu = [s for name, ph, _, s in rep.trace if name == "layer1.0.relu" and ph == "fwd"]
    assert len(relu) == 3 and sum(relu) == pytest.approx(rep.measured.call_s("layer1.0.relu", "fwd", 16))


def test_extrapolated_batches_are_reported():
    model, rep = traced("alexnet", 224, 1000, 8, "h200-measured", 1.0)
    assert "extrapolated" in rep.dev.name
    model(torch.randn(8, 3, 224, 224))
    assert rep.describe()["measured"]["extrapolated_batches"] == [8]


def test_replay_run_on_a_measured_device(as_rank0_of, tmp_path):
    """`train --compute replay --replay-device h200-measured` on one process: AlexNet at 224x224,
    batch 4 (below the records' 16: extrapolated, and the metrics say so)."""
    as_rank0_of(1)
    m = tmp_path / "m.json"
    assert train.main(["--strategy", "local", "--model", "alexnet", "--image-size", "224", "--num-classes", "1000", "--global-batch", "4",
                       "--steps", "2", "--device", "cpu", "--compute", "replay", "--replay-device", "h200-measured",
                       "--dilation", "10", "--metrics", str(m), "--quiet"]) == 0
    d = json.loads(m.read_text())["replay"]
    assert d["source"] == "measured record" and d["device"].startswith("h200-measured (measured record")
    assert "at batch 4 (extrapolated)" in d["device"]
    assert d["measured"]["batches"] == [16, 32, 64, 128] and d["measured"]["extrapolated_batches"] == [4]
    assert d["replayed_layers"] == 21  # every AlexNet leaf waits its own time
    step = DeviceProfile(**d["profile"]).step_compute_s(4)  # at or below b16: the b16 per-call times
    assert d["wait_s_per_rank"][0] >= 0.95 * 2 * 10 * step


def test_gradients_stay_in_their_buffers_and_follow_the_real_order():
    """Lean replay: a gradient bound to a buffer (a bucket's view) is handed over in place, step
    after step (no copy, no add: the same storage; zero_grad is a no-op), with no optimizer state;
    and every layer's parameters receive their gradients in the real backward's order (a Linear's
    bias before its weight), so bucket hooks fire as in a real step."""
    model, rep, _ = replayed()
    real = get_model("tiny_cnn", 10)
    orders = []
    for m in (real, model):
        order = []
        for n, p in m.named_parameters():
            p.register_post_accumulate_grad_hook(lambda _p, n=n, order=order: order.append(n))
        orders.append(order)
    flat = torch.empty(sum(p.numel() for p in model.parameters()))
    offset = 0
    for p in model.parameters():
        p.grad = flat[offset:offset + p.numel()].view_as(p)
        offset += p.numel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rep.replay_optimizer(opt)
    x = torch.randn(4, 3, 32, 32)
    with sample_keys(0, 0, torch.arange(4)):
        real(x).sum().backward()
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            model(x).sum().backward()
            opt.step()
            assert all(p.grad is not None and p.grad.untyped_storage().data_ptr() == flat.data_ptr()
                       for p in model.parameters())
    assert opt.state == {}
    assert orders[1] == 2 * orders[0] and orders[0][:2] == ["classifier.3.bias", "classifier.3.weight"]


def test_payload_scale_rule():
    """F brings the links' term of D down to 1, at most max_scale, and keeps the step's
    byte-weighted 10th-percentile message at or above the per-message floor where it is known."""
    from stanza_core.perf import replay_dilation, replay_payload_scale

    links = dict(max_link_mbit=1000, max_aggregate_mbit=1000)
    # 16 nodes at 100 Gb/s: links' term 1600; F capped at 32, then D = 1600 / 32 = 50
    assert replay_payload_scale(100, 16, **links, max_scale=32) == 32
    assert replay_dilation(100, 16, **links, payload_scale=32) == 50
    assert replay_dilation(100, 16, **links) == 1600
    # the links' term itself when it is under the cap (4 nodes at 1 Gb/s: 4), and never below 1
    assert replay_payload_scale(1, 4, **links, max_scale=32) == 4
    assert replay_dilation(1, 4, **links, payload_scale=4) == 1
    assert replay_payload_scale(0.01, 2, **links, max_scale=32) == 1
    # messages: a 1.2 MB 10th percentile over a 64 kB floor allows F = 18 at most
    assert replay_payload_scale(100, 16, **links, max_scale=32, message_bytes=1.2e6, min_message_bytes=65536) == 18
    assert replay_payload_scale(100, 16, **links, max_scale=32, message_bytes=1e3, min_message_bytes=65536) == 1
    # dedicated servers: the links' term is min(N, 2 S) links' worth
    assert replay_payload_scale(10, 17, **links, max_scale=64, ps_servers=1) == 20
    # the engine term is the engine's seconds at that F, not divided again
    assert replay_dilation(100, 16, **links, payload_scale=32, engine_s=3.0, target_step_s=0.5) == 120
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="payload_scale must be a positive integer"):
            replay_dilation(100, 16, **links, payload_scale=bad)


def test_a_scaled_link_keeps_the_unscaled_token_bucket_in_line_time():
    """The bucket of a link at rate / F carrying 1/F of each message holds what the unscaled
    link's bucket holds over F (the same line time), at least 2 frames; F = 1: burst_bytes."""
    from stanza_core.netem.cluster import burst_bytes, scaled_burst_bytes

    assert scaled_burst_bytes(62.5, 9000, 1) == burst_bytes(62.5, 9000) == 90140  # 10 frames: 11.5 ms at 62.5
    # 250 Mbit/s's bucket (10 frames, 90 kB) / 8 and 1000 Mbit/s's (1 ms, 125 kB) / 16 are under 2 frames
    assert scaled_burst_bytes(31.25, 9000, 8) == scaled_burst_bytes(62.5, 9000, 16) == 2 * 9014
    # 6.4 Gbit/s's bucket (1 ms: 800 kB) / 64: 1 ms at 100 Mbit/s, not the 10 frames a plain link would hold
    assert scaled_burst_bytes(100, 1500, 64) == burst_bytes(6400, 1500) // 64 == 12500 < burst_bytes(100, 1500)


def test_a_scaled_link_keeps_the_unscaled_queue_in_line_time():
    """The queue in front of a scaled link holds 1/F of the unscaled one's packets (a veth's 1000),
    so a reply queued behind another flow's data waits the same line time; at least 4 packets."""
    from stanza_core.netem.cluster import TXQUEUELEN, scaled_queue_packets

    assert TXQUEUELEN == 1000 and scaled_queue_packets(12) == 84 and scaled_queue_packets(32) == 32
    assert scaled_queue_packets(1000) == 4
