"""The paper's regime in the performance model: AlexNet and VGG-16 (224x224, 1000 classes) on
V100-class nodes at 10 and 100 Gb/s, 4/8/16 nodes; speedup of the best stanza k over PS and DDP.

    .venv/bin/python benchmarks/perf_paper_regime.py [--batches 32,64] [--json PATH]

Batch: b samples per data worker (every rank under ps/ddp, every CONV worker under stanza);
the paper does not state its per-GPU batch, so several b are shown. PS: one shard per node
(S = N, the strongest PS) and one server (S = 1), the shape of a classic PS deployment.
"""
from __future__ import annotations

import argparse
import json
import sys

from stanza_core import atomic
from stanza_core.perf import Cluster, best_assignment, named_profile, predict
from stanza_core.variant import Variant

PAPER = {  # from the paper's abstract (PAPER.md)
    10.0: "1.34x-13.9x over PS (EC2 V100, measured, AlexNet/VGG-16 among 'common models')",
    100.0: "1.55x AlexNet, 1.72x VGG-16 (simulation; baseline PS)",
}


def rows(models, sizes, bandwidths, batches, latency_s):
    out = []
    for model in models:
        profile = named_profile(model)
        for gbps in bandwidths:
            for b in batches:
                for n in sizes:
                    cluster = Cluster(n, gbps, latency_s, "v100")
                    a = best_assignment(profile, cluster, batch_per_worker=b)
                    st = a.best_stanza()
                    ps1 = predict(profile, cluster, Variant("ps", ps_shards=1), batch_per_worker=b, with_ranks=False)
                    out.append({"model": model, "gbps": gbps, "b": b, "nodes": n, "k": st.fc_workers,
                                "stanza_ms": st.iteration_s * 1e3, "ddp_ms": a.ddp.iteration_s * 1e3,
                                "psN_ms": a.ps.iteration_s * 1e3, "ps1_ms": ps1.iteration_s * 1e3,
                                "vs_psN": st.throughput / a.ps.throughput, "vs_ps1": st.throughput / ps1.throughput,
                                "vs_ddp": st.throughput / a.ddp.throughput,
                                "bytes_ratio_psN": a.ps.max_node_sent / st.max_node_sent,
                                "best": a.best.strategy if a.best.strategy != "stanza" else f"k={a.best.fc_workers}"})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="32,64", help="per-worker batches, comma-separated")
    p.add_argument("--latency-us", type=float, default=50.0)
    p.add_argument("--json", help="also write the rows as JSON here")
    args = p.parse_args(argv)
    try:
        batches = [int(v) for v in args.batches.split(",")]
    except ValueError:
        print(f"perf_paper_regime: error: --batches must be comma-separated integers, got {args.batches!r}",
              file=sys.stderr)
        return 2
    res = rows(["alexnet", "vgg16"], [4, 8, 16], [10.0, 100.0], batches, args.latency_us * 1e-6)
    print(f"V100 table device, {args.latency_us:g} us/message; speedup = stanza(best k) samples/s / baseline samples/s;")
    print("bytes/node ps:st = busiest node's bytes sent per step, ps(S=N) over stanza; best = best_assignment's pick")
    print(f"{'model':<8}{'Gb/s':>5}{'b':>4}{'N':>4}{'k':>3}{'stanza ms':>10}{'ddp ms':>9}{'ps(S=N)':>9}"
          f"{'ps(S=1)':>9}{'vs ps(S=N)':>11}{'vs ps(S=1)':>11}{'vs ddp':>8}{'bytes/node ps:st':>17}{'best':>6}")
    for r in res:
        print(f"{r['model']:<8}{r['gbps']:>5g}{r['b']:>4}{r['nodes']:>4}{r['k']:>3}{r['stanza_ms']:>10.1f}"
              f"{r['ddp_ms']:>9.1f}{r['psN_ms']:>9.1f}{r['ps1_ms']:>9.1f}{r['vs_psN']:>10.2f}x{r['vs_ps1']:>10.2f}x"
              f"{r['vs_ddp']:>7.2f}x{r['bytes_ratio_psN']:>16.1f}x{r['best']:>6}")
    for gbps, claim in PAPER.items():
        print(f"paper at {gbps:g} Gb/s: {claim}")
    if args.json:
        atomic.write_text(args.json, json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
