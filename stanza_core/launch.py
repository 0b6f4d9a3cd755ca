"""Launch training jobs from Python (notebooks, benchmarks): one torchrun per job on this machine.

    metrics = run_job(nodes=4, strategy="stanza", model="alexnet", fc_workers=1, global_batch=96)

Every keyword is a training CLI flag (`fc_workers=1` -> `--fc-workers 1`; True -> a bare flag).
The job writes its metrics JSON (and, with save=..., the model) into `workdir`; the parsed
metrics come back. A failing job raises JobError with one line: the exception a rank raised (read
from torchrun's per-rank error files), else the job's own one-line error; a job past `timeout_s`
raises JobError saying so. torchrun and its ranks run in a process group of their own, ended as a
whole on a timeout, an error or Ctrl-C (stanza_core.procgroup), so no rank outlives its job.
`train_model(model, ...)` does the same for a model object (say, a class defined in a notebook):
no module file needed. For jobs on the emulated cluster (one network namespace per node) see
stanza_core.netem.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from . import procgroup, registry
from .engine import rank_errors

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


_LAUNCHER_ERRORS = ("ChildFailedError", "torch.distributed.elastic")
TORCHRUN_LOGS = "torchrun"  # in a job's workdir: torchrun's --log-dir, holding each rank's error file


def job_failure(stderr: str, returncode: int, errors: dict[int, str] | None = None) -> str:
    """What a failed job says about itself, in one line: the first exception a rank raised, from
    the ranks' error files (`errors`: rank_errors.read) when there are any; else a rank's own
    `error: ...` line; else the first exception in stderr (its traceback's last line; not the
    launcher's ChildFailedError that follows it); else the last lines of stderr."""
    if errors:
        rank, text = next(iter(errors.items()))
        return f"rank {rank} raised {text} (exit {returncode})"
    lines = stderr.splitlines()
    if ours := [line for line in lines if line.startswith("error: ")]:
        return ours[0][len("error: "):]
    raised = [line.strip() for line in lines
              if re.match(r"^\s*(\[rank\d+\]:\s*)?[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b(:|$)", line)
              and not any(t in line for t in _LAUNCHER_ERRORS)]
    if raised:
        return f"a rank raised {raised[0]} (exit {returncode})"
    return f"exit {returncode}: " + " | ".join(line.strip() for line in lines[-12:] if line.strip())[-1500:]


def run_job(nodes: int, workdir: str | None = None, timeout_s: float = 1800, threads: int = 1, **flags) -> dict:
    """Run one training job on `nodes` local processes (gloo/NCCL per --device); its metrics."""
    strategy = flags.get("strategy", "stanza")
    own_dir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="stanza-job-")
    os.makedirs(workdir, exist_ok=True)
    model_tag = os.path.basename(str(flags.get("model", "model"))).replace(":", "_")  # a spec or a path: a file name
    name = f"{strategy}-{model_tag}-n{nodes}-k{flags.get('fc_workers', 0)}"
    flags.setdefault("metrics", os.path.join(workdir, name + ".json"))
    flags.setdefault("quiet", True)
    flags.setdefault("overwrite", True)
    args = cli_args(**flags)
    if not registry.get(strategy).compared:  # the oracle: one process
        cmd = [sys.executable, "-m", "stanza_core.train", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nodes}",
               "--log-dir", os.path.join(workdir, TORCHRUN_LOGS), "-m", "stanza_core.train", *args]
    shutil.rmtree(os.path.join(workdir, TORCHRUN_LOGS), ignore_errors=True)  # no error file of an earlier job
    try:  # its own process group, ended as a whole on a timeout or an error here: no orphaned ranks
        proc = procgroup.run(cmd, cwd=ROOT, env=job_env(threads), capture_output=True, text=True, timeout_s=timeout_s)
    except subprocess.TimeoutExpired:
        raise JobError(f"{name}: timed out after {timeout_s:g} s; its processes were ended") from None
    if proc.returncode != 0:
        errors = rank_errors.read(os.path.join(workdir, TORCHRUN_LOGS))
        raise JobError(f"{name}: {job_failure(proc.stderr, proc.returncode, errors)}")
    with open(flags["metrics"]) as fh:
        metrics = json.load(fh)
    if own_dir and "save" not in flags:
        shutil.rmtree(workdir, ignore_errors=True)
    return metrics


def train_model(model, *, nodes: int = 2, strategy: str = "stanza", image_size: int = 32,
                workdir: str | None = None, timeout_s: float = 1800, threads: int = 1, **flags) -> dict:
    """Train the nn.Module `model` itself on `nodes` local processes; its metrics JSON (parsed).

        import torch.nn as nn, stanza_core
        net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                            nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
        m = stanza_core.train_model(net, nodes=3, strategy="stanza", global_batch=24, steps=5)

    The object is pickled by value (cloudpickle) to `workdir/model.model.pkl` and every rank
    loads that copy, so all start from `model`'s current parameters (the seed no longer picks
    them); `model` itself is left untouched (pass save=PATH to get the trained state_dict).
    num_classes is read from the model's output. Other keywords are training CLI flags, as for
    run_job. The model is checked here first (it runs on the input, returns logits, and under
    stanza splits), so a bad model is a one-line ValueError before any process starts."""
    import torch  # torch: the launcher needs none; only train_model

    from .models import PICKLED_SUFFIX, check_model, save_model_object  # models loads torch: the launcher needs none; only train_model
    from .split import split_model  # split loads torch: the launcher needs none; only train_model

    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"train_model needs an nn.Module, got {type(model).__name__}")
    probe = copy.deepcopy(model).cpu()
    shape = (3, image_size, image_size)
    was = probe.training
    probe.eval()
    try:
        with torch.no_grad():
            out = probe(torch.zeros((1, *shape)))
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"the model fails on an input of shape (1, {', '.join(map(str, shape))}): {first}") from None
    probe.train(was)
    if not isinstance(out, torch.Tensor) or out.dim() != 2:
        raise ValueError(f"the model must return logits (batch, classes), got {type(out).__name__} "
                         f"{tuple(out.shape) if isinstance(out, torch.Tensor) else ''}")
    num_classes = flags.setdefault("num_classes", int(out.shape[1]))
    check_model(probe, shape, num_classes, "the model")
    if registry.get(strategy).split:
        split_model(probe, flags.get("boundary"), input_shape=shape)  # SplitError: one line, nothing launched
    own_dir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="stanza-model-")
    os.makedirs(workdir, exist_ok=True)
    path = save_model_object(model, os.path.join(workdir, "model" + PICKLED_SUFFIX))
    try:
        return run_job(nodes, workdir=workdir, timeout_s=timeout_s, threads=threads, strategy=strategy,
                       model=path, image_size=image_size, **flags)
    finally:
        if own_dir and "save" not in flags:
            shutil.rmtree(workdir, ignore_errors=True)
