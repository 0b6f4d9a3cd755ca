"""How far float32 summation order alone moves single-process SGD from itself: the convergence
experiment's quick configuration trained in ONE process, the gradient of each global batch summed
over different contiguous chunkings (what the data workers and micro-batches of an exact strategy
do), against the unchunked run; the same in float64; and, for a run whose parameters part
beyond 1e-6, the first step at which a MaxPool2d window's argmax differs between the two runs.

    python benchmarks/float_order_drift.py --out benchmarks/results/float_order_drift_quick.json

No process group, no communication: a difference here is float order plus training dynamics
only. tiny_cnn's gradient is not continuous in its parameters (max pooling: a window whose two
largest values are within an ulp routes its gradient to the other position when an ulp moves),
so a 1e-7 parameter difference can change one step's CONV gradient by ~1e-4 and training
amplifies that from there. Which chunking crosses such a tie first, if any, is luck.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys

import torch
import torch.nn.functional as F

from stanza_core import atomic
from stanza_core.data import batch_indices, open_dataset
from stanza_core.models import get_model, sample_keys

QUICK = dict(model="tiny_cnn", global_batch=24, steps=60, lr=0.05, momentum=0.5, seed=0)
# chunk sizes of G = 24: 8 = ddp/ps/stanza on 3 data workers (2 CONV + 1 hybrid FC worker);
# 4 = those workers with 2 micro-batches each (stanza_hybrid_m2's arithmetic, CONV side)
CHUNKS = [24, 12, 8, 6, 4, 1]
PARTED = 1e-6  # relative parameter difference taken as "parted"


def machine() -> dict:
    """What float32 summation order on the CPU depends on beyond the code: the processor (MKL's and
    oneDNN's kernels block their sums by its ISA and cache sizes), the ISA torch dispatches to, and
    torch's version. Two machines with the same record give the same bits; others may differ by ulps
    (seen: a processor with AVX-512 and AMX against the one the convergence bounds were measured on)."""
    name = ""
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    return {"cpu": name or platform.processor(), "capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__}


def train(batches, chunk: int, dtype: torch.dtype, q=QUICK):
    torch.manual_seed(q["seed"])
    net = get_model(q["model"], 10).to(dtype)
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=q["lr"], momentum=q["momentum"])
    G, losses, params = q["global_batch"], [], []
    for t, (x, y) in enumerate(batches):
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for s in range(0, G, chunk):
            with sample_keys(q["seed"], t, torch.arange(s, s + chunk)):
                loss = F.cross_entropy(net(x[s:s + chunk].to(dtype)), y[s:s + chunk], reduction="sum") / G
            loss.backward()
            total += float(loss.detach())
        opt.step()
        losses.append(total)
        params.append({k: v.detach().double().clone() for k, v in net.named_parameters()})
    return losses, params


def compare(run, ref):
    (l, p), (rl, rp) = run, ref
    rel = [max(float((a[k] - b[k]).norm() / b[k].norm()) for k in a) for a, b in zip(p, rp)]
    gaps = [abs(a - b) for a, b in zip(l, rl)]
    parted = next((t for t, r in enumerate(rel) if r > PARTED), None)
    return {"max_loss_diff": max(gaps), "first_step_params_parted": parted,
            "loss_diff": gaps, "param_rel_diff": rel}


def pool_switches(batches, state_a, state_b, t: int, q=QUICK) -> list[dict]:
    """MaxPool2d windows of step t's batch whose argmax differs between two parameter sets
    (the states before step t), with the window's two competing values under each."""
    out = []
    x, _ = batches[t]
    nets = []
    for state in (state_a, state_b):
        net = get_model(q["model"], 10)
        net.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
        nets.append(net.eval())
    with torch.no_grad():
        ha, hb = x, x
        for i, (ma, mb) in enumerate(zip(nets[0].features, nets[1].features)):
            if isinstance(ma, torch.nn.MaxPool2d):
                pa, ia = F.max_pool2d(ha, ma.kernel_size, return_indices=True)
                pb, ib = F.max_pool2d(hb, mb.kernel_size, return_indices=True)
                for n, c, r, s in (ia != ib).nonzero().tolist():
                    fa, fb = ha[n, c].flatten(), hb[n, c].flatten()
                    ja, jb = int(ia[n, c, r, s]), int(ib[n, c, r, s])
                    out.append({"layer": f"features.{i}", "sample": n, "channel": c, "window": [r, s],
                                "values_a": [float(fa[ja]), float(fa[jb])], "values_b": [float(fb[ja]), float(fb[jb])]})
                ha, hb = pa, pb
            else:
                ha, hb = ma(ha), mb(hb)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=QUICK["steps"])
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    q = dict(QUICK, steps=a.steps)
    ds = open_dataset("digits", 32, 10, q["seed"])
    G = q["global_batch"]
    batches = [ds.get(batch_indices(ds, t, G, q["seed"], slice(0, G))) for t in range(q["steps"])]
    runs = {(c, d): train(batches, c, d, q) for d in (torch.float32, torch.float64) for c in CHUNKS}
    out = {"params": q, "chunks": CHUNKS, "fp32": {}, "fp64": {}, "fp32_vs_fp64_unchunked": None}
    for dname, d in (("fp32", torch.float32), ("fp64", torch.float64)):
        for c in CHUNKS[1:]:
            r = compare(runs[c, d], runs[G, d])
            t = r["first_step_params_parted"]
            for u in range(1, t + 1) if t is not None else ():  # the first step with a switched window
                sw = pool_switches(batches, runs[c, d][1][u - 1], runs[G, d][1][u - 1], u, q)
                if sw:
                    r["first_pool_switch"] = {"step": u, "windows": sw}
                    break
            out[dname][f"{G // c}x{c}"] = r
            print(f"{dname} {G // c:2d} chunks of {c:2d}: max |loss - unchunked| {r['max_loss_diff']:.1e}, "
                  f"params parted (> {PARTED:g}) after step {t}; first step with a switched max-pool window: "
                  f"{r.get('first_pool_switch', {}).get('step')}", flush=True)
    r = compare(runs[G, torch.float32], runs[G, torch.float64])
    out["fp32_vs_fp64_unchunked"] = r
    print(f"fp32 unchunked against fp64 unchunked: max |loss diff| {r['max_loss_diff']:.1e}, "
          f"params parted after step {r['first_step_params_parted']}")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    atomic.write_text(a.out, json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
