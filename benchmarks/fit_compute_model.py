"""Fit the calibrated compute model (stanza_core/perf/compute.py) to published single-GPU
training throughput, and print predicted vs published for every figure (fitted and held out).

    .venv/bin/python benchmarks/fit_compute_model.py [--json PATH]

Fitted (on the FIGURES marked fit=True, all V100 fp32): the conv/GEMM efficiency of fp32
CUDA-core math and the algorithmic factor of 3x3 stride-1 convolutions, by least squares of
log(predicted / published) on a grid. The memory efficiency is a prior (0.8 of the datasheet
bandwidth, what STREAM-like kernels reach on HBM), not fitted: two fit figures cannot pin
three parameters. TF32 devices (a100, h100) keep their tensor-core efficiency prior (the
device table's assumption before calibration): their figures are all held out.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

from stanza_core.perf import DeviceProfile, named_profile
from stanza_core.perf.compute import FIGURES
from stanza_core.perf.devices import DEVICE_TABLE, SGD_MOMENTUM_BYTES_PER_PARAM


def throughput(spec, fig, profiles) -> float:
    """Images/s of one single-GPU training step of fig.model at fig.batch on `spec` (modelled)."""
    p = profiles[fig.model]
    dev = DeviceProfile.from_spec(spec, p)
    step = sum(dev.time_s(part, ph, fig.batch) for part in ("conv", "fc") for ph in ("fwd", "bwd"))
    if fig.update:
        step += p.params * dev.update_s_per_param
    return fig.batch / step


def fit(profiles):
    base = DEVICE_TABLE["v100"]
    figs = [f for f in FIGURES if f.fit]
    best = None
    for i in range(40, 96):  # conv/GEMM efficiency 0.40 .. 0.95
        for j in range(100, 301, 5):  # algorithmic factor 1.00 .. 3.00
            spec = dataclasses.replace(base, conv_efficiency=i / 100, fc_efficiency=i / 100, winograd_factor=j / 100)
            loss = sum(math.log(throughput(spec, f, profiles) / f.images_per_s) ** 2 for f in figs)
            if best is None or loss < best[0]:
                best = (loss, i / 100, j / 100)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    profiles = {m: named_profile(m) for m in sorted({f.model for f in FIGURES} | {"alexnet"})}
    loss, eff, wino = fit(profiles)
    print(f"fit on {sum(f.fit for f in FIGURES)} figures: conv/GEMM efficiency {eff:.2f}, "
          f"3x3 algorithmic factor {wino:.2f} (memory efficiency prior {DEVICE_TABLE['v100'].mem_efficiency:.2f})")
    print("table in use (stanza_core/perf/devices.py):")
    for k, s in DEVICE_TABLE.items():
        print(f"  {k:<9} conv peak {s.conv_peak_flops / 1e12:6.1f} TF x {s.conv_efficiency:.2f} x factor "
              f"{s.winograd_factor:.2f} | GEMM {s.fc_peak_flops / 1e12:5.1f} TF x {s.fc_efficiency:.2f} | "
              f"mem {s.mem_bytes_per_s / 1e9:5.0f} GB/s x {s.mem_efficiency:.2f}")
    rows = []
    print(f"{'device':<7}{'model':<10}{'batch':>6}{'published':>11}{'predicted':>11}{'error':>8}  {'used':<9}source")
    for f in FIGURES:
        pred = throughput(DEVICE_TABLE[f.device], f, profiles)
        err = pred / f.images_per_s - 1
        rows.append({**dataclasses.asdict(f), "predicted": pred, "error": err})
        print(f"{f.device:<7}{f.model:<10}{f.batch:>6}{f.images_per_s:>11.0f}{pred:>11.0f}{err * 100:>7.1f}%  "
              f"{'fit' if f.fit else 'held out':<9}{f.source}")
    print("predictions at batch 32 / 64 (images/s, modelled; no published figure unless listed above):")
    for dev in DEVICE_TABLE:
        cells = []
        for m in ("alexnet", "vgg16", "resnet50"):
            for b in (32, 64):
                f = dataclasses.replace(FIGURES[0], device=dev, model=m, batch=b)
                cells.append(f"{m} b{b} {throughput(DEVICE_TABLE[dev], f, profiles):.0f}")
        print(f"  {dev:<10}" + ", ".join(cells))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"fit": {"efficiency": eff, "winograd_factor": wino, "loss": loss}, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
