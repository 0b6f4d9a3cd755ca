"""The engine's step issues no more operator calls than the PyTorch step it stands for.

On a GPU each operator call is a kernel launch the host issues, so on a short (launch-bound)
step the engine's extra calls are extra host time: this count is the GPU overhead measured
where no GPU is. Per model (AlexNet and VGG-16 with dropout, ResNet-50, VGG-11 with batch norm)
one `local` step is set against a plain loop (zero_grad, forward, cross_entropy, backward, SGD),
and one `ddp` step at world size 1 against torch's DDP at the same bucket size with no comm hook
(the engine's counting hook, its wait and the timeline marks are the difference). Bound 1.05x,
and no host read (`.item()`, `float(t)`, a device-to-host copy) inside the step. Figures of the
last run: docs/benchmarks.md, "The engine at its pieces' cost".
"""
import pytest

from stanza_core.opcount import OpCounter, count, engine_vs_plain, one_rank_group

pytestmark = pytest.mark.slow

BOUND = 1.05
CASES = [("alexnet", 64, 4), ("vgg16", 32, 4), ("resnet50", 32, 2), ("vgg11_bn", 32, 4)]


@pytest.mark.parametrize("model,image_size,batch", CASES)
def test_a_local_step_costs_the_plain_loops_calls(model, image_size, batch):
    r = engine_vs_plain(model, "local", image_size=image_size, batch=batch)
    assert r["ratio"] <= BOUND, r
    assert r["host_reads"] == [], r


@pytest.mark.parametrize("model,image_size,batch", CASES)
def test_a_ddp_step_costs_plain_ddps_calls(model, image_size, batch):
    with one_rank_group():
        r = engine_vs_plain(model, "ddp", image_size=image_size, batch=batch)
    assert r["ratio"] <= BOUND, r
    assert r["host_reads"] == [], r


def test_the_counter_sees_a_host_read_and_every_call():
    """The two things the tests above judge can be seen: a planted .item() is a host read, and a
    step with a planted extra call per parameter counts more."""
    import torch

    x = torch.ones(3)
    c = count(lambda: (x * 2).sum().item())
    assert c.host_reads == ["aten._local_scalar_dense"] and c.total == 3
    with OpCounter() as c2:
        float(x.sum())
    assert c2.host_reads == ["aten._local_scalar_dense"]
