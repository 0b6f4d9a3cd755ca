"""The model zoo and SampleDropout (stanza_core.models)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from stanza_core.models import MIN_IMAGE_SIZE, MODEL_NAMES, SampleDropout, get_model, sample_keys

NUM_CLASSES = 7  # not 1000 or 10, so a head that ignores num_classes is caught
# nn.Dropout layers of each architecture's definition and their probability (torchvision: AlexNet
# and VGG have two in the classifier, ResNet none, GoogLeNet one at 0.2 and Inception v3 one at
# 0.5 once their auxiliary heads are off).
DROPOUTS = {"alexnet": 2, "resnet18": 0, "resnet50": 0, "tiny_cnn": 1, "cifar_alexnet": 2, "tiny_sequential": 1,
            "googlenet": 1, "inception_v3": 1}
DROPOUT_P = {"googlenet": 0.2}
# VGG variants share torchvision's VGG class with vgg16 (vgg11_bn covers batch norm) and take
# seconds each to build: full suite only.
HEAVY = {"vgg11", "vgg13", "vgg19", "vgg13_bn", "vgg16_bn", "vgg19_bn"}
ZOO = [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in MODEL_NAMES]


def _image_size(name: str) -> int:
    return max(32, MIN_IMAGE_SIZE.get(name, 1))


@pytest.fixture(scope="module", params=ZOO)
def built(request):
    """(name, model) built once per module for each zoo name (VGG takes ~1.5 s to initialise)."""
    return request.param, get_model(request.param, NUM_CLASSES)


def test_every_name_builds_and_respects_num_classes(built):
    name, model = built
    model.eval()
    s = _image_size(name)
    with torch.no_grad():
        out = model(torch.randn(2, 3, s, s))
    assert out.shape == (2, NUM_CLASSES)
    last_linear = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    assert last_linear.out_features == NUM_CLASSES


def test_every_dropout_is_a_sample_dropout(built):
    name, model = built
    assert not any(type(m) is nn.Dropout for m in model.modules())
    drops = [m for m in model.modules() if isinstance(m, SampleDropout)]
    assert len(drops) == DROPOUTS.get(name, 2)  # every VGG variant has two
    assert sorted(d.layer_id for d in drops) == list(range(len(drops)))  # distinct ids: distinct masks
    assert all(d.p == DROPOUT_P.get(name, 0.5) for d in drops)  # the definitions' probability is kept


@pytest.mark.parametrize("name", ["tiny_cnn", "resnet18"])
def test_random_init_depends_on_the_seed_only(name):
    torch.manual_seed(1)
    a = get_model(name).state_dict()
    torch.manual_seed(1)
    b = get_model(name).state_dict()
    torch.manual_seed(2)
    c = get_model(name).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    weights = [k for k in a if k.endswith("weight") and a[k].numel() > 1 and a[k].std() > 0]
    assert weights and all(not torch.equal(a[k], c[k]) for k in weights)


def test_unknown_name_is_a_one_line_error_listing_the_names():
    with pytest.raises(ValueError) as e:
        get_model("resnet51")
    msg = str(e.value)
    assert "\n" not in msg and "'resnet51'" in msg
    assert all(n in msg for n in MODEL_NAMES)


@pytest.mark.parametrize("bad", [0, -3, 2.5, "10", None])
def test_bad_num_classes_is_a_one_line_error(bad):
    with pytest.raises(ValueError, match="num_classes") as e:
        get_model("tiny_cnn", bad)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------
# SampleDropout


@pytest.fixture
def drop():
    return SampleDropout(0.5, layer_id=3).train()


def test_same_key_same_mask_other_key_other_mask(drop):
    x = torch.randn(4, 64)
    pos = torch.arange(4)
    with sample_keys(seed=5, step=2, positions=pos):
        a, b = drop(x), drop(x)
    with sample_keys(seed=5, step=3, positions=pos):
        other_step = drop(x)
    with sample_keys(seed=6, step=2, positions=pos):
        other_seed = drop(x)
    assert torch.equal(a, b)
    for other in (other_step, other_seed):
        assert not torch.equal(a, other)
    other_layer = SampleDropout(0.5, layer_id=4).train()
    with sample_keys(seed=5, step=2, positions=pos):
        assert not torch.equal(a, other_layer(x))


def test_mask_does_not_depend_on_which_subset_of_the_batch_is_given(drop):
    """A CONV worker holding samples 5, 2, 7 of the global batch draws their masks as the
    single-process oracle holding all 8 does: the per-sample key, not the position in the tensor."""
    x = torch.randn(8, 3, 5, 5)
    with sample_keys(seed=0, step=11, positions=torch.arange(8)):
        full = drop(x)
    idx = torch.tensor([5, 2, 7])
    with sample_keys(seed=0, step=11, positions=idx):
        part = drop(x[idx])
    assert torch.equal(part, full[idx])
    assert not torch.equal(full[5] != 0, full[2] != 0)  # and different samples get different masks


def test_mask_keeps_1_minus_p_and_rescales(drop):
    x = torch.ones(2, 10_000)
    with sample_keys(seed=1, step=0, positions=torch.tensor([0, 1])):
        y = drop(x)
    assert set(y.unique().tolist()) <= {0.0, 2.0}  # kept values are scaled by 1 / (1 - p)
    # 20,000 Bernoulli(0.5) draws: std of the kept fraction is 0.0035; 0.02 is over 5 std.
    assert abs((y > 0).float().mean().item() - 0.5) < 0.02


def test_outside_sample_keys_it_is_torch_dropout(drop):
    x = torch.randn(4, 32)
    with sample_keys(seed=1, step=0, positions=torch.arange(4)):
        drop(x)  # the key is dropped again when the block ends
    torch.manual_seed(9)
    a = drop(x)
    torch.manual_seed(9)
    assert torch.equal(a, F.dropout(x, 0.5, True))


def test_identity_in_eval_mode_and_at_p_zero(drop):
    x = torch.randn(3, 8)
    with sample_keys(seed=1, step=0, positions=torch.arange(3)):
        assert torch.equal(drop.eval()(x), x)
        assert torch.equal(SampleDropout(0.0).train()(x), x)


def test_positions_must_match_the_batch(drop):
    with sample_keys(seed=1, step=0, positions=torch.arange(3)):
        with pytest.raises(RuntimeError, match="3 positions, batch has 4"):
            drop(torch.randn(4, 8))


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_probability_out_of_range_is_rejected(p):
    with pytest.raises(ValueError, match="dropout probability"):
        SampleDropout(p)
