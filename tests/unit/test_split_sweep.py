"""The split against torchvision's classification models (random init, small inputs, eval mode):
each splits with fc(conv(x)) == model(x) and parameters adding up, or is refused with a reason.

The default run covers one model per family (the cheap ones); STANZA_FULL_SWEEP=1 runs every
model of torchvision.models.list_models(module=torchvision.models) (docs/models.md)."""
import os

import pytest
import torch

from stanza_core.experiments.split_sweep import build, classification_models, main, sweep_one
from stanza_core.split import SplitError, split_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

FAMILIES = ["alexnet", "resnet18", "mobilenet_v3_small", "shufflenet_v2_x0_5", "mnasnet0_5", "squeezenet1_1",
            "googlenet", "regnet_x_400mf", "efficientnet_b0", "densenet121", "vit_b_32", "swin_t"]
NAMES = classification_models() if os.environ.get("STANZA_FULL_SWEEP") else FAMILIES


@pytest.mark.parametrize("name", NAMES)
def test_splits_exactly_or_is_refused_with_a_reason(name):
    row = sweep_one(name, sizes=(32, 64, 96, 224))
    assert row.outcome in ("split", "refused"), (row.outcome, row.reason)
    if row.outcome == "refused":
        assert row.reason.startswith(type(build(name, row.image_size)).__name__ + ":") and len(row.reason.splitlines()) == 1
    if name.startswith(("vit_", "swin_")):  # the cut lands after the patch embedding: says so
        assert row.fc_heavy, row


def test_squeezenet_is_refused_it_has_no_fc_layer():
    assert "no single-tensor cut" in sweep_one("squeezenet1_1", sizes=(64,)).reason


def test_auxiliary_heads_are_refused_with_a_hint():
    import torchvision.models as tvm

    model = tvm.googlenet(weights=None, num_classes=10, aux_logits=True, init_weights=True).eval()
    with pytest.raises(SplitError, match="aux_logits=False"):
        split_model(model, input_shape=(3, 64, 64), batch_size=2)


def test_model_that_does_not_run_at_the_default_size_asks_for_input_shape():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 30 * 30, 10))
    with pytest.raises(SplitError, match=r"pass input_shape=\(C, H, W\)"):
        split_model(net)
    assert split_model(net, input_shape=(3, 32, 32)).boundary_shape == (4, 30, 30)


def test_cli_prints_the_table_and_the_counts(capsys):
    assert main(["squeezenet1_1"]) == 0
    out = capsys.readouterr().out
    assert "| squeezenet1_1 | 32 | refused |" in out and out.strip().endswith("1 models: 1 refused; 0 of the splits "
                                                                             "put most FLOPs on the FC side")
    assert main(["resnet9000"]) == 2
    assert capsys.readouterr().err.strip() == "error: not torchvision classification models: resnet9000"

