"""T3 solutions: running the plain torch.distributed script, and the labels' share."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from stanza_core.launch import job_env

SCRIPT = Path(__file__).resolve().parents[1] / "t3_stanza_step.py"


def plain_run(nodes: int, fc_workers: int, global_batch: int, steps: int, out: str | Path) -> dict[str, torch.Tensor]:
    """Exercise 1: launch t3_stanza_step.py on `nodes` processes; every trained parameter by name."""
    out = Path(out)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nodes}", str(SCRIPT),
           "--fc-workers", str(fc_workers), "--global-batch", str(global_batch), "--steps", str(steps),
           "--out", str(out)]
    proc = subprocess.run(cmd, env=job_env(), capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    params = {}
    for r in range(nodes):
        params.update(torch.load(out / f"rank{r}.pt", weights_only=True)["params"])
    return params


def label_bytes_per_step(G: int) -> int:
    """Exercise 2: every sample's int64 label crosses once, CONV worker -> FC worker."""
    return 8 * G


def label_share_of_boundary(A: int = 256) -> float:
    """Exercise 2, continued: labels / (activations out + gradients back + labels) per sample."""
    return 8 / (2 * 4 * A + 8)
