"""Per-sample dropout masks hashed on the tensor's device (stanza_core.models.keep_mask).

Semantics kept from the per-sample generators they replace: a mask is a function of (seed, step,
position of the sample in the global batch, layer), keeps 1 - p of the elements, is independent
from sample to sample, and does not depend on which other samples share the batch. New: the masks
of a batch are made by a fixed number of tensor operations, whatever the batch size (no loop over
samples), and positions that form a run are made on the device without a host-to-device copy.

Identical across strategies: every strategy draws its masks through `Strategy.dropout_keys(t,
positions)` with the global positions of its samples, so a sample gets the same mask under each;
tests/dist/test_exactness.py (every strategy equals `local` with dropout on) and
tests/unit/test_split.py (conv + fc under sample_keys equals the whole model) check the result.
"""
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from stanza_core.models import SampleDropout, keep_mask, keep_uniforms, sample_keys

N_SIGMA = 5.0  # bounds below are N_SIGMA standard deviations of the statistic under the null


class OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def corr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().reshape(-1), b.double().reshape(-1)
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / (a.norm() * b.norm()))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_is_1_minus_p_within_binomial_tolerance(p):
    m = keep_mask(3, 11, torch.arange(64), 2, (64, 64), p)  # 64 samples x 4096 elements
    n = m.numel()
    # kept count ~ Binomial(n, 1 - p): the kept fraction has std sqrt(p (1 - p) / n)
    # (0.0006 at p = 0.1, 0.001 at p = 0.5 for n = 262144)
    tol = N_SIGMA * math.sqrt(p * (1 - p) / n)
    assert abs(m.float().mean().item() - (1 - p)) < tol
    for row in m.reshape(64, -1):  # and per sample, over its own 4096 elements
        assert abs(row.float().mean().item() - (1 - p)) < N_SIGMA * math.sqrt(p * (1 - p) / row.numel())


def test_hash_bits_are_uniform():
    h = keep_uniforms(0, 0, torch.arange(16), 0, 4096)  # 65536 32-bit hashes
    counts = torch.bincount((h >> 28).reshape(-1), minlength=16).double()  # 16 bins of the top bits
    expected = h.numel() / 16
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # chi-square with 15 degrees of freedom: mean 15, std sqrt(30) = 5.5
    assert chi2 < 15 + N_SIGMA * math.sqrt(30)
    assert int(h.min()) >= 0 and int(h.max()) < 2**32


def test_masks_of_other_positions_layers_steps_seeds_differ_and_are_uncorrelated():
    shape, base = (1 << 16,), dict(seed=5, step=7, layer_id=1)
    ref = keep_mask(positions=torch.tensor([3]), shape=shape, p=0.5, **base)[0]
    others = {
        "next position": keep_mask(positions=torch.tensor([4]), shape=shape, p=0.5, **base)[0],
        "next step": keep_mask(5, 8, torch.tensor([3]), 1, shape, 0.5)[0],
        "step + 2^32": keep_mask(5, 7 + 2**32, torch.tensor([3]), 1, shape, 0.5)[0],
        "next layer": keep_mask(5, 7, torch.tensor([3]), 2, shape, 0.5)[0],
        "next seed": keep_mask(6, 7, torch.tensor([3]), 1, shape, 0.5)[0],
    }
    # two independent Bernoulli(1/2) masks of n elements: Pearson r has std 1 / sqrt(n) (0.004)
    bound = N_SIGMA / math.sqrt(shape[0])
    for what, m in others.items():
        assert not torch.equal(m, ref), what
        assert abs(corr(m, ref)) < bound, what


def test_samples_of_one_batch_are_independent():
    m = keep_mask(0, 0, torch.arange(64), 0, (4096,), 0.5).double()
    c = torch.corrcoef(m)  # 64 x 64 Pearson correlations of the samples' masks
    off = c[~torch.eye(64, dtype=torch.bool)].abs()
    # 2016 distinct pairs, each r ~ N(0, 1/4096) under independence (std 0.0156): the largest
    # of 2016 |N(0, 1)| exceeds 5.5 with probability < 2016 * 4e-8 < 1e-4
    assert float(off.max()) < 5.5 / math.sqrt(4096)
    # and the average pair: mean of 2016 r's has std 0.0156 / sqrt(2016)
    assert abs(float(c[~torch.eye(64, dtype=torch.bool)].mean())) < N_SIGMA / math.sqrt(4096 * 2016)


def test_a_sample_gets_the_same_mask_in_any_batch_composition():
    drop = SampleDropout(0.5, layer_id=4).train()
    x = torch.randn(16, 3, 5, 5)
    with sample_keys(9, 3, torch.arange(16)):
        whole = drop(x)
    for pos in (torch.tensor([5]), torch.tensor([5, 2, 7]), torch.arange(4, 9), torch.tensor([15, 5, 0])):
        with sample_keys(9, 3, pos):
            part = drop(x[pos])
        assert torch.equal(part, whole[pos]), pos.tolist()


def test_masks_are_made_without_a_loop_over_samples():
    """The operator calls of a dropout forward are the same for a batch of 2 and of 64."""
    drop = SampleDropout(0.5, layer_id=0).train()

    def ops(batch: int) -> list[str]:
        x = torch.randn(batch, 256)
        keep_mask(0, 0, torch.arange(batch), 0, (256,), 0.5)  # the element keys are cached once per shape
        with sample_keys(1, 2, torch.arange(10, 10 + batch)), OpLog() as log:
            drop(x)
        return log.ops

    small, large = ops(2), ops(64)
    assert small == large
    assert 0 < len(small) < 40  # a fixed handful of elementwise integer ops, then the scaling


def test_a_run_of_positions_reaches_the_device_without_a_copy():
    """Positions 0..b-1 (a strategy's slice) are made on the activations' device by arange; only
    scattered positions are copied there. The meta device stands in for a GPU on a CPU machine."""
    meta = torch.device("meta")
    drop = SampleDropout(0.5, layer_id=0).train()
    for pos, copies in ((torch.arange(8, 16), False), (torch.tensor([3, 1, 2, 0, 4, 5, 6, 7]), True)):
        x = torch.empty(8, 32, device=meta)
        with sample_keys(0, 0, pos), OpLog() as log:
            out = drop(x)
        assert out.device == meta and out.shape == x.shape
        assert ("aten._to_copy" in log.ops) == copies, log.ops
