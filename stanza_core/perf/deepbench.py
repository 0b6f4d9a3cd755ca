"""DeepBench's V100 FP32 kernels (records/deepbench-v100) against a device row, pass by pass.

    rows = load()                       every GEMM and convolution pass: shape, measured seconds, id
    held = held_out_ids()               the half the V100 row's fit never sees (SPLIT_SEED, below)
    pred = predict(spec, rows)          the row's seconds for each, through kernels.py as compute.py uses it
    errors(spec)                        median / worst abs. error per pass, per half
    head(spec, "alexnet")               an FC head's GEMMs at 32 samples: the row against DeepBench's nearest shapes

A GEMM is priced as a Linear layer's is (kernels.gemm_seconds at the row's GEMM rate, plus one
kernel floor); a convolution pass as a convolution's is (kernels.conv_pass_seconds for a kernel
model 3 row, else compute model v2.2's rule, plus one kernel floor).
"""
from __future__ import annotations

import collections
import csv
import math
from pathlib import Path

import numpy as np

from . import kernels as K

DATA = Path(__file__).parent / "records" / "deepbench-v100"
PASSES = ("gemm", "fwd", "dgrad", "wgrad")
SPLIT_SEED = 43  # chosen before the fit; the split is written beside it (benchmarks/results/deepbench_v100_fit.json)
HEADS = {"alexnet": (9216, 4096, 4096, 1000), "vgg16": (25088, 4096, 4096, 1000)}  # torchvision's classifier widths
HEAD_BATCH = 32


def _read(name: str) -> list[dict]:
    with open(DATA / name, newline="") as f:
        return list(csv.DictReader(f))


def load() -> dict[str, dict[str, np.ndarray]]:
    """{pass: {"id", "group", "stratum", "m", "n", "k", "flops", "winograd", "strided", "seconds"}}: every
    GEMM ("gemm") and convolution pass ("fwd", "dgrad", "wgrad"; no data gradient for an input
    layer) of the data; (M, N, K) are the pass's GEMM shape (kernels.conv_pass_shapes). "group":
    one shape whatever its transposes (GEMMs) or batch (convolutions), so a split keeps them
    together; "stratum": kind and application (both tuples of the CSV's strings, in lists)."""
    out = {p: collections.defaultdict(list) for p in PASSES}
    for r in _read("v100_fp32_gemm.csv"):
        m, n, k = float(r["M"]), float(r["N"]), float(r["K"])
        for key, v in (("id", f"gemm:{r['row']}"), ("group", ("gemm", r["app"], (r["M"], r["N"], r["K"]))),
                       ("stratum", ("gemm", r["app"])), ("m", m), ("n", n), ("k", k), ("flops", 2 * m * n * k),
                       ("winograd", False), ("strided", False), ("seconds", float(r["time_ms"]) * 1e-3)):
            out["gemm"][key].append(v)
    for r in _read("v100_fp32_conv.csv"):
        c_in, c_out, b = int(r["C"]), int(r["K"]), int(r["N"])
        area, stride = int(r["R_fh"]) * int(r["S_fw"]), int(r["stride_w"]) * int(r["stride_h"])
        pixels = b * int(r["P"]) * int(r["Q"])
        shapes = K.conv_pass_shapes(c_in, c_out, area, stride, pixels)
        wino = stride == 1 and area in (9, 25)
        layer = tuple(r[c] for c in ("W", "H", "C", "K", "S_fw", "R_fh", "stride_w", "pad_w"))
        for p, col in (("fwd", "fwd_ms"), ("dgrad", "bwd_data_ms"), ("wgrad", "bwd_weights_ms")):
            if r[col].startswith("N/A"):
                continue
            for key, v in (("id", f"conv:{r['row']}"), ("group", ("conv", r["app"], layer)), ("stratum", ("conv", r["app"])),
                           ("m", shapes[p][0]), ("n", shapes[p][1]), ("k", shapes[p][2]),
                           ("flops", 2.0 * pixels * c_out * c_in * area), ("winograd", wino), ("strided", stride > 1),
                           ("area", area), ("c_in", c_in), ("seconds", float(r[col]) * 1e-3)):
                out[p][key].append(v)
    return {p: {k: v if k in ("group", "stratum") else np.array(v) for k, v in d.items()} for p, d in out.items()}


def split(rows=None, seed: int = SPLIT_SEED) -> dict[str, list[str]]:
    """{"train": ids, "held_out": ids}: within each stratum, its groups in a seeded random order,
    every second one held out (a shape's transposes or batches all on one side)."""
    rows = load() if rows is None else rows
    groups, strata = collections.defaultdict(set), collections.defaultdict(set)
    for d in rows.values():
        for i, g, s in zip(d["id"], d["group"], d["stratum"]):
            groups[g].add(str(i))
            strata[s].add(g)
    rng = np.random.default_rng(seed)
    held = set()
    for s in sorted(strata):
        order = sorted(strata[s])
        rng.shuffle(order)
        for g in order[1::2]:
            held |= groups[g]
    every = sorted({str(i) for d in rows.values() for i in d["id"]})
    return {"train": [i for i in every if i not in held], "held_out": sorted(held)}


def predict(spec, rows=None) -> dict[str, np.ndarray]:
    """{pass: seconds} of every row of `rows` (default: load()) on DeviceSpec `spec`."""
    rows = load() if rows is None else rows
    g = rows["gemm"]
    out = {"gemm": spec.kernel_s + K.gemm_seconds(g["flops"], g["m"], g["n"], g["k"], spec.fc_peak_flops * spec.fc_efficiency,
                                                  spec.sms, spec.tile_exponent, spec.mem_bytes_per_s * spec.mem_efficiency,
                                                  spec.kernel_model >= 3)}
    for p in ("fwd", "dgrad", "wgrad"):
        d = rows[p]
        if spec.kernel_model >= 3:
            wino = (d["winograd"], d["strided"]) if p == "dgrad" else d["winograd"]
            t = K.conv_pass_seconds(p, d["flops"], d["m"], d["n"], d["k"], wino, spec)
        else:  # compute model v2.2: FLOPs at the forward's rate (3x3 stride 1 Winograd), backward at conv_bwd_ratio
            wino = (d["area"] == 9) & ~d["strided"]
            t = d["flops"] / K.conv_rate(d["c_in"] * d["area"], wino, spec) * (1.0 if p == "fwd" else spec.conv_bwd_ratio)
        out[p] = spec.kernel_s + t
    return out


def errors(spec, rows=None, ids=None) -> dict[str, dict]:
    """Per pass: median and worst abs. error of `spec` against the measured seconds, over the rows
    whose id is in `ids` (default: every row); n: how many."""
    rows = load() if rows is None else rows
    pred, out = predict(spec, rows), {}
    for p in PASSES:
        sel = np.ones(len(rows[p]["id"]), bool) if ids is None else np.isin(rows[p]["id"], list(ids))
        e = np.abs(pred[p][sel] / rows[p]["seconds"][sel] - 1)
        out[p] = {"n": int(sel.sum()), "median_abs_error": float(np.median(e)), "worst_abs_error": float(e.max()),
                  "median_ratio": float(np.median(pred[p][sel] / rows[p]["seconds"][sel]))}
    return out


def head_gemms(model: str, batch: int = HEAD_BATCH) -> list[tuple[float, float, float]]:
    """(M, N, K) of every GEMM of `model`'s FC head (HEADS) on `batch` samples, DeepBench's way
    (N = batch for the forward and data gradient): per layer in -> out, forward out x b x in,
    data gradient in x b x out, weight gradient out x in x b."""
    w = HEADS[model]
    return [s for i, o in zip(w, w[1:]) for s in ((o, batch, i), (i, batch, o), (o, i, batch))]


def nearest(m: float, n: float, k: float, rows=None) -> tuple[str, float, float]:
    """(id, seconds, distance) DeepBench implies for a GEMM M x N x K: its nearest GEMM (sum of |log| ratios of
    M, N and K, M and N also swapped: a transposed product) scaled by the ratio of FLOPs."""
    g = (load() if rows is None else rows)["gemm"]
    d = np.minimum(np.abs(np.log(g["m"] / m)) + np.abs(np.log(g["n"] / n)), np.abs(np.log(g["m"] / n)) + np.abs(np.log(g["n"] / m)))
    i = int(np.argmin(d + np.abs(np.log(g["k"] / k))))
    return str(g["id"][i]), float(g["seconds"][i] * (m * n * k) / (g["m"][i] * g["n"][i] * g["k"][i])), float(d[i] + abs(math.log(g["k"][i] / k)))


def head(spec, model: str, rows=None) -> dict:
    """`model`'s FC head GEMMs at HEAD_BATCH samples (forward + backward): the row's seconds (each
    GEMM + its kernel floor, as a Linear layer's) against DeepBench's nearest shapes (`nearest`)."""
    rows = load() if rows is None else rows
    shapes = head_gemms(model)
    a = np.array(shapes)
    model_s = spec.kernel_s * len(shapes) + K.gemm_seconds(2 * a[:, 0] * a[:, 1] * a[:, 2], a[:, 0], a[:, 1], a[:, 2],
                                                          spec.fc_peak_flops * spec.fc_efficiency, spec.sms, spec.tile_exponent,
                                                          spec.mem_bytes_per_s * spec.mem_efficiency, spec.kernel_model >= 3).sum()
    near = [nearest(*s, rows=rows) for s in shapes]
    measured = sum(s for _, s, _ in near)
    return {"model": model, "batch": HEAD_BATCH, "shapes": [list(map(int, s)) for s in shapes],
            "nearest": [i for i, _, _ in near], "same_shape": sum(d < 1e-9 for _, _, d in near),
            "deepbench_s": measured, "predicted_s": float(model_s), "error": float(model_s) / measured - 1}
