"""What a replayed run's dilation D is chosen from: the engine's own seconds and the model's step
(experiments.plan resolves D and the link rates from them, once per configuration).

    engine_seconds(cfg, compute_only_s) -> the engine's own CPU seconds per step that replay keeps,
        measured: cfg's replay run at D = 1 on loopback, its median step less the model's step
    engine_seconds_arg("auto" | "0.2", known, key, cfg, compute_only_s) -> a benchmark's
        --engine-s: the number given, or engine_seconds measured once per key
    model_prediction(cfg, gbps), model_step_s(cfg, gbps) -> perf.predict (its step) of a replayed
        configuration on its device-table profile
"""
from __future__ import annotations

import dataclasses
import math
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # spec -> plan -> dilation: RunConfigs are only read and replaced here
    from .runconfig import RunConfig

ENGINE_STEPS = 4  # steps of the D = 1 run that measures a configuration's engine seconds (1 warmup)


def engine_seconds(cfg: RunConfig, compute_only_s: float, *, steps: int = ENGINE_STEPS, timeout_s: float = 900) -> float:
    """The engine's own seconds per step of `cfg` (gloo's copies and reductions, Python: what
    replay keeps): its replay run at D = 1 on loopback (cfg.cluster_nodes local processes,
    unshaped), median step less `compute_only_s` (the model's step on a 1000 Gb/s network)."""
    from ..launch import run_job

    if cfg.compute != "replay":
        raise ValueError(f"engine_seconds measures replayed runs, got compute {cfg.compute!r}")
    flags = dataclasses.replace(cfg, steps=steps, warmup=1, dilation=1.0).train_flags()
    flags.pop("timeout_s")  # the CLI's collective timeout stays at its default; run_job's is the job's
    m = run_job(cfg.cluster_nodes, timeout_s=timeout_s, **flags)
    return max(0.0, m["step_time_median_s"] - compute_only_s)


def check_engine_s_arg(value: str) -> str:
    """A benchmark's --engine-s: 'auto' or a finite number >= 0 (one-line ValueError otherwise)."""
    if value == "auto":
        return value
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x >= 0):
        raise ValueError(f"--engine-s must be 'auto' or a number of seconds >= 0, got {value!r}")
    return value


def engine_seconds_arg(value: str, known: dict[str, float], key: str, cfg: RunConfig, compute_only_s: float) -> float:
    """A benchmark's --engine-s for one run: the number given, or ('auto') engine_seconds(cfg,
    compute_only_s), measured once per `key` and kept in `known` (which the benchmark writes out)."""
    if check_engine_s_arg(value) != "auto":
        return float(value)
    if key not in known:
        known[key] = engine_seconds(cfg, compute_only_s)
        print(f"{key}: engine {known[key] * 1e3:.0f} ms per step (loopback, D = 1)", file=sys.stderr, flush=True)
    return known[key]


def model_prediction(cfg: RunConfig, gbps: float):
    """perf.predict of replayed configuration `cfg` on its replay device's profile (perf.device_profile),
    every node (dedicated PS servers included) linked at `gbps` of payload."""
    from ..perf import Cluster, device_profile, named_profile, predict

    profile = named_profile(cfg.model, cfg.image_size, cfg.num_classes)
    batch = cfg.topology().worker_batch(cfg.global_batch)  # per data worker
    dev = device_profile(cfg.replay_device, profile, batch).profile  # as replay.prepare resolves it
    return predict(profile, Cluster(cfg.cluster_nodes, gbps, device=dev), cfg.strategy, cfg.fc_workers or None,
                   cfg.global_batch, with_ranks=False, ps_servers=cfg.ps_servers, ps_overlap=cfg.ps_overlap,
                   **cfg.stanza_options)


def model_step_s(cfg: RunConfig, gbps: float) -> float:
    """model_prediction's step time."""
    return model_prediction(cfg, gbps).iteration_s
