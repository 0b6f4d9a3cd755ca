"""Replay fidelity: does replayed compute reproduce a real-compute run's step time?

    python benchmarks/replay_fidelity.py --model cifar_alexnet --image-size 32 --nodes 4 \\
        --global-batch 48 --link-mbit 200 --steps 6 --repeats 2 --out benchmarks/results/replay_fidelity.json

For ps, ddp, stanza k=1 and stanza k=2, each configuration runs twice on the same emulated
cluster (netem: the same shaped links): once with real compute, once with `--compute replay`
driven by a DeviceProfile of THIS machine measured right before, under the contention of that
configuration (experiments' timing rounds: as many one-thread processes computing at once as
the configuration has, e.g. N for ddp, N - k CONV workers for stanza), scaled so that the
rounds' whole step equals the engine's own step of N concurrent `local` jobs (`engine_scale`;
--no-calibrate leaves the rounds as they are), at dilation 1. Runs
interleave (real, replay, real, replay, ... per configuration and repeat) so drift of this shared
machine hits both alike; the table compares medians over repeats of each run's median step time.
Needs root (network namespaces).

Where overlap matters: the multi-bucket anchor. With --bucket-mb 0.5 cifar_alexnet's gradients
travel in 8 buckets (ddp, ps with the overlapped push) and stanza's CONV body's in 4, so the
backward/allreduce overlap that decides DDP at high bandwidth is exercised (the default 25 MB
keeps each in one bucket). The bucket counts of every configuration, by the engine's rule
(strategies.ps.engine.bucket_ranges: stanza's GradBuckets and the PS; torch's DDP reducer buckets by
the same cap, its first bucket capped at 1 MiB), are written to the output and checked against
--min-buckets before anything runs. Run on an idle machine (9 minutes on 2 cores; results and
table in lab/LOG.md):

    python benchmarks/replay_fidelity.py --model cifar_alexnet --image-size 32 --nodes 4 \\
        --global-batch 96 --link-mbit 125 --steps 8 --warmup 2 --repeats 3 --bucket-mb 0.5 \\
        --min-buckets 4 --configs ddp,ps_ov,stanza1,stanza2 \\
        --out benchmarks/results/replay_fidelity_buckets.json

With the replayed compute holding the CPU and carrying the measured jitter (--spin --jitter,
below), 30 timed steps per run (35 minutes):

    python benchmarks/replay_fidelity.py --model cifar_alexnet --image-size 32 --nodes 4 \\
        --global-batch 96 --link-mbit 125 --steps 32 --warmup 2 --repeats 5 --bucket-mb 0.5 \\
        --min-buckets 4 --configs ddp,ps_ov,stanza1,stanza2 --jitter --spin \\
        --out benchmarks/results/replay_fidelity_buckets_jitter_spin_30steps.json

The table gives each configuration's median over repeats and the spread of the per-repeat
replay-vs-real errors (target: within 5 % each).

Where a miss comes from: --timeline runs every job with the engine's `--timeline` and adds, per
run and role, the median over timed steps of each compute phase (forward, backward, the FC
worker's forward + backward per served CONV worker, the optimizer or server update) and of what
is left of the step (waiting on the network), measured the same way in real and replayed runs.

Compute jitter: --jitter (implies --timeline) also hands every replayed run measured per-step
factors (the engine's --replay-jitter; jitter_factors below): each rank's forward, backward and
update time in each timed step of an EARLIER real run of the same configuration over that phase's
mean in that run (jitter_source: repeat r's replay takes repeat r - 1's real run; repeat 0's, an
extra real run made first and not counted). The profile keeps the mean; the factors bring the
spread and how the ranks' compute lines up in a step, which on this machine's shared cores
decides when messages leave and how they queue on the links. ddp's backward mark holds its
allreduces, so its backward factor is its forward's.

Held out (a parameter fitted to a run cannot be checked by that run): every run has a
`run_id` (`<config>-<real|replay|calibration>-<repeat>`, its --keep-metrics name) and every
replayed run lists its `fitted_inputs` (what, and the run or timing rounds it came from).
fidelity_row pairs replay r with real r and refuses a pair whose real run is the source of a
fitted input of the replay (check_held_out); main checks each pair so before the replay runs.
The table's medians pool the repeats: real run r - 1, which lent its factors to replay r, is in
the real median beside replay r (the factors are normalised to mean 1 per phase: they carry the
steps' shape, not their level).

CPU held: --spin replays with the engine's --replay-wait spin, so replayed compute holds a core
for its time as the real CPU compute does; without it the waits sleep and leave the two cores to
the network stack (transport threads, TCP, the shaper) that real compute competes with.

CPU time: --wait cpu replays with the engine's --replay-wait cpu (each wait lasts until the rank's
thread has had that much CPU, so contention stretches it as it stretches real arithmetic) from a
profile of every piece timed by one process alone (timing rounds at level 1, and engine_scale at
level 1: one `local` job against the lone round), so the contention of the run itself, not the
rounds', decides the wall time. No factors from another run (not with --jitter, which would count
the contention twice):

    python benchmarks/replay_fidelity.py --model cifar_alexnet --image-size 32 --nodes 4 \
        --global-batch 96 --link-mbit 125 --steps 32 --warmup 2 --repeats 5 --bucket-mb 0.5 \
        --min-buckets 4 --configs ddp,ps_ov,stanza1,stanza2 --timeline --wait cpu \
        --out benchmarks/results/replay_fidelity_buckets_cpu_30steps.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time

from stanza_core import atomic
from stanza_core.perf.model import DEFAULT_BUCKET_MB
from stanza_core.runs import compute_rounds as timing
from stanza_core.runs.runconfig import RunConfig
from stanza_core.variant import bench_variants
from stanza_core.launch import run_job
from stanza_core.models import get_model

# name -> Variant: the benchmarks' named configurations this one runs (no dedicated servers: the
# timing rounds time N colocated processes)
CONFIGS = bench_variants(among=["ps", "ps_ov", "ddp", "stanza1", "stanza2"])


def bucket_counts(model: str, image_size: int, num_classes: int, bucket_mb: float) -> dict[str, int]:
    """Gradient buckets per step by the engine's rule: the whole model's (ddp, ps with the
    overlapped push) and the CONV body's (stanza's CONV workers)."""
    from stanza_core.split import split_model
    from stanza_core.strategies.ps.engine import bucket_ranges

    m = get_model(model, num_classes)
    conv = split_model(m, input_shape=(3, image_size, image_size)).conv
    cap = int(bucket_mb * 2**20)
    return {"model": len(bucket_ranges([p.numel() for p in m.parameters()], cap)),
            "conv_body": len(bucket_ranges([p.numel() for p in conv.parameters()], cap))}


def config_buckets(name: str, counts: dict[str, int]) -> int | None:
    """The buckets a configuration's gradients travel in (None: ps without overlap, one push)."""
    v = CONFIGS[name]
    return counts["conv_body"] if v.strategy == "stanza" else counts["model"] if (v.strategy == "ddp" or v.get("ps_overlap", False)) \
        else None


def profile_here(pool, strategy: str, k: int, nodes: int, g: int, params: int, scale: float, lone: bool = False):
    """DeviceProfile of this machine for one configuration, from rounds taken now (each piece at
    the level of processes computing at once in that configuration; `lone`: at level 1, one
    process alone, for --wait cpu), times `scale` (below); the step overhead is what a whole timed
    step took beyond its pieces (loss, masks, zero_grad)."""
    plan = timing.config_rounds(strategy, nodes, k, g, lone)
    rounds = pool.time(sorted(set(plan.values()), key=lambda r: (-r[0], r[1])))
    r = next(x for x in rounds if (x["level"], x["batch"]) == plan["step"])
    overhead = max(0.0, r["step"] - sum(r[p] for p in (*timing.PARTS, "update")))
    dev = timing.device_for(strategy, nodes, k, g, rounds, params, overhead, lone)
    scaled = {f: getattr(dev, f) * scale for f in ("conv_fwd_s", "conv_bwd_s", "fc_fwd_s", "fc_bwd_s",
                                                  "step_overhead_s", "update_s_per_param")}
    return dataclasses.replace(dev, name=f"{dev.name}, x{scale:.3f} (engine/rounds)", **scaled), rounds


def engine_scale(pool, a, level: int) -> tuple[float, float, float]:
    """The engine's own compute step (`level` concurrent single-process `local` jobs on G/N samples:
    N, or 1 for --wait cpu) over the timing rounds' step at the same level and batch. The
    rounds' worker and the engine run the same layers, yet on this shared 2-core machine the
    rounds read up to ~2x slower than the engine computes in its runs; this ratio carries the
    engine's own speed into the rounds' per-piece split."""
    b = a.global_batch // a.nodes
    rounds = pool.time([(level, b)])[0]["step"]
    got, threads = [None] * level, []
    for i in range(level):
        def one(i=i):
            got[i] = run_job(1, strategy="local", model=a.model, image_size=a.image_size, num_classes=a.num_classes,
                             global_batch=b, steps=4, warmup=1, device="cpu", seed=i)
        threads.append(threading.Thread(target=one))
        threads[-1].start()
    for t in threads:
        t.join()
    if any(g is None for g in got):
        raise RuntimeError("a local calibration job failed")
    engine = statistics.median(s["time_s"] for m in got for s in m["steps"][1:])
    return engine / rounds, engine, rounds


def compute_seconds(rank: dict, step: int) -> dict[str, float]:
    """One rank's seconds in each compute phase of one step, summed over its bars (an FC
    worker's served chunks, a server's pieces), by the timeline's names ("forward", ...)."""
    from stanza_core.viz import timeline_intervals

    got: dict[str, float] = {}
    for b in timeline_intervals(rank, step):
        if b["lane"] == "compute":
            got[b["what"]] = got.get(b["what"], 0.0) + b["end"] - b["start"]
    return got


def phase_medians(metrics: dict, warmup: int) -> dict[str, dict[str, float]]:
    """Per role, the median over its ranks and the timed steps of each compute phase's seconds
    in a step (compute_seconds), and of "other" (the step less those phases: waiting on the
    network)."""
    steps = {s["step"]: s["time_s"] for s in metrics["steps"][warmup:]}
    per_role: dict[str, dict[str, list[float]]] = {}
    for r in metrics["ranks"]:
        for step, step_s in steps.items():
            got = compute_seconds(r, step)
            got["other"] = step_s - sum(got.values())
            for what, sec in got.items():
                per_role.setdefault(r["role"], {}).setdefault(what, []).append(sec)
    return {role: {w: statistics.median(v) for w, v in phases.items()} for role, phases in per_role.items()}


JITTER_OF = {"forward": ("fwd",), "backward": ("bwd",), "FC forward + backward": ("fwd", "bwd"),
             "optimizer step": ("update",)}


def jitter_factors(metrics: dict, warmup: int, source: str) -> dict:
    """--replay-jitter's file (stanza_core/engine/replay.py) from a real run's timeline: per timed step and
    rank, each phase's seconds (compute_seconds) over that phase's mean over the timed steps of the
    ranks of the same role; a phase a rank never ran keeps 1. ddp: backward = forward."""
    steps = [s["step"] for s in metrics["steps"][warmup:]]
    ranks = sorted(metrics["ranks"], key=lambda r: r["rank"])
    secs = {}  # (rank, step) -> {phase: seconds}
    for r in ranks:
        for step in steps:
            got = {}
            for what, sec in compute_seconds(r, step).items():
                for ph in JITTER_OF.get(what, ()):
                    got[ph] = got.get(ph, 0.0) + sec
            if metrics["config"]["strategy"] == "ddp" and "fwd" in got:
                got["bwd"] = got["fwd"]
            secs[r["rank"], step] = got
    mean = {}
    for role in {r["role"] for r in ranks}:
        for ph in ("fwd", "bwd", "update"):
            v = [secs[r["rank"], s][ph] for r in ranks if r["role"] == role for s in steps if ph in secs[r["rank"], s]]
            if v:
                mean[role, ph] = statistics.fmean(v)
    out = [[{ph: (secs[r["rank"], s][ph] / mean[r["role"], ph] if ph in secs[r["rank"], s] and mean[r["role"], ph] > 0
                  else 1.0) for ph in ("fwd", "bwd", "update")} for r in ranks] for s in steps]
    return {"source": source, "steps": out}


def run_id(config: str, compute: str, repeat: int) -> str:
    """A run's name, also its --keep-metrics file's stem: "stanza1-real-2"."""
    return f"{config}-{compute}-{repeat}"


def jitter_source(config: str, repeat: int) -> dict:
    """The fitted input "jitter factors" of repeat `repeat`'s replay and the real run it comes from:
    repeat r - 1's, repeat 0's the extra calibration run made first; never repeat r's, the run the
    replay is compared with."""
    compute, rep = ("calibration", 0) if repeat == 0 else ("real", repeat - 1)
    return {"what": "jitter factors", "config": config, "compute": compute, "repeat": rep,
            "run": run_id(config, compute, rep)}


def fitted_inputs(run: dict) -> list[dict]:
    """What a replayed run took from other measurements: [{"what", "run", ...}]. Runs stored before
    runs listed them: their jitter's `source` text, "<config> <compute> run, repeat <r>"."""
    if "fitted_inputs" in run:
        return run["fitted_inputs"]
    source = (run.get("jitter") or {}).get("source")
    if not source:
        return []
    head, rep = source.rsplit(", repeat ", 1)
    config, compute = head.split(" ")[:2]
    return [{"what": "jitter factors", "run": run_id(config, compute, int(rep))}]


def _id(run: dict) -> str:
    return run.get("run_id") or run_id(run["config"], run["compute"], run["repeat"])


def check_held_out(replay: dict, real: dict) -> None:
    """One-line ValueError when `real` is the source of a fitted input of `replay`: a run cannot
    check what was fitted to it."""
    for f in fitted_inputs(replay):
        if f["run"] == _id(real):
            raise ValueError(f"replayed run {_id(replay)} is compared with {_id(real)}, the run its {f['what']} "
                             f"came from: fit to another run (jitter_source)")


def fidelity_row(name: str, runs: list[dict], repeats: int) -> dict:
    """The table row of one configuration: medians over repeats of real and replayed runs, and each
    repeat's replay against the real run of the same repeat, every pair held out (check_held_out)."""
    mine = [r for r in runs if r["config"] == name]
    by = {(r["compute"], r["repeat"]): r for r in mine}
    for i in range(repeats):
        check_held_out(by["replay", i], by["real", i])
    med = {c: statistics.median(r["step_time_median_s"] for r in mine if r["compute"] == c) for c in ("real", "replay")}
    per_rep = [by["replay", i]["step_time_median_s"] / by["real", i]["step_time_median_s"] - 1 for i in range(repeats)]
    return {"config": CONFIGS[name].label, "buckets": mine[0]["buckets"],
            "real_s": med["real"], "replay_s": med["replay"], "error": med["replay"] / med["real"] - 1,
            "error_per_repeat": per_rep, "same_bytes": len({r["bytes_per_step"] for r in mine}) == 1}


def fidelity_args(cfg: RunConfig, metrics: str, bucket_mb: float, timeline: bool, **extra) -> list[str]:
    """The training CLI's arguments of one run: its RunConfig's (RunConfig.train_args) with this
    benchmark's gradient bucket size (left out at the engine's default), --timeline and `extra`
    (--replay-wait, --replay-jitter)."""
    return cfg.train_args(metrics, bucket_mb=bucket_mb if bucket_mb != DEFAULT_BUCKET_MB else None,
                          timeline=timeline, **extra)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cifar_alexnet")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--global-batch", type=int, default=48)
    ap.add_argument("--link-mbit", type=float, default=200.0)
    ap.add_argument("--mtu", type=int, default=9000)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--configs", default="ps,ddp,stanza1,stanza2", help=f"some of {', '.join(CONFIGS)}")
    ap.add_argument("--bucket-mb", type=float, default=DEFAULT_BUCKET_MB, help="gradient bucket size (MiB)")
    ap.add_argument("--min-buckets", type=int, default=1,
                    help="refuse a configuration whose gradients travel in fewer buckets (ps without overlap: one)")
    ap.add_argument("--calibrate", action=argparse.BooleanOptionalAction, default=True,
                    help="scale the rounds' times to the engine's own concurrent compute step (see engine_scale)")
    ap.add_argument("--timeline", action="store_true",
                    help="record the engine's timeline and report each compute phase, real against replayed")
    ap.add_argument("--jitter", action="store_true",
                    help="replay with the per-step compute factors of an earlier real run of the configuration "
                         "(implies --timeline; see the docstring)")
    ap.add_argument("--wait", choices=("sleep", "spin", "cpu"), default="sleep",
                    help="the engine's --replay-wait for replayed runs: sleep, spin (hold the CPU for the wall "
                         "time), cpu (hold it until the thread has had the CPU time; profiles of lone pieces)")
    ap.add_argument("--spin", action="store_true", help="the same as --wait spin")
    ap.add_argument("--keep-metrics", default=None, metavar="DIR",
                    help="keep every run's metrics JSON (with --timeline: its timeline) in DIR, "
                         "as <config>-<real|replay>-<repeat>.json (benchmarks/message_latency.py reads them)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    a.timeline = a.timeline or a.jitter
    if a.spin:
        if a.wait not in ("sleep", "spin"):
            ap.error(f"--spin and --wait {a.wait}: choose one")
        a.wait = "spin"
    if a.wait == "cpu" and a.jitter:
        ap.error("--wait cpu and --jitter: the CPU-time waits stretch under the run's own contention, "
                 "the factors would count it twice; choose one")
    from stanza_core.netem import run_training

    try:
        wanted = list(bench_variants(a.configs, among=list(CONFIGS)))
        # every run's configuration (real compute; its replay the same with a profile measured here, D = 1),
        # checked before any timing process or network namespace exists
        base = {c: RunConfig.of(CONFIGS[c], model=a.model, image_size=a.image_size, num_classes=a.num_classes,
                                nodes=a.nodes, global_batch=a.global_batch, steps=a.steps, warmup=a.warmup,
                                link_mbit=a.link_mbit, mtu=a.mtu) for c in wanted}
    except ValueError as e:
        ap.error(str(e))
    counts = bucket_counts(a.model, a.image_size, a.num_classes, a.bucket_mb)
    buckets = {c: config_buckets(c, counts) for c in wanted}
    few = [f"{c} ({b or 1})" for c, b in buckets.items() if (b or 1) < a.min_buckets]
    if few:
        ap.error(f"--min-buckets {a.min_buckets}: {', '.join(few)} at --bucket-mb {a.bucket_mb:g}; lower --bucket-mb")
    params = sum(p.numel() for p in get_model(a.model, a.num_classes).parameters())
    if a.keep_metrics:
        os.makedirs(a.keep_metrics, exist_ok=True)
        taken = [f"{run_id(c, x, r)}.json" for c in wanted for x in ("calibration", "real", "replay")
                 for r in range(a.repeats) if os.path.exists(os.path.join(a.keep_metrics, f"{run_id(c, x, r)}.json"))]
        if taken:
            ap.error(f"--keep-metrics {a.keep_metrics} already holds {taken[0]}; choose an empty folder")
    runs, jitter = [], {}  # jitter: run id -> the factors of that real run
    lone = a.wait == "cpu"  # CPU-time waits: profiles and engine_scale of one process alone
    with tempfile.TemporaryDirectory(prefix="replay-fidelity-") as tmp, \
            timing.TimingPool(a.model, a.image_size, a.num_classes, a.nodes) as pool:
        for rep in range(a.repeats):
            scale, engine, rounds_step = engine_scale(pool, a, 1 if lone else a.nodes) if a.calibrate else (1.0, None, None)
            print(f"rep {rep}: engine step {engine}, rounds step {rounds_step}, scale {scale:.3f}",
                  file=sys.stderr, flush=True)
            for name in wanted:
                v = CONFIGS[name]
                dev, rounds = profile_here(pool, v.strategy, v.get("fc_workers", 0), a.nodes, a.global_batch, params, scale, lone)
                dev_path = os.path.join(tmp, f"dev-{name}-{rep}.json")
                atomic.write_text(dev_path, json.dumps(dev.to_dict()))
                plan = ["real", "replay"]
                if a.jitter and rep == 0:
                    plan.insert(0, "calibration")  # an extra real run: repeat 0's replay takes its factors
                # where the replay's fitted inputs came from (never the real run it is compared with)
                src = jitter_source(name, rep) if a.jitter else None
                fitted = [{"what": "device profile", "config": name, "repeat": rep,
                           "run": f"timing rounds, repeat {rep}"}, *([src] if src else [])]
                check_held_out({"run_id": run_id(name, "replay", rep), "fitted_inputs": fitted},
                               {"run_id": run_id(name, "real", rep)})
                for compute in plan:
                    metrics = os.path.join(a.keep_metrics or tmp, f"{run_id(name, compute, rep)}.json")
                    cfg = dataclasses.replace(base[name], compute="replay", replay_device=dev_path, dilation=1.0) \
                        if compute == "replay" else base[name]
                    extra = {}  # the engine's options beyond a run's configuration
                    if compute == "replay" and a.wait != "sleep":
                        extra["replay_wait"] = a.wait
                    if compute == "replay" and a.jitter:
                        extra["replay_jitter"] = os.path.join(tmp, f"jitter-{name}-{rep}.json")
                        atomic.write_text(extra["replay_jitter"], json.dumps(jitter[src["run"]]))
                    args = fidelity_args(cfg, metrics, a.bucket_mb, a.timeline, **extra)
                    m = run_training(cfg.cluster_nodes, cfg.link_mbit, args, mtu=cfg.mtu, timeout_s=1200, quiet=True)
                    if compute != "replay" and a.jitter:  # a later replay takes these (jitter_source)
                        jitter[run_id(name, compute, rep)] = jitter_factors(m, a.warmup,
                                                                            f"{name} {compute} run, repeat {rep}")
                    if compute == "calibration":
                        print(f"{v.label:12s} calibration real run for --jitter: median "
                              f"step {m['step_time_median_s'] * 1e3:.1f} ms (not counted)", file=sys.stderr, flush=True)
                        continue
                    runs.append({"run_id": run_id(name, compute, rep), "config": name, "strategy": v.strategy,
                                 "fc_workers": v.get("fc_workers", 0), "ps_overlap": v.get("ps_overlap", False),
                                 "buckets": buckets[name], "compute": compute, "repeat": rep,
                                 "step_time_median_s": m["step_time_median_s"],
                                 "step_times_s": [x["time_s"] for x in m["steps"]],
                                 "bytes_per_step": m["bytes_per_step"], "device_profile": dev.to_dict(),
                                 "timing_rounds": rounds, "engine_scale": scale, "engine_step_s": engine,
                                 "rounds_step_s": rounds_step, "finished_at": time.strftime("%H:%M:%S"),
                                 **({"fitted_inputs": fitted} if compute == "replay" else {}),
                                 **({"jitter": jitter[src["run"]]} if compute == "replay" and src else {}),
                                 **({"phases": phase_medians(m, a.warmup)} if a.timeline else {})})
                    print(f"{v.label:12s} {compute:6s} rep {rep}: median step "
                          f"{m['step_time_median_s'] * 1e3:.1f} ms", file=sys.stderr, flush=True)
    rows = [fidelity_row(name, runs, a.repeats) for name in wanted]
    print(f"{a.model} {a.image_size}x{a.image_size}, N={a.nodes}, G={a.global_batch}, links {a.link_mbit:g} Mbit/s "
          f"(MTU {a.mtu}), {a.steps} steps ({a.warmup} warm-up), {a.repeats} repeats, interleaved, "
          f"buckets of {a.bucket_mb:g} MiB" + (f", replayed waits {a.wait}" if a.wait != "sleep" else "")
          + (", replayed with the measured compute jitter of the previous repeat's real run" if a.jitter else ""))
    print("| configuration | gradient buckets | real compute, median step (ms) | replayed (profile measured here), "
          "median step (ms) | replay vs real | per repeat (spread) | bytes/step equal |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        reps = " / ".join(f"{100 * e:+.1f}" for e in r["error_per_repeat"])
        spread = max(r["error_per_repeat"]) - min(r["error_per_repeat"])
        print(f"| {r['config']} | {r['buckets'] or 1} | {r['real_s'] * 1e3:.1f} | {r['replay_s'] * 1e3:.1f} "
              f"| {100 * r['error']:+.1f} % | {reps} % ({100 * spread:.1f} points) "
              f"| {'yes' if r['same_bytes'] else 'NO'} |")
    if a.timeline:
        print_phases(runs)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        atomic.write_text(a.out, json.dumps({"args": vars(a), "bucket_counts": counts, "runs": runs, "table": rows}, indent=1))
    return 0


def print_phases(runs: list[dict]) -> None:
    """Per configuration and role, each phase's median over repeats, real against replayed (ms)."""
    print("\n| configuration | role | phase | real (ms) | replayed (ms) | replayed - real (ms) |")
    print("|---|---|---|---|---|---|")
    for name in dict.fromkeys(r["config"] for r in runs):
        mine = [r for r in runs if r["config"] == name]
        label = CONFIGS[name].label
        for role in dict.fromkeys(role for r in mine for role in r["phases"]):
            whats = list(dict.fromkeys(w for r in mine for w in r["phases"].get(role, {})))
            for what in whats:
                got = {c: [r["phases"][role][what] for r in mine
                           if r["compute"] == c and what in r["phases"].get(role, {})] for c in ("real", "replay")}
                med = {c: statistics.median(v) if v else float("nan") for c, v in got.items()}
                print(f"| {label} | {role} | {what} | {med['real'] * 1e3:.1f} | {med['replay'] * 1e3:.1f} "
                      f"| {(med['replay'] - med['real']) * 1e3:+.1f} |")


if __name__ == "__main__":
    sys.exit(main())
