"""The replay engine's own cost: engine seconds per replayed step at D = 1, and peak RSS per rank.

    python benchmarks/replay_engine.py [--model vgg16] [--image-size 224] [--nodes 4]
        [--configs ps,ddp,...] [--per-worker 32] [--steps 4] [--out FILE.json]

Per configuration, one replayed run (`--compute replay --replay-device v100 --dilation 1`) on
`--nodes` local processes over loopback (gloo, unshaped): the engine seconds exactly as
`runs.plan.engine_seconds` measures them (median step of `--steps` steps, 1 warm-up,
less the model's step on a 1000 Gb/s network), and every rank's peak RSS from the metrics
(`peak_rss_mib`: the whole run, setup included). Configurations: the benchmarks' named ones
(stanza_core.variant.bench_variants: ddp, ps with colocated shards, ps_s1 with one dedicated server,
N + 1 processes, also called ps-dedicated here, ps_ov, ps_s1_ov, stanza1, stanza2). Beside
the summed RSS (which counts shared library pages once per process), the machine memory the run
took: MemAvailable before it less the lowest MemAvailable during it.
`--memory-only` runs 1 step and reports the memory alone (for N = 16 on a small machine).

Measured, never modelled. The stanza_core that runs is the one on PYTHONPATH (point it at another
checkout to measure that one side by side). On a shared machine, compare runs made together.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time

from stanza_core.variant import bench_variants

# name -> Variant: the benchmarks' named configurations, and this benchmark's older name of ps_s1
CONFIGS = {**bench_variants(), "ps-dedicated": bench_variants()["ps_s1"]}


def mem_available_kib() -> int:
    with open("/proc/meminfo") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:"))


class MachineMemory:
    """The machine's memory a run takes: MemAvailable before it less the lowest MemAvailable seen
    while it runs (sampled every 0.1 s). Unlike summed per-process RSS, shared library pages count
    once; it also counts whatever else starts on the machine meanwhile (run it on a quiet one)."""

    def __enter__(self):
        self.before, self.low, self._stop = mem_available_kib(), mem_available_kib(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.1):
            self.low = min(self.low, mem_available_kib())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def taken_gib(self) -> float:
        return (self.before - self.low) / 2**20


def run_config(name: str, a) -> dict:
    import stanza_core
    from stanza_core.runs import plan as planner
    from stanza_core.runs.runconfig import RunConfig
    from stanza_core.launch import run_job
    from stanza_core.topology import global_batch_for

    v = CONFIGS[name]
    cfg = RunConfig.of(v, model=a.model, image_size=a.image_size, num_classes=a.num_classes, nodes=a.nodes,
                       global_batch=global_batch_for(v, a.nodes, a.per_worker),
                       steps=1 if a.memory_only else a.steps, warmup=0 if a.memory_only else 1,
                       link_mbit=planner.UNSET_LINK_MBIT, compute="replay", replay_device=a.replay_device, dilation=1.0)
    flags = cfg.train_flags()
    flags.pop("timeout_s")
    t0 = time.perf_counter()
    with MachineMemory() as machine:
        m = run_job(cfg.cluster_nodes, timeout_s=a.timeout_s, **flags)
    wall = time.perf_counter() - t0
    rss = [r["peak_rss_mib"] for r in m["ranks"]]
    out = {"config": name, "processes": cfg.cluster_nodes, "global_batch": cfg.global_batch,
           "engine": stanza_core.__file__, "wall_s": wall,
           "peak_rss_mib": rss, "steps_peak_rss_mib": [r.get("steps_peak_rss_mib") for r in m["ranks"]], "peak_rss_sum_gib": sum(rss) / 1024, "peak_rss_max_mib": max(rss),
           "machine_memory_taken_gib": machine.taken_gib, "bytes_per_step": m["bytes_per_step"]}
    if not a.memory_only:
        model_s = planner.model_step_s(cfg, planner.COMPUTE_ONLY_GBPS)
        out.update(step_times_s=[s["time_s"] for s in m["steps"]], median_step_s=m["step_time_median_s"],
                   model_step_s=model_s, engine_s=max(0.0, m["step_time_median_s"] - model_s))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vgg16")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--per-worker", type=int, default=32, help="samples per data worker")
    p.add_argument("--configs", default="ps,ddp")
    p.add_argument("--replay-device", default="v100")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--memory-only", action="store_true")
    p.add_argument("--timeout-s", type=float, default=1800)
    p.add_argument("--out")
    a = p.parse_args(argv)
    names = [c for c in a.configs.split(",") if c]
    bad = [c for c in names if c not in CONFIGS]
    if bad:
        print(f"error: unknown config {bad[0]!r}; expected one of {', '.join(CONFIGS)}", file=sys.stderr)
        return 2
    rows = []
    from stanza_core.launch import JobError
    for name in names:
        try:
            row = run_config(name, a)
        except JobError as e:  # recorded, and the other configurations still run
            # the launcher's text: our one-line error, else the tail of the ranks' stderr (the
            # first rank's traceback or signal, not only the launcher's last line)
            tail = [ln for ln in str(e).strip().splitlines() if ln.strip()][-12:]
            print(f"{a.model} N={a.nodes} {name}: FAILED:\n    " + "\n    ".join(tail), flush=True)
            rows.append({"config": name, "failed": str(e)[-2000:]})
            continue
        rows.append(row)
        eng = f"engine {row['engine_s']:.3f} s (median step {row['median_step_s']:.3f} s, model {row['model_step_s']:.3f} s), " \
            if "engine_s" in row else ""
        print(f"{a.model} N={a.nodes} {name}: {eng}peak RSS max {row['peak_rss_max_mib']:.0f} MiB/rank, "
              f"sum {row['peak_rss_sum_gib']:.2f} GiB over {row['processes']} processes; machine memory taken "
              f"{row['machine_memory_taken_gib']:.2f} GiB", flush=True)
    if a.out:
        from stanza_core import atomic

        atomic.write_text(a.out, json.dumps({"args": vars(a), "rows": rows,
                                             "median_engine_s": statistics.median(r["engine_s"] for r in rows
                                                                                  if "engine_s" in r)
                                             if any("engine_s" in r for r in rows) else None}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
