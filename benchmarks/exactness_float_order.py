"""How far float32 summation order alone moves the parameters of tests/dist/test_exactness.py's
cases: each case's model, image size, global batch, steps, lr (0.05) and momentum (0.9) trained in
ONE process, the gradient of each global batch summed over every contiguous chunking of it (what
the data workers of ddp, ps and stanza do, and more), against the unchunked run.

    python benchmarks/exactness_float_order.py --out benchmarks/results/exactness_float_order.json

No process group, no communication: a difference here is float order plus training dynamics only.
It includes the near-ties of ReLU and max pooling that an ulp flips (float_order_drift.py): one
flipped window moves one step's gradient by far more than an ulp, and which chunking meets one is
luck, so a run's spread is either ~1e-8 or, after a flip, ~1e-5. Per model, the largest excess of
|chunked - unchunked| over the test's relative tolerance (RTOL |unchunked|), over every parameter
and chunking, sets the test's absolute tolerance by the convergence bounds' rule
(experiments.convergence.exact_bound: 10 x, rounded up to one digit); the strategies' runs it
judges are not among the runs it is set from. The same script trains each model with one wrong
label (step 0's last sample) to show what the tolerance must stay below;
tests/unit/test_exactness_tolerance.py checks the file against the rule and that margin.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import float_order_drift as drift  # noqa: E402 (a sibling script: its training loop)

from stanza_core import atomic  # noqa: E402
from stanza_core.data import batch_indices, open_dataset  # noqa: E402
from stanza_core.experiments import convergence  # noqa: E402

RTOL = 1e-5  # tests/dist/dist_launch.assert_same_params's relative tolerance
# (model, image size, global batch, steps): test_exactness.CASES's configurations
CONFIGS = [("tiny_cnn", 32, 24, 6), ("alexnet", 64, 12, 5)]
LR, MOMENTUM, SEED = 0.05, 0.9, 0


def excess(run: dict, ref: dict) -> tuple[float, float]:
    """(largest |a - b|, largest |a - b| - RTOL |b|) over every element of every parameter."""
    worst_abs = max(float((run[k] - ref[k]).abs().max()) for k in ref)
    worst_excess = max(float(((run[k] - ref[k]).abs() - RTOL * ref[k].abs()).max()) for k in ref)
    return worst_abs, worst_excess


def measure(model: str, image_size: int, g: int, steps: int) -> dict:
    q = dict(model=model, global_batch=g, steps=steps, lr=LR, momentum=MOMENTUM, seed=SEED)
    ds = open_dataset("synthetic", image_size, 10, SEED)
    batches = [ds.get(batch_indices(ds, t, g, SEED, slice(0, g))) for t in range(steps)]
    ref = drift.train(batches, g, torch.float32, q)[1][-1]
    chunks = {}
    for c in (c for c in range(g - 1, 0, -1) if g % c == 0):
        worst_abs, worst_excess = excess(drift.train(batches, c, torch.float32, q)[1][-1], ref)
        chunks[f"{g // c}x{c}"] = {"max_abs_diff": worst_abs, "max_excess": worst_excess}
        print(f"{model}: {g // c:2d} chunks of {c:2d}: max |diff| {worst_abs:.2e}, "
              f"max |diff| - rtol |ref| {worst_excess:.2e}", flush=True)
    worst = max(r["max_excess"] for r in chunks.values())
    atol = convergence.exact_bound({"largest excess": worst}) if worst > 0 else 0.0
    # what one wrong sample moves (step 0's last label changed, unchunked): the tolerance must stay
    # far below it, or the test would pass a strategy that loses or mislabels a sample
    x, y = batches[0]
    wrong = [(x, torch.cat([y[:-1], (y[-1:] + 1) % 10])), *batches[1:]]
    planted_abs, planted_excess = excess(drift.train(wrong, g, torch.float32, q)[1][-1], ref)
    print(f"{model}: one wrong label: max |diff| {planted_abs:.2e}, max |diff| - rtol |ref| {planted_excess:.2e}")
    return {"image_size": image_size, "global_batch": g, "steps": steps, "chunkings": chunks, "atol": atol,
            "one_wrong_label": {"max_abs_diff": planted_abs, "max_excess": planted_excess}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"measured": f"{started}, at commit {commit}", "machine": drift.machine(), "rtol": RTOL,
           "lr": LR, "momentum": MOMENTUM, "seed": SEED, "dataset": "synthetic", "threads": 1,
           "models": {m: measure(m, s, g, t) for m, s, g, t in CONFIGS}}
    for m, r in out["models"].items():
        print(f"{m}: atol {r['atol']:g}")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    atomic.write_text(a.out, json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
