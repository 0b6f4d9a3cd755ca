"""The CONV|FC split (stanza_core.split): exactness, partition of parameters, boundaries, errors."""
import pytest
import torch
import torch.fx as fx
import torch.nn as nn

from stanza_core import MODEL_NAMES, SplitError, get_model, split_model
from stanza_core.models import MIN_IMAGE_SIZE, sample_keys
from stanza_core.variant import Variant

BATCH = 3
# VGG variants share torchvision's VGG class with vgg16 (and vgg11_bn covers batch norm); each
# takes seconds to build and split, so they run in the full suite only.
HEAVY = {"vgg11", "vgg13", "vgg19", "vgg13_bn", "vgg16_bn", "vgg19_bn"}
ZOO = [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in MODEL_NAMES]


def _size(name: str) -> int:
    # Small inputs keep the suite fast. ResNet needs 64: at 32 its last feature map is 1x1, the
    # tensors before and after global pooling have the same size, and the earlier cut (avgpool)
    # wins the tie. At 224 the boundaries are checked in test_anatomy.py.
    return 64 if name.startswith("resnet") else max(32, MIN_IMAGE_SIZE.get(name, 1))


@pytest.fixture(scope="module", params=ZOO)
def zoo(request):
    """(name, model, split, x) once per zoo model for this module."""
    name = request.param
    model = get_model(name, num_classes=10)
    s = _size(name)
    return name, model, split_model(model, input_shape=(3, s, s)), torch.randn(BATCH, 3, s, s)


def test_exact_in_eval_mode(zoo):
    name, model, split, x = zoo
    model.eval()
    with torch.no_grad():
        assert torch.equal(split.fc(split.conv(x)), model(x))


def test_exact_in_train_mode_with_dropout_and_batch_norm(zoo):
    """Same dropout masks through sample_keys; batch norm sees the same batch on both paths, so
    outputs and gradients are bit-equal (no tolerance)."""
    name, model, split, x = zoo
    model.train()
    with sample_keys(seed=3, step=1, positions=torch.arange(BATCH)):
        whole = model(x)
        whole.square().sum().backward()
        ref = {n: p.grad.clone() for n, p in model.named_parameters()}
        model.zero_grad(set_to_none=True)
        parts = split.fc(split.conv(x))
        parts.square().sum().backward()
    assert torch.equal(parts, whole)
    assert all(torch.equal(p.grad, ref[n]) for n, p in model.named_parameters())
    model.zero_grad(set_to_none=True)


def test_every_parameter_and_buffer_in_exactly_one_part_under_its_name(zoo):
    name, model, split, _ = zoo
    for kind in ("parameters", "buffers"):
        whole = dict(getattr(model, f"named_{kind}")())
        conv = dict(getattr(split.conv, f"named_{kind}")())
        fc = dict(getattr(split.fc, f"named_{kind}")())
        assert not set(conv) & set(fc), kind
        assert set(conv) | set(fc) == set(whole), kind
        # The parts hold the model's own tensors (shared, not copied): training a part trains the model.
        assert all(t is whole[n] for n, t in {**conv, **fc}.items()), kind
    assert split.conv_param_names() == list(dict(split.conv.named_parameters()))
    assert split.conv_param_names() and split.fc_param_names()


def test_automatic_boundary(zoo):
    name, model, split, _ = zoo
    if name == "alexnet" or name.startswith("vgg"):
        assert split.boundary == "avgpool"  # the features | classifier cut
        assert all(n.startswith("classifier.") for n in split.fc_param_names())
        assert all(n.startswith("features.") for n in split.conv_param_names())
    elif name.startswith("resnet"):
        assert split.boundary == "flatten"
        assert set(split.fc_param_names()) == {"fc.weight", "fc.bias"}


def test_sequential_is_cut_without_fx():
    model = get_model("tiny_sequential")
    split = split_model(model, input_shape=(3, 16, 16))
    assert type(split.conv) is nn.Sequential and type(split.fc) is nn.Sequential
    assert not isinstance(split.conv, fx.GraphModule)
    assert split.boundary == "3"  # Flatten: the pooled 8x4x4 tensor crosses
    assert split.conv_param_names() == ["0.weight", "0.bias"]
    x = torch.randn(2, 3, 16, 16)
    model.eval()
    assert torch.equal(split.fc(split.conv(x)), model(x))


def test_automatic_boundary_trades_activation_bytes_for_parameter_bytes():
    """bytes = 2*b*A*4 + 2*2*P_conv*4 (both directions of both terms): AlexNet's first Linear
    (37.7 M params) moves to the CONV side once 8*b*(9216-4096) > 16*37.7 M, i.e. b > ~14,746
    samples per CONV worker."""
    model = get_model("alexnet")
    assert split_model(model, input_shape=(3, 224, 224), batch_size=32).boundary == "avgpool"
    assert split_model(model, input_shape=(3, 224, 224), batch_size=14_000).boundary == "avgpool"
    big = split_model(model, input_shape=(3, 224, 224), batch_size=15_000)
    assert big.boundary == "classifier.2"  # the ReLU after classifier.1
    assert "classifier.1.weight" in big.conv_param_names()


# ---------------------------------------------------------------------------------------------
# Forced boundaries


@pytest.fixture(scope="module")
def alexnet():
    return get_model("alexnet", num_classes=10).eval()


@pytest.mark.parametrize("boundary, first_fc_param", [
    ("features.3", "features.3.weight"),  # any single-tensor cut may be forced, CONV layers included
    ("avgpool", "classifier.1.weight"),
    ("classifier.1", "classifier.1.weight"),  # after the dropout: the dropout stays on the CONV side
    ("classifier.4", "classifier.4.weight"),  # the first Linear moves to the CONV side
])
def test_forced_boundary(alexnet, boundary, first_fc_param):
    split = split_model(alexnet, boundary, input_shape=(3, 64, 64))
    assert split.boundary == boundary
    assert split.fc_param_names()[0] == first_fc_param
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(split.fc(split.conv(x)), alexnet(x))


def test_forced_boundary_on_resnet_and_sequential():
    resnet = get_model("resnet18").eval()
    split = split_model(resnet, "fc", input_shape=(3, 32, 32))
    assert set(split.fc_param_names()) == {"fc.weight", "fc.bias"}
    block = split_model(resnet, "layer4.0.conv1", input_shape=(3, 32, 32))  # a residual block's input
    assert block.fc_param_names()[0] == "layer4.0.conv1.weight"
    seq = split_model(get_model("tiny_sequential"), "4", input_shape=(3, 16, 16))
    assert seq.fc_param_names() == ["4.weight", "4.bias", "7.weight", "7.bias"]
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(block.fc(block.conv(x)), resnet(x))


# ---------------------------------------------------------------------------------------------
# Errors: SplitError (a ValueError), one line, naming the model


def _one_line_split_error(model, boundary=None, **kw) -> str:
    with pytest.raises(SplitError) as e:
        split_model(model, boundary, input_shape=(3, 16, 16), **kw)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(type(model).__name__ + ": ")
    return msg


@pytest.mark.parametrize("boundary", ["features.0", "classifier.1.weight", "nope"])
def test_forced_name_that_is_not_a_cut(alexnet, boundary):
    msg = _one_line_split_error(alexnet, boundary)
    assert f"{boundary!r} is not a single-tensor cut" in msg
    assert "valid boundaries: features.1," in msg and "avgpool" in msg


def test_forced_boundary_with_nothing_after_it():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 14 * 14, 5), nn.ReLU())
    msg = _one_line_split_error(model, "3")
    assert "leaves no parameters on the FC side" in msg


class _Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))


class _DataDependent(_Conv):
    def forward(self, x):
        y = self.conv(x)
        if y.sum() > 0:  # control flow on a tensor's value: fx cannot trace it
            return y
        return -y


class _TwoInputs(_Conv):
    def forward(self, x, y):
        return self.conv(x) + self.conv(y)


@pytest.mark.parametrize("model, reason", [
    (nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()),
     "no single-tensor cut has parameters on both sides"),
    (_Conv(), "no single-tensor cut has parameters on both sides"),
    (nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3)), "no convolution after it"),
    (_DataDependent(), "cannot be traced by torch.fx"),
    (_TwoInputs(), "forward takes 2 inputs, expected one image tensor"),
], ids=["sequential-no-fc", "traced-no-fc", "conv-last", "data-dependent", "two-inputs"])
def test_models_without_a_valid_split(model, reason):
    assert reason in _one_line_split_error(model)
    assert issubclass(SplitError, ValueError)  # callers that catch bad input as ValueError see it


def test_release_frees_one_part_and_leaves_the_other_untouched():
    """A stanza rank keeps only the part it trains: the other part's tensors become meta (no
    storage), the kept part is the very same tensors with the same values."""
    from stanza_core.topology import unused_part
    from stanza_core.topology import make_topology

    model = get_model("alexnet", 10)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    split = split_model(model, input_shape=(3, 64, 64), batch_size=2)
    conv = list(split.conv.parameters())
    split.release("fc")
    assert all(p.is_meta for p in split.fc.parameters()) and all(p.is_meta for p in split.fc.buffers())
    assert all(a is b for a, b in zip(conv, split.conv.parameters()))
    fc_names = {"classifier." + n for n, _ in model.classifier.named_parameters()}
    for k, v in model.state_dict().items():
        assert v.is_meta == (k in fc_names), k
        if not v.is_meta:
            assert torch.equal(v, before[k]), k
    x = torch.randn(2, 3, 64, 64)
    assert split.conv(x).shape == (2, *split.boundary_shape)  # the CONV worker's work still runs

    class Head(nn.Module):  # a head whose parameter the traced FC part holds itself (get_attr)
        def __init__(self):
            super().__init__()
            self.conv, self.w = nn.Conv2d(3, 4, 3), nn.Parameter(torch.randn(4, 10))

        def forward(self, x):
            return torch.flatten(nn.functional.adaptive_avg_pool2d(self.conv(x), 1), 1) @ self.w

    head = Head()
    traced = split_model(head, input_shape=(3, 8, 8), batch_size=2)
    traced.release("fc")
    assert head.w.is_meta and not head.conv.weight.is_meta  # the model's own module sees it too
    paper = make_topology(Variant("stanza", fc_workers=1), 4, 12)
    assert [unused_part(paper, r) for r in range(4)] == ["fc", "fc", "fc", "conv"]
    hybrid = make_topology(Variant("stanza", fc_workers=1, fc_conv_share=0.25), 4, 12)
    assert [unused_part(hybrid, r) for r in range(4)] == ["fc", "fc", "fc", None]  # it trains both
