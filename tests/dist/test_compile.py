"""`--compile` (stanza_core/engine/compiled.py): the compiled step is the eager step, within fp32 rounding.

tiny_cnn (dropout on), global batch 24, 4 steps of momentum SGD. A compiled stanza run (3 ranks:
the CONV body and the FC head compiled apart, activations crossing between them; the whole-model
case is the same `nn.Module.compile`, tests/unit/test_compiled.py) ends within rtol 1e-5 / atol
1e-6 of the eager `local` run: the tolerance of
every strategy against `local` (numerics.EXACT_TOLERANCE). Fused kernels round in another order,
so bitwise equality is not claimed; a wrong mask, sample or gradient is off by > 1e-3
(tests/dist/test_exactness.py). The compiled run's metrics record the flags.
"""
import pytest

from dist_launch import assert_same_params, train

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# the options of the local run test_gpu_path_dist.py, test_toy_strategy.py and test_beyond_dist.py
# compare with (conftest.local_run): the eager oracle is that one run
COMMON = ["--model", "tiny_cnn", "--image-size", "32", "--global-batch", "24", "--steps", "4", "--lr", "0.05"]


def test_compiled_stanza_equals_eager_local(tmp_path, local_run):
    _, eager, _ = local_run(*COMMON)
    # --warmup 2: the first two (compiling) steps left out of the throughput; the parameters do not depend on it
    metrics, stanza, _ = train(tmp_path, "stanza", 3, "--strategy", "stanza", "--fc-workers", "1", "--compile",
                               *COMMON, "--warmup", "2", timeout=420)
    assert metrics["config"]["compile"] is True and metrics["config"]["compile_mode"] == "default"
    assert_same_params(stanza, eager)
