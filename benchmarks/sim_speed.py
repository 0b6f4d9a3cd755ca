"""The simulator's own cost: a 1024-node VGG-16 stanza configuration simulated (wall seconds and the
simulation process's peak memory), the 16-node VGG-16 ps configuration at 100 Gb/s simulated for 5
steps, and, where given, the memory of a recording run (the whole machine's, sampled).

    .venv/bin/python benchmarks/sim_speed.py --out benchmarks/results/sim_speed.json
    .venv/bin/python benchmarks/sim_speed.py --record-ps-stated alexnet --out ...   # + the 32-rank recording

Figures are whole-process wall seconds and peak resident memory (getrusage of the simulation's
own process, the executor) on this machine; the 1024-node program is generated (the ring
allreduces merged per edge: sim/executor.py), the recording is the real engine's at D = 1.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _sim(model, variant, nodes, b, gbps, steps):
    from stanza_core.runs.runconfig import UNSET_LINK_MBIT, RunConfig
    from stanza_core.sim.run import simulate
    from stanza_core.topology import global_batch_for

    g = global_batch_for(variant, nodes, b)
    rc = RunConfig(model=model, image_size=224, num_classes=1000, nodes=nodes, variant=variant, global_batch=g,
                   steps=steps, warmup=1, link_mbit=UNSET_LINK_MBIT, compute="replay", replay_device="v100")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    out = simulate(rc, gbps, steps=steps)
    wall = time.perf_counter() - t
    return {"label": f"{model} N={nodes} {variant.label} @ {gbps:g} Gb/s", "steps": steps, "wall_s": wall,
            "executor_s": out["wall_s"], "executor_peak_mib": max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024,
            "generator_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "step_s": out["step_s"],
            "messages_per_step": out["messages_per_step"], "ring": out["platform"]["ring"]}


def _used_mib() -> float:
    m = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(m["MemTotal"].split()[0]) - int(m["MemAvailable"].split()[0])) / 1024


def record_stated(model: str, n: int = 16) -> dict:
    """The stated PS (n workers + n dedicated servers, 16 per worker) recorded at D = 1: 2n ranks."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={2 * n}",
               "-m", "stanza_core.train", "--model", model, "--image-size", "224", "--num-classes", "1000",
               "--strategy", "ps", "--ps-servers", str(n), "--global-batch", str(16 * n), "--steps", "3", "--warmup", "1",
               "--compute", "replay", "--replay-device", "v100", "--device", "cpu", "--quiet", "--timeout-s", "900",
               "--record-program", f"{d}/p.json"]
        base, peak, stop = _used_mib(), [0.0], threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], _used_mib())
                time.sleep(0.5)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        t = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        stop.set()
        th.join()
        size = Path(f"{d}/p.json").stat().st_size if Path(f"{d}/p.json").exists() else None
        return {"label": f"{model} stated PS, {n} workers + {n} dedicated servers ({2 * n} ranks), recorded at D = 1",
                "returncode": done.returncode, "wall_s": time.perf_counter() - t, "machine_used_before_mib": base,
                "machine_used_peak_mib": peak[0], "added_peak_mib": peak[0] - base, "program_bytes": size,
                "stderr_tail": done.stderr.strip().splitlines()[-1:] if done.returncode else []}


def main(argv=None) -> int:
    from stanza_core.variant import Variant

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sim_speed.json"))
    ap.add_argument("--record-ps-stated", default=None, help="also record the 32-rank stated PS of this model")
    args = ap.parse_args(argv)
    out = {"figure": "measured: the simulator's own wall seconds and memory on this machine",
           "runs": [_sim("vgg16", Variant("stanza", fc_workers=16), 1024, 32, 100.0, 2),
                    _sim("vgg16", Variant("ps"), 16, 32, 100.0, 5)]}
    if args.record_ps_stated:
        out["recording"] = record_stated(args.record_ps_stated)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
