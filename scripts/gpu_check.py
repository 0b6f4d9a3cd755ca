"""`make gpu-check`: the GPU path end to end on a machine with one or more CUDA GPUs (< 8 min).

    python scripts/gpu_check.py [--out gpu-check-out]

  1. NCCL, world size 1: ddp and ps, 6 steps straight vs 3 steps + checkpoint + resume to 6
     (parameters must match: exact mode on one GPU is deterministic);
  2. plain PyTorch steps on configurations the compute model was not fitted on (ResNet-18 and
     VGG-11 at batch 32 and 64; AlexNet, VGG-16, ResNet-50 at batch 48), TF32 on and off (CUDA
     events, medians; fwd+bwd and the whole step), beside the fitted model's h200 rows and the
     interpolated measured records (modelled, not measured here): held-out points;
  3. `python -m stanza_core.perf calibrate` for AlexNet and VGG-16 (batch 32): DeviceProfile JSONs;
  4. every strategy on several ranks with CUDA compute: on ONE GPU NCCL cannot host several
     ranks, so the ranks share it under --backend gloo (collectives on CUDA tensors, P2P staged
     through host memory); with >= 2 GPUs the same runs also go over NCCL, one GPU per rank.
     Each run in exact mode equals `local` (numerics.EXACT_TOLERANCE) and its byte counters
     equal perf.expected_bytes;
  5. the engine against a plain PyTorch loop: AlexNet, VGG-16 and ResNet-50 at 224x224, batch
     32, TF32 default; median step of a plain loop (CUDA events) against `stanza_core.train`'s
     local step, ddp at world size 1 over NCCL against plain torch DDP at the same bucket size
     with no comm hook (and, with >= 2 GPUs, stanza k=1 on 2 GPUs over NCCL); for the compile
     model (AlexNet) also `--compile` and `--compile --compile-mode reduce-overhead` (CUDA
     graphs) against the plain eager loop; each engine/plain ratio and whether it meets its goal
     (the eager engine within 5 % of its plain counterpart, the compiled step at least 1.2x
     faster than the plain eager loop; reported, not failed on: a ratio outside its goal is a
     finding, not a broken GPU path);
  6. replay against real compute at D = 1: VGG-16 replayed from the profile step 3 calibrated
     (`--compute replay --replay-device PATH.json --dilation 1`) against the real local step
     of step 5 (the difference is the engine's own time per replayed step on this host). Bound:
     within REPLAY_BOUND (5 %) of the real step, the share of a step a replayed run may spend
     on the engine's own work (runs/plan picks D so that it stays under 5 %); a replayed
     step further off at D = 1 fails the check (in the --tiny dry run it is reported only);
  7. a one-screen summary, printed and written to OUT/summary.txt (all figures: OUT/results.json).

The checks run in the order 3, 5, 6, 2, 1, 4 (the newest first), each only while the budget lasts.
On a host without a CUDA GPU it says so in one line and exits with status 3. `--device cpu
--tiny` runs checks 5 and 6 (only) on the CPU with small models and few steps: a dry run of
their code paths for tests, whose figures mean nothing about a GPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from stanza_core.engine.config import TrainConfig  # noqa: E402

from stanza_core import procgroup  # noqa: E402
from stanza_core.variant import Variant  # noqa: E402

BUDGET_S = 8 * 60
DEFAULT_BUCKET_MB = TrainConfig.bucket_mb  # the engine's DDP bucket size, for plain DDP too
RATIO_GOAL = 1.05  # the engine's step within 5 % of a plain PyTorch loop's
COMPILE_GOAL = 1 / 1.2  # a compiled step at least 1.2x faster than the plain eager loop
REPLAY_BOUND = 0.05  # |replayed / real - 1| at D = 1: the engine's share a replayed step may take


@dataclasses.dataclass(frozen=True)
class Target:
    """What checks 5 and 6 run: the GPU configuration, or the CPU dry run (--device cpu --tiny)."""

    device: str = "cuda"
    models: tuple[str, ...] = ("alexnet", "vgg16", "resnet50")
    image_size: int = 224
    batch: int = 32
    num_classes: int = 1000
    steps: int = 25  # engine runs: steps, the first `warmup` left out of the median
    warmup: int = 5
    backend: str = "nccl"
    replay_model: str = "vgg16"  # replayed at D = 1 from the profile calibrated for it
    compile_model: str = "alexnet"  # also run with --compile (and CUDA graphs on CUDA)


TINY = Target(device="cpu", models=("tiny_cnn",), image_size=32, batch=8, num_classes=10, steps=6, warmup=2,
              backend="gloo", replay_model="tiny_cnn", compile_model="")  # compiling: tests/dist/test_compile.py


def run(cmd: list[str], timeout: float, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="2", PYTHONWARNINGS="ignore", **(env_extra or {}))
    # its own process group, ended as a whole on a timeout: torchrun's ranks die with it
    return procgroup.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout_s=timeout)


def train(out: Path, name: str, nproc: int, *args: str, timeout: float = 240, save: bool = True
          ) -> tuple[dict | None, str]:
    """Run `stanza_core.train` (nproc 0: plain python; else torchrun with nproc ranks); its metrics
    and, unless save=False (replayed runs refuse --save), its model as OUT/NAME.{json,pt}."""
    metrics = out / f"{name}.json"
    cli = ["--metrics", str(metrics), *(["--save", str(out / f"{name}.pt")] if save else []), "--overwrite",
           "--quiet", *args]
    cmd = ([sys.executable, "-m", "stanza_core.train", *cli] if nproc == 0 else
           [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "stanza_core.train", *cli])
    p = run(cmd, timeout)
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        ours = [ln for ln in lines if ln.startswith("error:")]
        return None, (ours or lines or ["(no output)"])[-1][:200]
    return json.loads(metrics.read_text()), ""


def same_params(a: Path, b: Path, rtol: float, atol: float) -> tuple[bool, float]:
    x, y = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    worst = max(((x[k].float() - y[k].float()).abs().max().item() for k in x), default=0.0)
    ok = x.keys() == y.keys() and all(torch.allclose(x[k].float(), y[k].float(), rtol=rtol, atol=atol) for k in x)
    return ok, worst


def check_resume(out: Path, res: dict):
    common = ["--model", "tiny_cnn", "--image-size", "32", "--global-batch", "16", "--device", "cuda",
              "--backend", "nccl", "--exact", "--lr", "0.05"]
    for strategy in ("ddp", "ps"):
        key = f"nccl_ws1_{strategy}_resume"
        ck = out / f"ck-{strategy}"
        full, e1 = train(out, f"{strategy}-full", 1, "--strategy", strategy, "--steps", "6", *common)
        part, e2 = train(out, f"{strategy}-part", 1, "--strategy", strategy, "--steps", "3", "--checkpoint-dir",
                         str(ck), *common)
        rest, e3 = train(out, f"{strategy}-part", 1, "--strategy", strategy, "--steps", "6", "--checkpoint-dir",
                         str(ck), "--resume", *common)
        if not (full and part and rest):
            res[key] = {"ok": False, "error": e1 or e2 or e3}
            continue
        ok, worst = same_params(out / f"{strategy}-full.pt", out / f"{strategy}-part.pt", 1e-5, 1e-6)
        res[key] = {"ok": ok and rest["config"]["backend"] == "nccl", "max_abs_diff": worst,
                    "backend": rest["config"]["backend"]}


def step_time(model_name: str, batch: int, tf32: bool, steps: int = 12, warmup: int = 4, *, device: str = "cuda",
              image_size: int = 224, num_classes: int = 1000, with_fwd_bwd: bool = False, ddp_bucket_mb=None):
    """Median seconds of one plain PyTorch SGD step (zero_grad, forward, loss, backward, update):
    on cuda:0 with CUDA events around each step and one synchronize per step; on the CPU (dry
    run) with perf_counter. with_fwd_bwd: also the median of zero_grad + forward + loss +
    backward alone (an event before the update), as (step_s, fwd_bwd_s). ddp_bucket_mb: the
    model inside torch's DDP at world size 1 (a process group of this process alone: NCCL on
    CUDA, gloo on the CPU) with that bucket size, no comm hook: the plain DDP step."""
    from stanza_core.models import get_model

    cuda = device == "cuda"
    if cuda:
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    model = get_model(model_name, num_classes).to(device).train()  # no sample keys: torch's own dropout
    if ddp_bucket_mb is not None:
        model = plain_ddp(model, device, ddp_bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, image_size, image_size, device=device)
    y = torch.randint(0, num_classes, (batch,), device=device)
    times, fb = [], []
    for i in range(warmup + steps):
        if cuda:
            a, m, b = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            a.record()
        else:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if cuda:
            m.record()
        else:
            t1 = time.perf_counter()
        opt.step()
        if cuda:
            b.record()
            torch.cuda.synchronize()
            dt, dfb = a.elapsed_time(b) / 1e3, a.elapsed_time(m) / 1e3
        else:
            dt, dfb = time.perf_counter() - t0, t1 - t0
        if i >= warmup:
            times.append(dt)
            fb.append(dfb)
    del model, opt
    if ddp_bucket_mb is not None:
        torch.distributed.destroy_process_group()
    if cuda:
        torch.cuda.empty_cache()
    return (statistics.median(times), statistics.median(fb)) if with_fwd_bwd else statistics.median(times)


def plain_ddp(model: torch.nn.Module, device: str, bucket_mb: float) -> torch.nn.Module:
    """`model` in torch's DDP at world size 1, as a user writes it: its own default comm hook, the
    engine's bucket size and its bucket settings (gradients as bucket views, no buffer broadcast)."""
    import socket
    import warnings

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=0, world_size=1)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*broadcast_buffers.* is deprecated", category=FutureWarning)
        return DDP(model, device_ids=[0] if device == "cuda" else None, bucket_cap_mb=bucket_mb,
                   broadcast_buffers=False, gradient_as_bucket_view=True)


# Plain steps the compute model was NOT fitted on (its data: alexnet, vgg16, resnet50 at batch
# 16/32/64/128): other models, and a batch between the measured ones. Committed with the run's
# results, they are held-out points for benchmarks/fit_compute_model.py.
HELD_OUT_STEPS = [(m, b) for m in ("resnet18", "vgg11") for b in (32, 64)] + \
                 [(m, 48) for m in ("alexnet", "vgg16", "resnet50")]


def check_step_times(res: dict):
    """Plain steps on configurations the compute model never saw, beside its fitted rows
    (h200 / h200-fp32: modelled) and the measured-record device (h200-measured: interpolated)."""
    from stanza_core.perf import device_profile, named_profile

    rows = []
    for m, b in HELD_OUT_STEPS:
        prof = named_profile(m)
        for tf32 in (True, False):
            s, fb = step_time(m, b, tf32, with_fwd_bwd=True)
            model = {}
            for dev in (("h200", "h200-measured") if tf32 else ("h200-fp32", "h200-fp32-measured")):
                try:
                    d = device_profile(dev, prof, b).profile
                except ValueError:  # a measured record of another model: none for resnet18 / vgg11
                    continue
                model[dev] = d.step_compute_s(b)
            rows.append({"model": m, "batch": b, "tf32": tf32, "step_s": s, "fwd_bwd_s": fb, "images_per_s": b / s,
                         "modelled_fwd_bwd_s": model})
    res["local_step_times"] = rows


def check_calibrate(out: Path, res: dict):
    for m in ("alexnet", "vgg16"):
        path = out / f"calibrated-{m}-b32.json"
        p = run([sys.executable, "-m", "stanza_core.perf", "calibrate", "--model", m, "--batch", "32",
                 "--out", str(path)], 240)
        res[f"calibrate_{m}"] = {"ok": p.returncode == 0 and path.exists(), "path": str(path),
                                 "line": (p.stdout.strip() or p.stderr.strip()).splitlines()[-1:]}


def check_strategies(out: Path, res: dict, gpus: int):
    from stanza_core.perf import expected_bytes, named_profile
    from stanza_core.numerics import EXACT_TOLERANCE

    common = ["--model", "cifar_alexnet", "--image-size", "32", "--global-batch", "24", "--steps", "5",
              "--lr", "0.05", "--device", "cuda", "--exact"]
    ref, err = train(out, "local", 0, "--strategy", "local", *common)
    res["oracle_local"] = {"ok": ref is not None, "error": err}
    if ref is None:
        return
    prof = named_profile("cifar_alexnet", 32, 10, 8)
    backends = [("gloo", 3)] + ([("nccl", min(gpus, 3))] if gpus >= 2 else [])
    for backend, n in backends:
        for strategy, extra in (("ddp", []), ("ps", []), ("stanza", ["--fc-workers", "1"])):
            key = f"{strategy}_{backend}_x{n}"
            m, err = train(out, key, n, "--strategy", strategy, "--backend", backend, *common, *extra)
            if m is None:
                res[key] = {"ok": False, "error": err}
                continue
            ok, worst = same_params(out / f"{key}.pt", out / "local.pt", **EXACT_TOLERANCE)
            want = expected_bytes(prof, Variant(strategy, fc_workers=1 if strategy == "stanza" else None), n, global_batch=24)
            got = [{"sent": r["sent"], "recv": r["recv"]} for r in sorted(m["ranks"], key=lambda r: r["rank"])]
            bytes_ok = got == [{"sent": w["sent"], "recv": w["recv"]} for w in want]
            res[key] = {"ok": ok and bytes_ok, "equals_local": ok, "max_abs_diff": worst, "bytes_exact": bytes_ok,
                        "step_time_median_s": m["step_time_median_s"]}


def engine_args(target: Target, model: str, strategy: str, *extra: str) -> list[str]:
    """The `stanza_core.train` arguments of one engine run of check 5 or 6."""
    return ["--strategy", strategy, "--model", model, "--num-classes", str(target.num_classes),
            "--image-size", str(target.image_size), "--global-batch", str(target.batch),
            "--steps", str(target.steps), "--warmup", str(target.warmup), "--device", target.device, *extra]


# The plain step each engine run is set against, and the goal of their ratio.
REFERENCE = {"local": ("plain", RATIO_GOAL), "ddp_ws1": ("plain_ddp", RATIO_GOAL),
             "stanza_k1_n2": ("plain", RATIO_GOAL), "local_compile": ("plain", COMPILE_GOAL),
             "local_cudagraphs": ("plain", COMPILE_GOAL)}


def engine_runs(target: Target, model: str, gpus: int) -> list[tuple[str, int, list[str]]]:
    """(label, ranks, train arguments) of the engine runs set against the plain steps for `model`:
    local; ddp at world size 1 (NCCL on a GPU); with >= 2 GPUs stanza k=1 on 2 GPUs over NCCL;
    for the compile model, local with --compile (and CUDA graphs on CUDA)."""
    runs = [("local", 0, engine_args(target, model, "local")),
            ("ddp_ws1", 1, engine_args(target, model, "ddp", "--backend", target.backend))]
    if target.device == "cuda" and gpus >= 2:
        runs.append(("stanza_k1_n2", 2, engine_args(target, model, "stanza", "--fc-workers", "1",
                                                    "--backend", "nccl")))
    if model == target.compile_model:
        runs.append(("local_compile", 0, engine_args(target, model, "local", "--compile")))
        if target.device == "cuda":
            runs.append(("local_cudagraphs", 0, engine_args(target, model, "local", "--compile", "--compile-mode",
                                                            "reduce-overhead")))
    return runs


def judge_ratio(engine_s: float | None, plain_s: float | None, goal: float = RATIO_GOAL) -> dict:
    """engine/plain step-time ratio and whether it meets the goal (None where a side is missing)."""
    if not engine_s or not plain_s:
        return {"engine_s": engine_s, "plain_s": plain_s, "ratio": None, "within_goal": None}
    ratio = engine_s / plain_s
    return {"engine_s": engine_s, "plain_s": plain_s, "ratio": ratio, "within_goal": ratio <= goal}


def check_engine_ratio(out: Path, res: dict, gpus: int, target: Target, deadline: float):
    """Check 5: per model, the plain loop's median step against each engine run's median step."""
    rows = res.setdefault("engine_vs_plain", [])
    for model in target.models:
        if time.monotonic() > deadline:
            res.setdefault("skipped", []).append(f"engine_vs_plain {model}: budget exhausted")
            continue
        common = dict(device=target.device, image_size=target.image_size, num_classes=target.num_classes)
        n, w = target.steps - target.warmup, target.warmup
        plain = {"plain": step_time(model, target.batch, True, n, w, **common),
                 "plain_ddp": step_time(model, target.batch, True, n, w, ddp_bucket_mb=DEFAULT_BUCKET_MB, **common)}
        for label, nproc, args in engine_runs(target, model, gpus):
            m, err = train(out, f"ratio-{model}-{label}", nproc, *args, save=False)
            ref, goal = REFERENCE[label]
            row = {"model": model, "engine": label, "ok": m is not None, "error": err, "reference": ref,
                   "goal": goal, **judge_ratio(m["step_time_median_s"] if m else None, plain[ref], goal)}
            if m:
                row["backend"] = m["config"]["backend"]
            rows.append(row)


def check_replay_vs_real(out: Path, res: dict, target: Target, profile: Path):
    """Check 6: the replayed local step at D = 1 from `profile` against the real local step."""
    real = next((r for r in res.get("engine_vs_plain", []) if r["model"] == target.replay_model
                 and r["engine"] == "local" and r["ok"]), None)
    dry_run = target.device == "cpu"
    if not profile.exists():
        res["replay_vs_real"] = {"ok": False, "error": f"no calibrated profile {profile.name} (check 3 failed?)"}
        return
    m, err = train(out, f"replay-{target.replay_model}-d1", 0,
                   *engine_args(target, target.replay_model, "local", "--compute", "replay",
                                "--replay-device", str(profile), "--dilation", "1"), save=False)
    if m is None:
        res["replay_vs_real"] = {"ok": False, "error": err}
        return
    replayed, measured = m["step_time_median_s"], real["engine_s"] if real else None
    within = judge_replay(replayed, measured)
    res["replay_vs_real"] = {"ok": within is True or dry_run, "model": target.replay_model, "profile": str(profile),
                             "replayed_step_s": replayed, "real_step_s": measured,
                             "replayed_over_real": replayed / measured if measured else None,
                             "engine_s_per_step": replayed - measured if measured else None,
                             "bound": REPLAY_BOUND, "within_bound": within, "judged": not dry_run,
                             **({} if measured else {"error": "no real local step to compare with"})}


def judge_replay(replayed_s: float | None, real_s: float | None, bound: float = REPLAY_BOUND) -> bool | None:
    """Whether the replayed step at D = 1 is within `bound` of the real one (None: no real step)."""
    if not replayed_s or not real_s:
        return None
    return abs(replayed_s / real_s - 1.0) <= bound


def ratio_lines(res: dict) -> list[str]:
    lines = []
    for r in res.get("engine_vs_plain", []):
        if not r["ok"]:
            lines.append(f"  FAIL  engine {r['model']:<8} {r['engine']:<16} {r['error']}")
        elif r["ratio"] is not None:
            goal = r.get("goal", RATIO_GOAL)
            want = "within 5 %" if goal >= 1 else f"goal x{goal:.3f} (at least {1 / goal:.1f}x faster)"
            verdict = want if r["within_goal"] else "NOT " + want
            ref = r.get("reference", "plain")
            lines.append(f"  engine {r['model']:<8} {r['engine']:<16} {r['engine_s'] * 1e3:7.2f} ms vs {ref:<9} "
                         f"{r['plain_s'] * 1e3:7.2f} ms: x{r['ratio']:.3f} {verdict}")
    rv = res.get("replay_vs_real")
    if rv and rv.get("replayed_step_s") and rv.get("real_step_s"):
        lines.append(f"  replay D=1 {rv['model']}: {rv['replayed_step_s'] * 1e3:.2f} ms replayed vs "
                     f"{rv['real_step_s'] * 1e3:.2f} ms real (x{rv['replayed_over_real']:.2f}; engine "
                     f"{rv['engine_s_per_step'] * 1e3:.2f} ms per step): "
                     + ("reported only (dry run)" if not rv.get("judged", True) else
                        f"{'within' if rv.get('within_bound') else 'NOT within'} {REPLAY_BOUND:.0%}"))
    return lines


def summary(res: dict, gpus: int, name: str, wall: float) -> str:
    lines = [f"gpu-check on {gpus} x {name}, {wall:.0f} s (budget {BUDGET_S} s)"]
    for k, v in res.items():
        if isinstance(v, dict) and "ok" in v:
            detail = v.get("error") or ", ".join(f"{a}={b:.3g}" if isinstance(b, float) else f"{a}={b}"
                                                 for a, b in v.items() if a not in ("ok", "path", "line", "profile"))
            lines.append(f"  {'PASS' if v['ok'] else 'FAIL'}  {k:<28} {detail}")  # whole: never cut
    lines += ratio_lines(res)
    for r in res.get("local_step_times", []):
        mod = " ".join(f"{d} {v * 1e3:.1f}" for d, v in r["modelled_fwd_bwd_s"].items())
        lines.append(f"  plain {r['model']:<8} b{r['batch']:<3} tf32 {'on ' if r['tf32'] else 'off'} fwd+bwd "
                     f"{r['fwd_bwd_s'] * 1e3:7.2f} ms (step {r['step_s'] * 1e3:6.2f}) | model ms: {mod}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu-check-out", help="output folder (default gpu-check-out)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cuda (default); cpu only with --tiny: a dry run of checks 5 and 6")
    ap.add_argument("--tiny", action="store_true", help="small models, few steps (with --device cpu)")
    args = ap.parse_args(argv)
    if args.device == "cpu" and not args.tiny or args.tiny and args.device != "cpu":
        print("gpu-check: --device cpu and --tiny go together (a dry run of checks 5 and 6 on the CPU)",
              file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu-check: no CUDA GPU visible on this host; nothing to check (run it on a GPU machine)",
              file=sys.stderr)
        return 3
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-", dir=out))
    t0 = time.monotonic()
    deadline = t0 + BUDGET_S
    if args.tiny:
        gpus, name, target = 0, "CPU (dry run: --device cpu --tiny)", TINY
        res: dict = {"device": name, "gpus": 0, "torch": torch.__version__, "dry_run": True}
        profile = out / f"calibrated-{target.replay_model}-b{target.batch}.json"
        p = run([sys.executable, "-m", "stanza_core.perf", "calibrate", "--model", target.replay_model, "--batch",
                 str(target.batch), "--image-size", str(target.image_size), "--num-classes", str(target.num_classes),
                 "--device", "cpu", "--warmup", "1", "--reps", "2", "--out", str(profile)], 240)
        res[f"calibrate_{target.replay_model}"] = {"ok": p.returncode == 0 and profile.exists(), "path": str(profile)}
        steps = [lambda: check_engine_ratio(work, res, gpus, target, deadline),
                 lambda: check_replay_vs_real(work, res, target, profile)]
    else:
        gpus, name, target = torch.cuda.device_count(), torch.cuda.get_device_name(0), Target()
        res = {"device": name, "gpus": gpus, "torch": torch.__version__}
        profile = out / "calibrated-vgg16-b32.json"  # written by check_calibrate
        # The checks a run on a new machine most needs come first, so a budget cut leaves the older ones
        steps = [lambda: check_calibrate(out, res), lambda: check_engine_ratio(work, res, gpus, target, deadline),
                 lambda: check_replay_vs_real(work, res, target, profile), lambda: check_step_times(res),
                 lambda: check_resume(work, res), lambda: check_strategies(work, res, gpus)]
    for step in steps:
        if time.monotonic() > deadline:
            res.setdefault("skipped", []).append("budget exhausted")
            break
        try:
            step()
        except Exception as e:  # record and go on: the summary says what failed
            res.setdefault("errors", []).append(f"{type(e).__name__}: {str(e)[:200]}")
    res["wall_s"] = time.monotonic() - t0
    text = summary(res, gpus, name, res["wall_s"])
    for e in res.get("errors", []):
        text += f"\n  ERROR {e}"
    for e in res.get("skipped", []):
        text += f"\n  SKIPPED {e}"
    (out / "summary.txt").write_text(text + "\n")
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    print(text)
    failed = res.get("errors") or any(isinstance(v, dict) and v.get("ok") is False for v in res.values()) \
        or any(not r["ok"] for r in res.get("engine_vs_plain", []))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
