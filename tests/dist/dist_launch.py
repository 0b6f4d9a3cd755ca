"""Helpers for multi-process tests: real torchrun launches on gloo, one CPU thread per rank."""
from __future__ import annotations

import json
import os
import sys

import pytest
import torch

from stanza_core import procgroup

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rank_env() -> dict[str, str]:
    env = dict(os.environ)
    # tests/dist too: ranks can import models defined in these test modules (--model test_x:factory)
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.path.join(ROOT, "tests", "dist"),
               CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore")
    return env


def train(tmp_path, name: str, nproc: int, *args: str, timeout: float = 240, check: bool = True):
    """Run one training job; return (metrics dict, saved state_dict, completed process)."""
    metrics, save = tmp_path / f"{name}.json", tmp_path / f"{name}.pt"
    cli = ["--metrics", str(metrics), "--save", str(save), "--quiet", "--device", "cpu", *args]
    if nproc == 1 and "local" in args:
        cmd = [sys.executable, "-m", "stanza_core.train", *cli]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", "stanza_core.train", *cli]
    # its own process group, ended with every rank on a timeout (no rank outlives a hung test)
    proc = procgroup.run(cmd, cwd=ROOT, env=rank_env(), capture_output=True, text=True, timeout_s=timeout)
    if check and proc.returncode != 0:
        pytest.fail(f"{name} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    if proc.returncode != 0:
        return None, None, proc
    return json.loads(metrics.read_text()), torch.load(save, weights_only=True), proc


def train_many(tmp_path, nproc: int, jobs: dict[str, list[str] | dict], timeout: float = 600,
               save: bool = True) -> dict[str, tuple]:
    """Run training jobs of `nproc` ranks one after another in one torchrun launch (jobs_driver.py:
    one start-up for all); return {name: (metrics dict, saved state_dict)} as `train` would (the
    state None with save=False: no --save). A dict job is passed to the driver as it is (e.g.
    {"copy": [src, dst]}) and returns nothing."""
    paths, argv = {}, []
    for name, args in jobs.items():
        if isinstance(args, dict):
            argv.append(args)
            continue
        metrics, saved = tmp_path / f"{name}.json", (tmp_path / f"{name}.pt" if save else None)
        argv.append(["--metrics", str(metrics), *(["--save", str(saved)] if save else []), "--quiet", "--device", "cpu",
                     *args])
        paths[name] = metrics, saved
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps(argv))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           os.path.join(ROOT, "tests", "dist", "jobs_driver.py"), str(spec)]
    proc = procgroup.run(cmd, cwd=ROOT, env=rank_env(), capture_output=True, text=True, timeout_s=timeout)
    if proc.returncode != 0:
        pytest.fail(f"jobs {list(jobs)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return {name: (json.loads(m.read_text()), torch.load(s, weights_only=True) if s else None)
            for name, (m, s) in paths.items()}


def grouped_runs(tmp_path_factory, jobs: dict[str, tuple[int, list[str]]], timeout_per_job: float = 240,
                 save: bool = True):
    """get(name) -> (metrics dict, saved state_dict) of jobs[name] = (ranks, training arguments):
    the first time a job is asked for, every job with its number of ranks not yet run goes in one
    torchrun launch (train_many). Each result is handed out once and then dropped (saved models
    of the larger zoo models are hundreds of MB); asked for again, a job runs again."""
    made: dict[str, tuple] = {}

    def get(name: str):
        if name not in made:
            n = jobs[name][0]
            same = {k: args for k, (m, args) in jobs.items() if m == n and k not in made}
            made.update(train_many(tmp_path_factory.mktemp(f"n{n}"), n, same, timeout=timeout_per_job * len(same),
                                   save=save))
        return made.pop(name)

    return get


def assert_same_params(got: dict, ref: dict, rtol=1e-5, atol=1e-6, chunk: int = 1 << 22):
    """Element-wise close, tensor by tensor; large tensors in chunks of `chunk` values, so the
    comparison's temporaries stay small (vgg16_bn's first classifier layer holds 103M values)."""
    assert got.keys() == ref.keys()
    for k in ref:
        a, b = got[k].reshape(-1), ref[k].reshape(-1)
        assert got[k].shape == ref[k].shape, (k, got[k].shape, ref[k].shape)
        for i in range(0, max(b.numel(), 1), chunk):
            torch.testing.assert_close(a[i:i + chunk], b[i:i + chunk], rtol=rtol, atol=atol,
                                       msg=lambda m, k=k, i=i: f"{k} (from flat index {i}): {m}")
