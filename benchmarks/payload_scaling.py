"""Payload scaling changes nothing but the machine time: scaled against unscaled replayed runs at one D.

    python benchmarks/payload_scaling.py --list          the configurations and their plans (measures the
                                                         engine seconds they need, once: runs cache)
    python benchmarks/payload_scaling.py                 run them (root; the machine alone; ~45 min)
    python benchmarks/payload_scaling.py --configs "alexnet N=4 ddp*" --out /tmp/p.json

Each configuration is planned as the grid plans it with whole messages (runs.plan.replayed_plan
with payload_scale 1: D by the links and the engine seconds at F = 1), then run twice at that D:
unscaled (F = 1) and scaled (runs.plan.scaled_twin: F as the grid's rule chooses it for this
configuration, at most what keeps the scaled link at netem.facts.MIN_LINK_MBIT at that D, or
`--scale`: 1/F of every message on links shaped to 1/F). Same D, same
target step, same emulated bandwidth: if scaling only changes the bytes on the wire, the two
median steps agree. The pairs run interleaved (unscaled first in even pairs, scaled first in odd
ones), each through runs.run.run_config (the grid's primitive: it makes and removes the emulated
cluster, and re-runs a run whose links slipped).

With --grid the scaled run is the one the grid makes (runs.plan.replayed_plan: F and D by its
rules, D lowered by F, or only to the engine term's floor, whose link then runs faster than the
unscaled one's): that is the use the grid relies on, judged on the emulated step (median step / D).

Judged per pair: |median scaled / median unscaled - 1| <= max(2 %, the pair's spread), the spread
being the larger of the two runs' (max - min) / median over their timed steps (measured in the
same pair, never fitted). Also recorded: bytes per step (logical: must be equal), wire bytes, the
link check of each run, and the machine seconds of each.

Output: one JSON (default benchmarks/results/payload_scaling.json), rewritten after every pair;
an existing file is refused unless --overwrite.
"""
from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stanza_core import atomic  # noqa: E402
from stanza_core.runs.runconfig import RunConfig, UNSET_LINK_MBIT  # noqa: E402
from stanza_core.variant import Variant  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "payload_scaling.json"
BOUND = 0.02  # the smallest difference judged: 2 %, or the pair's own spread where larger
STEPS, WARMUP = 5, 2  # 3 timed steps, as the grid's stored runs (runs.store.MIN_TIMED_STEPS)

# (model, N, variant, target Gb/s): N = 4 and 8; ddp, ps colocated, ps with a dedicated server,
# stanza k = 1 and 2; 10 and 100 Gb/s; AlexNet and VGG-16; each affordable unscaled.
CONFIGS = [
    ("alexnet", 4, Variant(strategy="ddp"), 10.0),
    ("alexnet", 4, Variant(strategy="ps"), 100.0),
    ("alexnet", 8, Variant(strategy="stanza", fc_workers=1), 10.0),
    ("alexnet", 4, Variant(strategy="ps", ps_servers=1), 10.0),
    ("alexnet", 4, Variant(strategy="stanza", fc_workers=2), 100.0),
    ("vgg16", 4, Variant(strategy="stanza", fc_workers=1), 10.0),
    ("vgg16", 4, Variant(strategy="ps"), 10.0),
    ("vgg16", 8, Variant(strategy="ddp"), 100.0),
    ("vgg16", 4, Variant(strategy="stanza", fc_workers=2), 100.0),
]


def config_of(model: str, nodes: int, variant: Variant) -> RunConfig:
    """The grid's shape of a replayed run: 224 px, 1000 classes, 32 samples per data worker, V100 row."""
    data = nodes - variant.get("fc_workers", 0)
    return RunConfig.of(variant, model=model, image_size=224, num_classes=1000, nodes=nodes, global_batch=32 * data,
                        steps=STEPS, warmup=WARMUP, link_mbit=UNSET_LINK_MBIT, compute="replay", replay_device="v100")


def plans(cfg: RunConfig, target: float, cache, scale: int | None, grid: bool = False):
    """(unscaled plan, scaled plan at the same D); with `grid`, the scaled plan is the grid's own
    (runs.plan.replayed_plan: F and D by its rules, D lowered by F or to the engine term's floor)."""
    from stanza_core.runs import plan

    from stanza_core.netem.facts import MIN_LINK_MBIT

    whole = plan.replayed_plan(cfg, target, cache, payload_scale=1)
    if grid:
        return whole, plan.replayed_plan(cfg, target, cache)
    f = scale or plan.replayed_plan(cfg, target, cache).link.payload_scale  # the grid's rule, its engine run
    # at the unscaled run's D the scaled link runs at its rate / F: at most F that keeps it at MIN_LINK_MBIT
    f = max(1, min(f, math.floor(whole.link.wire_mbit / MIN_LINK_MBIT)))
    return whole, plan.scaled_twin(whole, f)


def spread(steps: list[float]) -> float:
    med = statistics.median(steps)
    return (max(steps) - min(steps)) / med


def run_one(p) -> dict[str, Any]:
    """One replayed run of plan `p`; its step times in machine seconds, and `emulated_median_s`
    (the median over D: the step the run stands for)."""
    from stanza_core.runs.run import run_config

    t0 = time.monotonic()
    row = run_config(p.config, timeout_s=p.timeout_s())
    timed = row["steps_s"][p.config.warmup:]
    return {"payload_scale": p.link.payload_scale, "link_mbit": p.link.wire_mbit, "steps_s": row["steps_s"],
            "dilation": p.dilation, "median_s": statistics.median(timed),
            "emulated_median_s": statistics.median(timed) / p.dilation, "spread": spread(timed), "bytes_per_step": row["bytes_per_step"],
            "wire_bytes_per_step": sum(r.get("wire_bytes_sent", r["bytes_sent"]) for r in row["ranks"]),
            "link_check": {k: v for k, v in row["link_check"].items() if k != "queues"}, "losses": row.get("losses"),
            "remeasured": "remeasured" in row, "machine_s": time.monotonic() - t0}


def judge(unscaled: dict, scaled: dict) -> dict[str, Any]:
    diff = scaled["emulated_median_s"] / unscaled["emulated_median_s"] - 1
    bound = max(BOUND, unscaled["spread"], scaled["spread"])
    return {"difference": diff, "bound": bound, "holds": abs(diff) <= bound,
            "bytes_equal": unscaled["bytes_per_step"] == scaled["bytes_per_step"]}


def main(argv: list[str] | None = None) -> int:
    from stanza_core.runs.cache import Cache
    from stanza_core.runs.run import netem_unavailable
    from stanza_core.runs.store import host

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the configurations and their plans (their engine runs only)")
    ap.add_argument("--configs", help="comma-separated shell patterns on the labels (default: all)")
    ap.add_argument("--scale", type=int, help="force this payload scale F (default: the grid's rule)")
    ap.add_argument("--grid", action="store_true",
                    help="scaled run as the grid plans it (F and D by runs.plan.replayed_plan, D lowered), "
                         "judged on the emulated step (median / D)")
    ap.add_argument("--cache", default=str(ROOT / "reproductions" / "out" / "bench-cache"),
                    help="runs cache for the engine seconds (not for the runs: each is measured afresh)")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--overwrite", action="store_true")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if not a.list and out.exists() and not a.overwrite:
        print(f"error: {out} exists; pass --overwrite to replace it", file=sys.stderr)
        return 2
    chosen = []
    for model, nodes, variant, target in CONFIGS:
        label = f"{model} N={nodes} {variant.label} @ {target:g} Gb/s"
        if a.configs and not any(fnmatch.fnmatchcase(label, p.strip()) for p in a.configs.split(",")):
            continue
        chosen.append((label, config_of(model, nodes, variant), target))
    if not chosen:
        print(f"error: --configs {a.configs!r} matches none of the {len(CONFIGS)} configurations", file=sys.stderr)
        return 2
    if not a.list and (why := netem_unavailable()):
        print(f"error: {why}", file=sys.stderr)
        return 2
    cache = Cache(a.cache)
    doc = {"command": "python benchmarks/payload_scaling.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "host": host(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "bound": BOUND,
           "rule": "|median scaled / median unscaled - 1| <= max(2 %, the larger timed-step spread of the pair)"
                   " (medians over D: the emulated step)",
           "mode": "grid: the grid's F and D against F = 1" if a.grid else "same D",
           "steps": STEPS, "warmup": WARMUP, "pairs": []}
    for i, (label, cfg, target) in enumerate(chosen):
        whole, scaled = plans(cfg, target, cache, a.scale, a.grid)
        if a.grid and scaled.link.payload_scale == 1:
            print(f"{label}: the grid runs it unscaled (F = 1): no pair", flush=True)
            continue
        head = (f"{label}: D = {whole.dilation:g}{f' / {scaled.dilation:g}' if a.grid else ''}, F = {scaled.link.payload_scale}, links {whole.link.wire_mbit:.1f} / "
                f"{scaled.link.wire_mbit:.2f} Mbit/s, modelled step {whole.target_step_s * 1e3:.1f} ms")
        print(head, flush=True)
        if a.list:
            continue
        order = [("unscaled", whole), ("scaled", scaled)]
        runs = dict((name, run_one(p)) for name, p in (order if i % 2 == 0 else order[::-1]))
        rec = {"label": label, "target_gbps": target, "dilation": whole.dilation, "target_step_s": whole.target_step_s,
               "engine_s": whole.engine_s, "first": order[i % 2][0], **runs, **judge(runs["unscaled"], runs["scaled"])}
        doc["pairs"].append(rec)
        if a.grid:
            print(f"  emulated step: unscaled {runs['unscaled']['emulated_median_s'] * 1e3:.1f} ms, scaled "
                  f"{runs['scaled']['emulated_median_s'] * 1e3:.1f} ms", flush=True)
        print(f"  unscaled {runs['unscaled']['median_s']:.3f} s (spread {runs['unscaled']['spread']:.1%}, "
              f"{runs['unscaled']['machine_s']:.0f} s), scaled {runs['scaled']['median_s']:.3f} s (spread "
              f"{runs['scaled']['spread']:.1%}, {runs['scaled']['machine_s']:.0f} s): {rec['difference']:+.2%} "
              f"within {rec['bound']:.1%}: {'holds' if rec['holds'] else 'FAILS'}", flush=True)
        doc["held"] = sum(r["holds"] for r in doc["pairs"])
        atomic.write_text(out, json.dumps(doc, indent=1) + "\n")
    if not a.list:
        print(f"{doc['held']} of {len(doc['pairs'])} pairs within their bound; written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
