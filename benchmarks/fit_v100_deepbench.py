"""Fit the V100 row of compute model v3 (stanza_core/perf/rows.py) to DeepBench's V100 FP32
kernels; check it on the half of them the fit never sees.

    .venv/bin/python benchmarks/fit_v100_deepbench.py            # fit, print the tables
    .venv/bin/python benchmarks/fit_v100_deepbench.py --write    # also write the JSON and the docs tables
    .venv/bin/python benchmarks/fit_v100_deepbench.py --check    # refit; exit 1 if rows.V100_V3 drifted

Data: stanza_core/perf/records/deepbench-v100 (SOURCE.md there): 160 cuBLAS GEMMs and 62 cuDNN
convolutions (forward, data gradient, weight gradient; 284 kernel times), V100 FP32, measured
by DeepBench's authors. Kernel times: no framework, algorithms chosen by search.
Split (stanza_core/perf/deepbench.split, seed SPLIT_SEED, fixed before any fit): within each
stratum (GEMM or convolution x application), the shapes (a GEMM whatever its transposes, a
convolution layer whatever its batch) in a seeded random order, every second one held out. The
fit sees only the train half; the held-out half is predicted once, by the fitted row. The JSON
records both halves' ids.
Parameters (rows.V100_V3, kernel model 3 of stanza_core/perf/kernels.py): GEMM efficiency, tile
exponent, kernel floor, conv efficiency, Winograd factor, conv_half_k, data-gradient ratio and its
stride factor, weight-gradient ratio: least squares of log(predicted / measured) over every train
kernel (scipy.optimize.least_squares, log parameters, bounds, seeded starts from INITIAL: round
values set by hand). Fixed: the datasheet (peaks, bandwidth, 80 SMs) and mem_efficiency (the
hand-set prior of devices.FITTED). Checks beside it: the FC heads of AlexNet and VGG-16 at 32
samples against DeepBench's nearest GEMMs (deepbench.head), the v2 row on the same kernels, and
the published V100 training steps (devices.FIGURES), which this fit never saw, through the row
as the performance model uses it (kernels + the step overheads of rows.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_compute_model import CHECK_RTOL, SEEDS, pct  # noqa: E402
from stanza_core import atomic  # noqa: E402
from stanza_core.perf import DEVICE_TABLE, DeviceProfile, named_profile  # noqa: E402
from stanza_core.perf import deepbench as DB  # noqa: E402
from stanza_core.perf.compute import FIGURES  # noqa: E402
from stanza_core.perf.devices import v100_v3_spec  # noqa: E402
from stanza_core.perf.rows import V100_V3  # noqa: E402

JSON_OUT = ROOT / "benchmarks" / "results" / "deepbench_v100_fit.json"
DOCS = ROOT / "docs" / "performance-model.md"
INITIAL = {"gemm_efficiency": 0.5, "tile_exponent": 1.0, "kernel_s": 5e-6, "conv_efficiency": 0.5,
           "winograd_factor": 2.25, "conv_half_k": 64.0, "conv_dgrad_ratio": 1.0, "conv_dgrad_stride_ratio": 1.0,
           "conv_wgrad_ratio": 1.0}  # set by hand, from no data (the same round values as devices.INITIAL)
BOUNDS = {"gemm_efficiency": (0.02, 1.0), "tile_exponent": (0.01, 3.0), "kernel_s": (3e-7, 5e-5),
          "conv_efficiency": (0.02, 1.0), "winograd_factor": (1.0, 4.0), "conv_half_k": (1.0, 2e4),
          "conv_dgrad_ratio": (0.2, 5.0), "conv_dgrad_stride_ratio": (0.2, 5.0), "conv_wgrad_ratio": (0.2, 5.0)}
FREE = list(INITIAL)


def select(rows, ids) -> dict:
    """The rows of `rows` whose id is in `ids`, every pass."""
    ids = set(ids)
    out = {}
    for p, d in rows.items():
        keep = [i for i, x in enumerate(d["id"]) if x in ids]
        out[p] = {k: ([v[i] for i in keep] if isinstance(v, list) else v[keep]) for k, v in d.items()}
    return out


def fit(train) -> dict[str, float]:
    """Least squares of log(predicted / measured) over every kernel of `train`, from INITIAL."""
    lo, hi = np.log([BOUNDS[k][0] for k in FREE]), np.log([BOUNDS[k][1] for k in FREE])
    x0 = np.clip(np.log([INITIAL[k] for k in FREE]), lo + 1e-6, hi - 1e-6)
    meas = np.concatenate([train[p]["seconds"] for p in DB.PASSES])

    def residuals(x):
        pred = DB.predict(v100_v3_spec(dict(zip(FREE, np.exp(x)))), train)
        return np.log(np.concatenate([pred[p] for p in DB.PASSES]) / meas)

    best = None
    for seed in range(SEEDS):
        x = np.clip(x0 + np.random.default_rng(seed).normal(0, 0.7 if seed else 0.0, len(x0)), lo + 1e-6, hi - 1e-6)
        r = least_squares(residuals, x, bounds=(lo, hi))
        if best is None or r.cost < best.cost:
            best = r
    return {k: float(f"{math.exp(v):.6g}") for k, v in zip(FREE, best.x)}


def published(spec) -> list[dict]:
    """The V100 training-step figures of compute.FIGURES through `spec` as the model uses it (never fitted here)."""
    out = []
    for f in FIGURES:
        if f.device != "v100":
            continue
        prof = dataclasses.replace(named_profile(f.model), batch_size=f.batch)
        dev = DeviceProfile.from_spec(spec, prof)
        step = dev.step_compute_s(f.batch) + (prof.params * dev.update_s_per_param if f.update else 0.0)
        out.append({"model": f.model, "batch": f.batch, "published": f.images_per_s, "predicted": f.batch / step,
                    "error": f.batch / step / f.images_per_s - 1, "source": f.source})
    return out


def run(checks: bool = True) -> dict:
    rows = DB.load()
    sp = DB.split(rows)
    fitted = fit(select(rows, sp["train"]))
    res = {"split": {"seed": DB.SPLIT_SEED, "rule": "per stratum (kind x application), shapes in a seeded random "
                     "order, every second held out (stanza_core.perf.deepbench.split)", **sp},
           "fitted": fitted, "initial": INITIAL, "bounds": BOUNDS, "parameters": len(FREE),
           "train_points": sum(int(np.isin(rows[p]["id"], sp["train"]).sum()) for p in DB.PASSES)}
    if not checks:
        return res
    spec, old = v100_v3_spec(fitted), DEVICE_TABLE["v100-v2"]
    res["errors"] = {half: DB.errors(spec, rows, sp[half]) for half in ("train", "held_out")}
    res["errors"]["all"] = DB.errors(spec, rows)
    res["v2_row_errors"] = {"held_out": DB.errors(old, rows, sp["held_out"]), "all": DB.errors(old, rows)}
    res["heads"] = {m: {"v3": DB.head(spec, m, rows), "v2": DB.head(old, m, rows)} for m in DB.HEADS}
    for h in res["heads"].values():
        h["v3"]["nearest_in"] = ["train" if i in sp["train"] else "held_out" for i in h["v3"]["nearest"]]
    res["published_steps"] = {"v3": published(spec), "v2": published(old)}
    return res


def tables(res: dict) -> str:
    f = res["fitted"]
    out = [f"Produced by `{res['command']}` (modelled against DeepBench's measured V100 kernels). **{res['parameters']} "
           f"parameters** fitted to the {res['train_points']} kernel times of the train half; the held-out half "
           f"({len(res['split']['held_out'])} of the {len(res['split']['held_out']) + len(res['split']['train'])} "
           f"DeepBench rows, each with its passes) predicted once. Split: seed {res['split']['seed']}, "
           f"{res['split']['rule']}.", "",
           "Fitted (rows.V100_V3): " + ", ".join(f"{k} {v:.4g}" for k, v in f.items()), "",
           "| pass | train n | train median | train worst | held-out n | held-out median | held-out worst | "
           "v2 row, held-out median | goal |", "|---|---|---|---|---|---|---|---|---|"]
    goals = {"gemm": "<= 15 %", "fwd": "<= 20 %", "dgrad": "<= 20 %", "wgrad": "<= 20 %"}
    for p in DB.PASSES:
        t, h, o = res["errors"]["train"][p], res["errors"]["held_out"][p], res["v2_row_errors"]["held_out"][p]
        out.append(f"| {p} | {t['n']} | {pct(t['median_abs_error'])} | {pct(t['worst_abs_error'])} | {h['n']} | "
                   f"{pct(h['median_abs_error'])} | {pct(h['worst_abs_error'])} | {pct(o['median_abs_error'])} | {goals[p]} |")
    out += ["", "FC heads at 32 samples, forward + backward GEMMs (each + its kernel floor; DeepBench: each GEMM's "
            "nearest DeepBench shape scaled by FLOPs, deepbench.nearest; goal within 25 %):", "",
            "| model | DeepBench-derived ms | v3 row ms | error | v2 row ms | GEMMs at a DeepBench shape exactly | nearest rows in |",
            "|---|---|---|---|---|---|---|"]
    for m, h in res["heads"].items():
        v3, v2 = h["v3"], h["v2"]
        where = ", ".join(f"{v3['nearest_in'].count(x)} {x}" for x in ("train", "held_out"))
        out.append(f"| {m} | {v3['deepbench_s'] * 1e3:.3f} | {v3['predicted_s'] * 1e3:.3f} | {v3['error'] * 100:+.1f} % | "
                   f"{v2['predicted_s'] * 1e3:.3f} | {v3['same_shape']} of {len(v3['shapes'])} | {where} |")
    out += ["", "Published V100 training steps (images/s; never seen by this fit; the v3 row = these kernels + the "
            "step overheads of rows.py; the v2 row fitted the first):", "",
            "| model | batch | published | v3 row | error | v2 row | error | source |", "|---|---|---|---|---|---|---|---|"]
    for a, b in zip(res["published_steps"]["v3"], res["published_steps"]["v2"]):
        out.append(f"| {a['model']} | {a['batch']} | {a['published']:.0f} | {a['predicted']:.0f} | {a['error'] * 100:+.1f} % | "
                   f"{b['predicted']:.0f} | {b['error'] * 100:+.1f} % | {a['source']} |")
    return "\n".join(out) + "\n"


BEGIN, END = "<!-- deepbench-v100-fit:begin -->", "<!-- deepbench-v100-fit:end -->"


def write_docs(res: dict) -> None:
    """The tables of `res` into DOCS between BEGIN and END."""
    doc = DOCS.read_text()
    if BEGIN not in doc:
        raise SystemExit(f"{DOCS} has no {BEGIN} ... {END} block")
    atomic.write_text(DOCS, re.sub(f"{re.escape(BEGIN)}.*?{re.escape(END)}", lambda _: f"{BEGIN}\n{tables(res)}{END}",
                                   doc, flags=re.S))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {JSON_OUT.relative_to(ROOT)} and the tables in {DOCS.relative_to(ROOT)}")
    ap.add_argument("--check", action="store_true", help="refit; exit 1 if rows.V100_V3 drifted by more than 2 %%")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    res = run(checks=not args.check or args.write)
    res["command"] = " ".join(["python benchmarks/fit_v100_deepbench.py", *argv])
    print("fitted:", ", ".join(f"{k} {v:.4g}" for k, v in res["fitted"].items()))
    if "errors" in res:
        print(tables(res))
    if args.write:
        atomic.write_text(JSON_OUT, json.dumps(res, indent=1) + "\n")
        write_docs(res)
        print(f"wrote {JSON_OUT.relative_to(ROOT)} and the tables in {DOCS.relative_to(ROOT)}")
    if args.check:
        bad = [f"{k}: committed {V100_V3[k]:.4g}, refit {v:.4g}" for k, v in res["fitted"].items()
               if not math.isclose(V100_V3.get(k, float("nan")), v, rel_tol=CHECK_RTOL)]
        for line in bad:
            print("drift:", line, file=sys.stderr)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
