"""The loss difference from single-process SGD that float summation order alone gives, beside
the one an inexact change gives: what the convergence claims' bounds are set from.

    python benchmarks/convergence_spread.py --out benchmarks/results/convergence_spread_quick.json

Runs notebook 06's quick configuration (tiny_cnn on digits, 3 nodes, k = 1, 60 steps of 24
samples, lr 0.05, momentum 0.5; gloo over loopback, no root needed) for local, the exact
strategies (ps, ddp, stanza, stanza with a hybrid FC worker and 2 micro-batches) and two
inexact variants (bf16 boundary, fp16 CONV gradients), and writes each one's largest |loss -
local loss| over the steps, the first step above experiments.convergence.GAP and every loss.
reproductions/convergence.yaml states the rule that turns these into bounds.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from stanza_core.experiments import convergence

QUICK = dict(model="tiny_cnn", nodes=3, fc_workers=1, global_batch=24, steps=60, eval_every=0, lr=0.05, momentum=0.5)
STRATEGIES = ["local", "ps", "ddp", "stanza", "stanza_hybrid_m2", "stanza_bf16", "stanza_fp16_grads"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        p = convergence.plan(**QUICK, strategies=a.strategies)
    except ValueError as e:
        ap.error(str(e))
    r = convergence.results(p, convergence.train_all(p))
    out = {"params": QUICK, "strategies": {k: {"max_loss_diff_vs_local": v["max_loss_diff_vs_local"],
                                               "first_step_loss_gap_above": v["first_step_loss_gap_above"],
                                               "losses": [s["loss"] for s in v["steps"]]}
                                           for k, v in r["strategies"].items()}}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(out, fh, indent=1)
    for k, v in out["strategies"].items():
        print(f"{k:18s} max |loss - local| {v['max_loss_diff_vs_local']:.1e}, "
              f"first step above {convergence.GAP:g}: {v['first_step_loss_gap_above']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
