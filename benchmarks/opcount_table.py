"""Operator calls per step: the engine against its plain counterpart, per model and per role.

    python benchmarks/opcount_table.py [--out FILE.json]

Counted, not timed (exact and machine-independent; on a GPU each call is a kernel launch the host
issues, so the ratio is the engine's overhead on a launch-bound step). Rows:
  local, ddp   in this process (stanza_core.opcount.engine_vs_plain): the plain loop, and torch's
               DDP at world size 1 at the same bucket size with no comm hook;
  roles        3-rank gloo jobs (`stanza_core.opcount`, all in one torchrun launch): every rank's step less the
               network's own calls, against the same model pieces run bare (opcount.bare_pieces).
The same configurations as tests/unit/test_opcount.py and tests/dist/test_opcount_roles.py, which
bound every ratio at 1.05; this prints the table docs/benchmarks.md carries.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "dist"))

from stanza_core import atomic  # noqa: E402
from stanza_core.opcount import engine_vs_plain, one_rank_group  # noqa: E402

LOCAL_CASES = [("alexnet", 64, 4), ("vgg16", 32, 4), ("resnet50", 32, 2), ("vgg11_bn", 32, 4)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rows = []
    print("| model | strategy / role | engine calls | plain calls | ratio | host reads |")
    print("|---|---|---|---|---|---|")
    for model, size, batch in LOCAL_CASES:
        for strategy in ("local", "ddp"):
            if strategy == "ddp":
                with one_rank_group():
                    r = engine_vs_plain(model, strategy, image_size=size, batch=batch)
            else:
                r = engine_vs_plain(model, strategy, image_size=size, batch=batch)
            rows.append(r)
            ref = "plain DDP" if strategy == "ddp" else "plain loop"
            print(f"| {model} {size} px b{batch} | {strategy} (vs {ref}) | {r['engine']} | {r['plain']} | "
                  f"{r['ratio']:.3f} | {len(r['host_reads'])} |", flush=True)
    from test_opcount_roles import JOBS, all_role_rows  # noqa: E402 (the test's own configurations)

    with tempfile.TemporaryDirectory() as tmp:
        per_job = all_role_rows(Path(tmp))
    for (model, flags), job_rows in zip(JOBS, per_job):
        for r in sorted(job_rows, key=lambda r: r["rank"]):
            rows.append({**r, "model": model, "flags": flags})
            print(f"| {model} | {' '.join(flags[1:])}: rank {r['rank']} {r['role']} | {r['engine']} "
                  f"(+{r['network']} network) | {r['bare']} (bare pieces) | {r['ratio']:.3f} | "
                  f"{len(r['host_reads'])} |", flush=True)
    if args.out:
        atomic.write_text(Path(args.out), json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
