"""Launch training jobs from Python (notebooks, benchmarks): one torchrun per job on this machine.

    metrics = run_job(nodes=4, strategy="stanza", model="alexnet", fc_workers=1, global_batch=96)

Every keyword is a training CLI flag (`fc_workers=1` -> `--fc-workers 1`; True -> a bare flag).
The job writes its metrics JSON (and, with save=..., the model) into `workdir`; the parsed
metrics come back. A failing job raises JobError with the job's own one-line error if it printed
one. For jobs on the emulated cluster (one network namespace per node) see stanza_core.netem.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class JobError(RuntimeError):
    pass


def cli_args(**flags) -> list[str]:
    """Training CLI arguments from keywords (None and False are left out)."""
    out = []
    for key, value in flags.items():
        if value is None or value is False:
            continue
        out.append("--" + key.replace("_", "-"))
        if value is not True:
            out.append(str(value))
    return out


def job_env(threads: int = 1) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_job(nodes: int, workdir: str | None = None, timeout_s: float = 1800, threads: int = 1, **flags) -> dict:
    """Run one training job on `nodes` local processes (gloo/NCCL per --device); its metrics."""
    strategy = flags.get("strategy", "stanza")
    own_dir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="stanza-job-")
    os.makedirs(workdir, exist_ok=True)
    name = f"{strategy}-{flags.get('model', 'model')}-n{nodes}-k{flags.get('fc_workers', 0)}"
    flags.setdefault("metrics", os.path.join(workdir, name + ".json"))
    flags.setdefault("quiet", True)
    flags.setdefault("overwrite", True)
    args = cli_args(**flags)
    if strategy == "local":
        cmd = [sys.executable, "-m", "stanza_core.train", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nodes}",
               "-m", "stanza_core.train", *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=job_env(threads), capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        ours = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
        raise JobError(f"{name}: " + (ours[0][len("error: "):] if ours else proc.stderr.strip()[-1500:]))
    with open(flags["metrics"]) as fh:
        metrics = json.load(fh)
    if own_dir and "save" not in flags:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return metrics
