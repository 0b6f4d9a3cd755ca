"""Per-sample dropout masks drawn once per layer and step over the global batch
(stanza_core.models: keep_uniforms, keep_scale, keep_mask, SampleDropout).

Semantics: a mask is a function of (seed, step, position of the sample in the global batch,
layer), keeps 1 - p of the elements, is independent from sample to sample, and does not depend
on which other samples share the batch. Cost: a layer's masks take torch's own handful of
operator calls (one draw, one compare, one scale per step; a slice and a multiply per forward),
whatever the batch, and a run of positions reaches the device without a copy.

Identical across strategies: every strategy draws its masks through `Strategy.dropout_keys(t,
positions)` with the global positions of its samples and the global batch, so a sample gets the
same mask under each; tests/dist/test_exactness.py (every strategy equals `local` with dropout
on) and tests/unit/test_split.py (conv + fc under sample_keys equals the whole model) check the
result.
"""
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from stanza_core.models import SampleDropout, keep_mask, keep_uniforms, layer_seed, sample_keys

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


def test_uniforms_are_uniform():
    u = keep_uniforms(0, 0, 0, 16, (4096,))  # 65536 uniforms
    counts = torch.bincount((u * 16).long().reshape(-1), minlength=16).double()  # 16 equal bins
    expected = u.numel() / 16
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # chi-square with 15 degrees of freedom: mean 15, std sqrt(30) = 5.5
    assert chi2 < 15 + N_SIGMA * math.sqrt(30)
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0


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


def test_a_row_does_not_depend_on_how_many_rows_are_drawn_on_the_cpu():
    """The CPU generator draws serially, so a sample's row is the same in a draw over 8 or 300
    samples: blocks that do not pass the global batch still agree with those that do."""
    few, many = keep_uniforms(4, 9, 2, 8, (100,)), keep_uniforms(4, 9, 2, 300, (100,))
    assert torch.equal(few, many[:8])
    x = torch.randn(3, 100)
    drop = SampleDropout(0.5, layer_id=2).train()
    with sample_keys(4, 9, range(5, 8)):
        a = drop(x)
    with sample_keys(4, 9, range(5, 8), rows=300):
        b = drop(x)
    assert torch.equal(a, b)


def test_a_mask_is_row_position_of_the_layers_documented_draw():
    """Recomputed here from torch itself: a generator seeded with layer_seed(seed, step, layer),
    uniforms over (rows, *shape), keep where u >= p."""
    seed, step, layer, rows, shape = 7, 2, 1, 20, (3, 4)
    g = torch.Generator().manual_seed(layer_seed(seed, step, layer))
    want = torch.rand((rows, *shape), generator=g) >= 0.5
    pos = torch.tensor([5, 0, 17])
    assert torch.equal(keep_mask(seed, step, pos, layer, shape, 0.5, rows=rows), want[pos])
    assert layer_seed(seed, step, layer) != layer_seed(seed, step + 2**32, layer)  # the step's high bits count


def dropout_ops(batch: int, chunks: int = 1) -> list[str]:
    """Operator calls of one step's dropout forwards over a batch in `chunks` blocks."""
    drop = SampleDropout(0.5, layer_id=0).train()
    per = batch // chunks
    x = torch.randn(per, 256)
    with OpLog() as log:
        for c in range(chunks):
            with sample_keys(1, 2, range(c * per, (c + 1) * per), rows=batch):
                drop(x)
    return log.ops


def test_masks_cost_torchs_handful_of_calls_whatever_the_batch():
    """One draw, one compare, one scale per step; one slice and one multiply per forward: the
    same five calls for a batch of 2 and of 64 (torch's own dropout takes four: empty_like,
    bernoulli_, div_, mul). A second block of the same step reuses the step's draw."""
    assert dropout_ops(2) == dropout_ops(64) == ["aten.rand", "aten.ge", "aten.mul", "aten.slice", "aten.mul"]
    assert dropout_ops(64, chunks=4) == ["aten.rand", "aten.ge", "aten.mul"] + ["aten.slice", "aten.mul"] * 4
    with OpLog() as log:
        torch.nn.functional.dropout(torch.randn(8, 256), 0.5, True)
    assert len(log.ops) == 5 and len(dropout_ops(8)) <= len(log.ops)  # randn + torch's four


def test_a_run_of_positions_reaches_the_device_without_a_copy():
    """A strategy's slice (a range) selects its rows by a slice on the activations' device; only
    scattered positions copy an index there. The meta device stands in for a GPU on a CPU machine."""
    meta = torch.device("meta")
    drop = SampleDropout(0.5, layer_id=0).train()
    for pos, copies in ((range(8, 16), False), (torch.tensor([3, 1, 2, 0, 4, 5, 6, 7]), True)):
        x = torch.empty(8, 32, device=meta)
        with sample_keys(0, 0, pos, rows=16), OpLog() as log:
            out = drop(x)
        assert out.device == meta and out.shape == x.shape
        assert ("aten._to_copy" in log.ops) == copies, log.ops


def test_positions_outside_the_global_batch_are_refused():
    with pytest.raises(ValueError, match="position 9 is outside a global batch of 8"):
        with sample_keys(0, 0, range(6, 10), rows=8):
            pass


