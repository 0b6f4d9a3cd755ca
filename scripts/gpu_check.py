"""`make gpu-check`: the GPU path end to end on a machine with one or more CUDA GPUs (< 8 min).

    python scripts/gpu_check.py [--out gpu-check-out]

  1. NCCL, world size 1: ddp and ps, 6 steps straight vs 3 steps + checkpoint + resume to 6
     (parameters must match: exact mode on one GPU is deterministic);
  2. local step times of AlexNet and VGG-16 at 224x224, batch 32 and 64, TF32 on and off
     (CUDA events, median of timed steps; beside them the calibrated model's v100/a100/h100
     predictions, which are modelled, not measured here);
  3. `python -m stanza_core.perf calibrate` for AlexNet and VGG-16 (batch 32): DeviceProfile JSONs;
  4. every strategy on several ranks with CUDA compute: on ONE GPU NCCL cannot host several
     ranks, so the ranks share it under --backend gloo (collectives on CUDA tensors, P2P staged
     through host memory); with >= 2 GPUs the same runs also go over NCCL, one GPU per rank.
     Each run in exact mode equals `local` (numerics.EXACT_TOLERANCE) and its byte counters
     equal perf.expected_bytes;
  5. a one-screen summary, printed and written to OUT/summary.txt (all figures: OUT/results.json).

On a host without a CUDA GPU it says so in one line and exits with status 3.
"""
from __future__ import annotations

import argparse
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

BUDGET_S = 8 * 60


def run(cmd: list[str], timeout: float, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="2", PYTHONWARNINGS="ignore", **(env_extra or {}))
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def train(out: Path, name: str, nproc: int, *args: str, timeout: float = 240) -> tuple[dict | None, str]:
    metrics, save = out / f"{name}.json", out / f"{name}.pt"
    cli = ["--metrics", str(metrics), "--save", str(save), "--overwrite", "--quiet", *args]
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


def step_time(model_name: str, batch: int, tf32: bool, steps: int = 12, warmup: int = 4) -> float:
    """Median seconds of one local SGD step (fwd, bwd, update) on cuda:0, CUDA events."""
    from stanza_core.models import get_model

    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    model = get_model(model_name, 1000).cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    times = []
    for i in range(warmup + steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        b.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(a.elapsed_time(b) / 1e3)
    del model, opt
    torch.cuda.empty_cache()
    return statistics.median(times)


def check_step_times(res: dict):
    from stanza_core.perf import DeviceProfile, named_profile

    rows = []
    for m in ("alexnet", "vgg16"):
        prof = named_profile(m)
        for b in (32, 64):
            for tf32 in (True, False):
                s = step_time(m, b, tf32)
                model = {}
                for dev in (("v100", "a100", "h100") if tf32 else ("v100", "a100-fp32", "h100-fp32")):
                    d = DeviceProfile.from_table(dev, prof)
                    t = d.step_compute_s(b) + prof.params * d.update_s_per_param
                    model[dev] = b / t
                rows.append({"model": m, "batch": b, "tf32": tf32, "step_s": s, "images_per_s": b / s,
                             "modelled_images_per_s": model})
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
            want = expected_bytes(prof, strategy, n, 1 if strategy == "stanza" else None, 24)
            got = [{"sent": r["sent"], "recv": r["recv"]} for r in sorted(m["ranks"], key=lambda r: r["rank"])]
            bytes_ok = got == [{"sent": w["sent"], "recv": w["recv"]} for w in want]
            res[key] = {"ok": ok and bytes_ok, "equals_local": ok, "max_abs_diff": worst, "bytes_exact": bytes_ok,
                        "step_time_median_s": m["step_time_median_s"]}


def summary(res: dict, gpus: int, name: str, wall: float) -> str:
    lines = [f"gpu-check on {gpus} x {name}, {wall:.0f} s (budget {BUDGET_S} s)"]
    for k, v in res.items():
        if isinstance(v, dict) and "ok" in v:
            detail = v.get("error") or ", ".join(f"{a}={b:.2e}" if isinstance(b, float) else f"{a}={b}"
                                                 for a, b in v.items() if a not in ("ok", "path", "line"))
            lines.append(f"  {'PASS' if v['ok'] else 'FAIL'}  {k:<28} {detail}"[:118])
    for r in res.get("local_step_times", []):
        mod = " ".join(f"{d} {v:.0f}" for d, v in r["modelled_images_per_s"].items())
        lines.append(f"  local {r['model']:<7} b{r['batch']:<3} tf32 {'on ' if r['tf32'] else 'off'} "
                     f"{r['step_s'] * 1e3:7.1f} ms  {r['images_per_s']:6.0f} img/s measured | modelled: {mod}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu-check-out", help="output folder (default gpu-check-out)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu-check: no CUDA GPU visible on this host; nothing to check (run it on a GPU machine)",
              file=sys.stderr)
        return 3
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-", dir=out))
    gpus, name = torch.cuda.device_count(), torch.cuda.get_device_name(0)
    res: dict = {"device": name, "gpus": gpus, "torch": torch.__version__}
    t0 = time.monotonic()
    for step in (lambda: check_resume(work, res), lambda: check_step_times(res),
                 lambda: check_calibrate(out, res), lambda: check_strategies(work, res, gpus)):
        if time.monotonic() - t0 > BUDGET_S:
            res.setdefault("skipped", []).append("budget exhausted")
            break
        try:
            step()
        except Exception as e:  # record and go on: the summary says what failed
            res.setdefault("errors", []).append(f"{type(e).__name__}: {str(e)[:200]}")
    text = summary(res, gpus, name, time.monotonic() - t0)
    for e in res.get("errors", []):
        text += f"\n  ERROR {e}"
    (out / "summary.txt").write_text(text + "\n")
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    print(text)
    failed = res.get("errors") or any(isinstance(v, dict) and v.get("ok") is False for v in res.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
