"""The loss difference from single-process SGD that float summation order alone gives, beside
the one an inexact change gives: what the convergence claims' bounds are set from.

    python benchmarks/convergence_spread.py --out benchmarks/results/convergence_spread_quick_window.json

Notebook 06's quick configuration (tiny_cnn on digits, 3 nodes, k = 1, 24 samples per step, lr
0.05, momentum 0.5; gloo over loopback, no root needed), in two parts:

1. float-order references, in one process (benchmarks/float_order_drift.py's loop): the same
   batches summed in 2, 3, 4, 6 and 24 chunks against unchunked, in float32 and in float64 (the
   control: float64 agrees within ~1e-15, so the float32 spread is rounding alone), with the
   first step at which a max-pool window's argmax differs between two float32 runs (a near-tie
   flipped by an ulp: from there training amplifies the difference by luck);
2. the engine's runs: local, the exact strategies (ps, ddp, stanza, stanza with a hybrid FC
   worker and 2 micro-batches) and two inexact variants (bf16 boundary, fp16 CONV gradients),
   each one's largest |loss - local loss| over all steps and over the exactness window.

The exactness window is steps 0..s, s the first step with a flipped max-pool window in part 1
(step s's loss is computed before that step's gradient, so no flip has reached it). The bounds
come from part 1 alone, never from the runs they judge: the exactness bound is
experiments.convergence.exact_bound of the float32 runs' largest difference in the window (10 x,
rounded up to one digit), the whole-run envelope is envelope_bound of their largest difference
over all steps (rounded up, no factor). Part 2's exact runs are recorded apart (judged_spreads).
reproductions/convergence.yaml carries the window and bounds; tests/unit/test_convergence_bounds.py
checks them against the file written here.
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
import float_order_drift as drift  # noqa: E402 (a sibling script: its training loop and pool check)

from stanza_core import atomic  # noqa: E402
from stanza_core import registry  # noqa: E402
from stanza_core.data import batch_indices, open_dataset  # noqa: E402
from stanza_core.experiments import convergence  # noqa: E402

QUICK = dict(model="tiny_cnn", nodes=3, fc_workers=1, global_batch=24, steps=60, eval_every=0, lr=0.05, momentum=0.5)
# every strategy, and stanza's variants but PowerSGD (its error is not float order's)
STRATEGIES = [*registry.names(), "stanza_hybrid_m2", "stanza_bf16", "stanza_fp16_grads"]
EXACT = (*registry.compared(), "stanza_hybrid_m2")  # equal to local up to float order


def float_order(steps: int) -> dict:
    """Part 1: per chunking and dtype, |loss - unchunked loss| per step; the first step with a
    flipped max-pool window between float32 runs (None: none in `steps`)."""
    torch.set_num_threads(1)
    q = dict(drift.QUICK, steps=steps)
    ds = open_dataset("digits", 32, 10, q["seed"])
    G = q["global_batch"]
    batches = [ds.get(batch_indices(ds, t, G, q["seed"], slice(0, G))) for t in range(steps)]
    runs = {(c, d): drift.train(batches, c, d, q) for d in (torch.float32, torch.float64) for c in drift.CHUNKS}
    out, flips = {}, []
    pairs = [(f"fp32 {G // c}x{c}", (c, torch.float32), (G, torch.float32)) for c in drift.CHUNKS[1:]]
    pairs += [(f"fp64 {G // c}x{c}", (c, torch.float64), (G, torch.float64)) for c in drift.CHUNKS[1:]]
    pairs += [("fp32 against fp64, unchunked", (G, torch.float32), (G, torch.float64))]
    for name, a, b in pairs:
        r = drift.compare(runs[a], runs[b])
        out[name] = {"loss_diff": r["loss_diff"], "first_step_params_parted": r["first_step_params_parted"]}
        if name.startswith("fp32 ") and r["first_step_params_parted"] is not None:  # where a float32 pair parts
            flip = next((u for u in range(1, r["first_step_params_parted"] + 1)
                         if drift.pool_switches(batches, runs[a][1][u - 1], runs[b][1][u - 1], u, q)), None)
            out[name]["first_pool_switch"] = flip
            flips += [flip] if flip is not None else []
    return {"runs": out, "first_pool_switch": min(flips, default=None)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--steps", type=int, default=QUICK["steps"])
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    q = dict(QUICK, steps=a.steps)
    try:
        p = convergence.plan(**q, strategies=a.strategies)
    except ValueError as e:
        ap.error(str(e))
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    ref = float_order(a.steps)
    flip = ref["first_pool_switch"]
    window = a.steps if flip is None else flip + 1
    runs = convergence.train_all(p)
    local = [s["loss"] for s in runs["local"]["steps"]]
    strategies = {k: {"max_loss_diff_vs_local": convergence.max_loss_diff([s["loss"] for s in v["steps"]], local),
                      "max_loss_diff_vs_local_window": convergence.max_loss_diff(
                          [s["loss"] for s in v["steps"]], local, window),
                      "losses": [s["loss"] for s in v["steps"]]} for k, v in runs.items()}
    spreads = {k: max(v["loss_diff"][:window]) for k, v in ref["runs"].items() if k.startswith("fp32 ")}
    whole = {k: max(v["loss_diff"]) for k, v in ref["runs"].items() if k.startswith("fp32 ")}
    judged = {k: strategies[k]["max_loss_diff_vs_local_window"] for k in EXACT if k in strategies}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"params": q, "measured": f"{started}, at commit {commit} (uncommitted changes not recorded)",
           "machine": drift.machine(),
           "window_steps": window, "exact_spreads": spreads, "judged_spreads": judged, "safety": convergence.SAFETY,
           "bound": convergence.exact_bound(spreads), "envelope_spreads": whole,
           "envelope_bound": convergence.envelope_bound(whole), "float_order": ref, "strategies": strategies}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    atomic.write_text(a.out, json.dumps(out, indent=1))
    print(f"first flipped max-pool window at step {flip}: window = steps 0..{window - 1}")
    for k, v in spreads.items():
        print(f"exact {k:30s} max |loss diff| in the window {v:.1e}")
    for k, v in strategies.items():
        print(f"{k:18s} max |loss - local|: whole run {v['max_loss_diff_vs_local']:.1e}, "
              f"window {v['max_loss_diff_vs_local_window']:.1e}")
    print(f"bound = {convergence.SAFETY} x {max(spreads.values()):.2e}, rounded up: {out['bound']:g}; "
          f"envelope = {max(whole.values()):.2e}, rounded up: {out['envelope_bound']:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
