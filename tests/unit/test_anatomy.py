"""The layer profile (stanza_core.anatomy) against the paper's model-anatomy numbers.

Reference numbers (torchvision definitions, 224x224, 1000 classes): CONV/FC parameters, FC share
of parameters and of forward MACs, boundary values per sample, gradient sizes. Shares are
rounded to 0.1 percentage point in the paper, so they are checked to +-0.05 pp; parameter counts
and boundary sizes are exact. Total forward MACs are checked against torchvision's documented
GFLOPS (which are multiply-adds): AlexNet 0.71, VGG-16 15.47, ResNet-50 4.09.
"""
import json

import pytest
import torch
import torch.nn as nn

from stanza_core import Profile, get_model, profile_model

IMAGENET = (3, 224, 224)
HALF_TENTH_PP = 0.0005  # half of the paper's last digit (0.1 %)


@pytest.fixture(scope="module")
def alexnet():
    model = get_model("alexnet")
    return model, profile_model(model, IMAGENET, name="alexnet")


@pytest.fixture(scope="module")
def vgg16():
    return profile_model(get_model("vgg16"), IMAGENET, name="vgg16")


@pytest.fixture(scope="module")
def resnet50():
    return profile_model(get_model("resnet50"), IMAGENET, name="resnet50")


def test_alexnet_matches_the_paper(alexnet):
    _, p = alexnet
    assert (p.conv.params, p.fc.params) == (2_469_696, 58_631_144)
    assert p.boundary == "avgpool" and p.boundary_values == 9216 == 256 * 6 * 6
    assert p.boundary_bytes == 36_864  # 36.9 KB
    assert p.fc_param_share() == pytest.approx(0.960, abs=HALF_TENTH_PP)
    assert p.fc_flop_share() == pytest.approx(0.082, abs=HALF_TENTH_PP)
    assert round(4 * p.params / 1e6) == 244 and round(4 * p.conv.params / 1e6, 1) == 9.9  # MB
    assert round((p.conv.flops + p.fc.flops) / 2e9, 2) == 0.71  # GMACs


def test_vgg16_matches_the_paper(vgg16):
    p = vgg16
    assert (p.conv.params, p.fc.params) == (14_714_688, 123_642_856)
    assert p.boundary == "avgpool" and p.boundary_values == 25_088 == 512 * 7 * 7
    assert round(p.boundary_bytes / 1e3, 1) == 100.4  # KB
    assert p.fc_param_share() == pytest.approx(0.894, abs=HALF_TENTH_PP)
    assert p.fc_flop_share() == pytest.approx(0.008, abs=HALF_TENTH_PP)
    assert round(4 * p.params / 1e6) == 553 and round(4 * p.conv.params / 1e6, 1) == 58.9
    assert round((p.conv.flops + p.fc.flops) / 2e9, 2) == 15.47


def test_resnet50_is_the_counter_example(resnet50):
    p = resnet50
    assert (p.conv.params, p.fc.params) == (23_508_032, 2_049_000)  # 23.51 M / 2.05 M
    assert p.boundary == "flatten" and p.boundary_values == 2048
    assert p.fc_param_share() == pytest.approx(0.080, abs=HALF_TENTH_PP)
    assert round((p.conv.flops + p.fc.flops) / 2e9, 2) == 4.09


@pytest.mark.slow  # building VGG-19 takes seconds
def test_vgg19_conv_params():
    # Parameter counts do not depend on the input size (adaptive pooling): 32x32 keeps it fast.
    p = profile_model(get_model("vgg19"), (3, 32, 32), name="vgg19")
    assert (p.conv.params, p.fc.params) == (20_024_384, 123_642_856)  # 20.02 M
    assert p.fc_param_share() == pytest.approx(0.861, abs=HALF_TENTH_PP)


def test_layer_rows_are_an_independent_count(alexnet):
    """Each Conv2d row's FLOPs equal 2 x output values x (in_channels x kh x kw), each Linear's
    2 x in x out; the rows add up to the part totals; CONV rows come first."""
    model, p = alexnet
    modules = dict(model.named_modules())
    for r in p.layers:
        m = modules[r.name]
        assert r.params == sum(t.numel() for t in m.parameters())
        if isinstance(m, nn.Conv2d):
            assert r.flops == 2 * r.out_values * m.weight[0].numel()
        elif isinstance(m, nn.Linear):
            assert r.flops == 2 * m.in_features * m.out_features
        assert r.out_bytes == 4 * r.out_values
    for part in ("conv", "fc"):
        rows = [r for r in p.layers if r.part == part]
        assert sum(r.params for r in rows) == getattr(p, part).params
        assert sum(r.flops for r in rows) == getattr(p, part).flops
    parts = [r.part for r in p.layers]
    assert parts == sorted(parts)  # "conv" < "fc": no FC layer before a CONV layer
    assert [r.name for r in p.layers if r.part == "fc"][0] == "avgpool"
    assert {r.kind for r in p.layers if r.part == "fc" and r.params} == {"Linear"}


def test_dict_round_trip(alexnet):
    _, p = alexnet
    d = p.to_dict()
    assert d["boundary_bytes"] == p.boundary_bytes
    assert Profile.from_dict(d) == p
    assert Profile.from_dict(json.loads(json.dumps(d))) == p  # as stored in results.json


def test_times_are_measured_only_when_asked():
    # Backward is reported as median(forward+backward) - median(forward), so the model must do
    # enough work per part that the backward (about twice the forward) stands out of timer noise:
    # cifar_alexnet at batch 4 takes tens of milliseconds in its CONV part.
    model = get_model("cifar_alexnet").train()
    untimed = profile_model(model, (3, 32, 32), batch_size=4)
    assert untimed.conv.fwd_s is None and untimed.fc.bwd_s is None and untimed.timed_on is None
    timed = profile_model(model.eval(), (3, 32, 32), batch_size=4, time=True, reps=3)
    for part in (timed.conv, timed.fc):
        assert part.fwd_s > 0 and part.bwd_s > 0
    assert timed.timed_on == "cpu"
    assert not model.training  # the caller's mode is restored
    assert all(q.grad is None for q in model.parameters())  # and no gradients are left behind
    assert (timed.conv.params, timed.fc.flops) == (untimed.conv.params, untimed.fc.flops)


@pytest.mark.parametrize("kw, match", [
    ({"input_shape": (3, 224)}, "input_shape must be"),
    ({"input_shape": (3, 0, 224)}, "input_shape must be"),
    ({"batch_size": 0}, "batch_size must be"),
])
def test_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        profile_model(get_model("tiny_cnn"), **kw)


@pytest.mark.parametrize("name,size", [("alexnet", 224), ("vgg16", 32), ("vgg11_bn", 64), ("resnet18", 64),
                                       ("googlenet", 96), ("cifar_alexnet", 32)])
def test_named_profile_built_on_meta_equals_the_cpu_built_one(name, size):
    """named_profile builds zoo models on the meta device (no parameter values): every field of
    its profile equals the profile of the same model built with real tensors on the CPU."""
    from stanza_core import perf
    perf.named_profile.cache_clear()
    meta = perf.named_profile(name, image_size=size, num_classes=10, batch_size=8)
    cpu = profile_model(get_model(name, 10), (3, size, size), 8, name=name)
    assert meta.to_dict() == cpu.to_dict()
