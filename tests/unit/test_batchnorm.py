"""Global batch-norm statistics: the math equals torch's BatchNorm (one worker, float64), the
layers switch in place (state_dict keys unchanged), and the performance model counts the
statistics traffic the engine moves."""
import copy

import pytest
import torch
import torch.nn as nn

from stanza_core.batchnorm import bn_channels, use_global_batch_stats
from stanza_core.perf import expected_bytes
from stanza_core.perf.traffic import ModelCounts
from stanza_core.variant import Variant


def test_one_worker_equals_torch_batchnorm_forward_backward_running_stats():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                        nn.Linear(4 * 6 * 6, 3), nn.BatchNorm1d(3, momentum=None)).double()
    mine = copy.deepcopy(ref)
    calls = []
    assert use_global_batch_stats(mine, lambda t: calls.append(t.numel()), 1) == 2
    assert mine.state_dict().keys() == ref.state_dict().keys()
    assert isinstance(mine[1], nn.BatchNorm2d)  # still a BatchNorm2d for every isinstance check
    w = torch.randn(5, 3, dtype=torch.float64)
    for _ in range(3):
        x = torch.randn(5, 3, 8, 8, dtype=torch.float64) * 3 + 1
        for m in (ref, mine):
            m.zero_grad()
            (m(x) * w).sum().backward()
        for (n, a), (_, b) in zip(ref.named_parameters(), mine.named_parameters()):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-10, atol=1e-12, msg=n)
        for (n, a), (_, b) in zip(ref.named_buffers(), mine.named_buffers()):
            torch.testing.assert_close(b, a, msg=n)
    # per step and layer: sum and centred sum of squares forward, their gradients backward
    assert calls == [4, 4, 3, 3, 3, 3, 4, 4] * 3
    mine.eval()
    ref.eval()
    torch.testing.assert_close(mine(x), ref(x))


def test_expected_bytes_count_bn_statistics():
    counts = ModelCounts(conv_params=100, fc_params=1000, boundary_values=8, bn_conv_channels=24, bn_fc_channels=0)
    ddp = expected_bytes(counts, Variant("ddp"), 3, global_batch=6)
    assert ddp[0]["sent"]["bn_stats"] == round(2 * 2 * 16 * 24 / 3)
    stanza = expected_bytes(counts, Variant("stanza", fc_workers=1), 3, global_batch=6)
    assert stanza[0]["sent"]["bn_stats"] == round(2 * 1 * 16 * 24 / 2) and "bn_stats" not in stanza[2]["sent"]
    assert "bn_stats" not in expected_bytes(counts, Variant("ps"), 3, global_batch=6, bn_stats="local")[0]["sent"]


@pytest.mark.parametrize("name,channels", [("vgg16_bn", 4224), ("resnet18", 4800)])
def test_bn_channels_of_zoo_models(name, channels):
    from stanza_core.models import get_model

    assert bn_channels(get_model(name, 10)) == channels
