"""How a replayed run's dilation D and link rate are chosen (the benchmarks and notebooks 03-07).

    replay_link(target_gbps, nodes, target_step_s=..., engine_s=..., mtu=...) -> ReplayLink
        D          perf.replay_dilation with the emulator's facts (netem.facts: the fastest link,
                   the aggregate this machine holds), never below min_dilation
        payload    perf.emulated_bandwidth(target, dilation=D): the TCP payload each link carries
        link_mbit  the wire rate the shaper is set to (netem.facts.payload_per_wire_byte)
    shared_replay_link(target_gbps, nodes, needs, ...) -> one ReplayLink for runs side by side:
        D = the largest any of them needs
    engine_seconds(cfg, compute_only_s) -> the engine's own CPU seconds per step that replay keeps,
        measured: cfg's replay run at D = 1 on loopback, its median step less the model's step
    engine_seconds_arg("auto" | "0.2", known, key, cfg, compute_only_s) -> a benchmark's
        --engine-s: the number given, or engine_seconds measured once per key
    config_link(cfg_at, target_gbps, cache, engine=True) -> (ReplayLink, engine seconds) of one
        replayed configuration (the notebooks): replay_link with the engine term, the engine's
        seconds measured once per configuration and kept in the measured-runs cache
"""
from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Iterable
from typing import Any

from .spec import RunConfig

ENGINE_STEPS = 4  # steps of the D = 1 run that measures a configuration's engine seconds (1 warmup)


@dataclasses.dataclass(frozen=True)
class ReplayLink:
    """Where a replayed run's links stand: D, the payload rate they carry, the wire rate shaped."""

    dilation: float  # D: replayed compute waits D x the device's time
    payload_gbps: float  # TCP payload each link carries: target / D
    link_mbit: float  # the shaper's rate (wire Mbit/s, each direction) that carries payload_gbps
    mtu: int  # link MTU the wire rate is for

    @property
    def model_gbps(self) -> float:
        """The bandwidth the performance model is given for this run: the payload rate x D."""
        return self.payload_gbps * self.dilation


def replay_link(target_gbps: float, nodes: int, *, target_step_s: float | None = None, engine_s: float = 0.0,
                mtu: int = 9000, min_dilation: float = 1) -> ReplayLink:
    """D and link rates of a replayed run at `target_gbps` on `nodes` emulated nodes (dedicated
    PS servers counted): the smallest D at which this machine keeps up (perf.replay_dilation;
    `engine_s` > 0 needs `target_step_s`, the model's step on the target), at least min_dilation."""
    from ..netem.facts import MAX_AGGREGATE_MBIT, max_link_mbit, payload_per_wire_byte
    from ..perf import emulated_bandwidth, replay_dilation

    d = replay_dilation(target_gbps, nodes, max_link_mbit=max_link_mbit(mtu), max_aggregate_mbit=MAX_AGGREGATE_MBIT,
                        engine_s=engine_s, target_step_s=target_step_s)
    d = max(d, min_dilation)
    payload = emulated_bandwidth(target_gbps, dilation=d)
    return ReplayLink(dilation=d, payload_gbps=payload, link_mbit=1000 * payload / payload_per_wire_byte(mtu), mtu=mtu)


def shared_replay_link(target_gbps: float, nodes: int, needs: Iterable[tuple[float, float]], *, mtu: int = 9000,
                       min_dilation: float = 1) -> ReplayLink:
    """One ReplayLink for several runs measured side by side at the same D: `needs` holds each
    run's (target_step_s, engine_s); D is the largest replay_link gives any of them."""
    d = max([replay_link(target_gbps, nodes, target_step_s=step, engine_s=eng, mtu=mtu,
                         min_dilation=min_dilation).dilation for step, eng in needs], default=min_dilation)
    return replay_link(target_gbps, nodes, mtu=mtu, min_dilation=d)


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


def model_step_s(cfg: RunConfig, gbps: float) -> float:
    """perf.predict's step time of replayed configuration `cfg` on its replay device's table
    profile, every node (dedicated PS servers included) linked at `gbps` of payload."""
    from ..perf import Cluster, device_profile, named_profile, predict

    profile = named_profile(cfg.model, cfg.image_size, cfg.num_classes)
    batch = cfg.global_batch // (cfg.nodes - (cfg.fc_workers if cfg.strategy == "stanza" else 0))  # per data worker
    dev = device_profile(cfg.replay_device, profile, batch).profile  # as replay.prepare resolves it
    return predict(profile, Cluster(cfg.cluster_nodes, gbps, device=dev), cfg.strategy, cfg.fc_workers or None,
                   cfg.global_batch, with_ranks=False, ps_servers=cfg.ps_servers, ps_overlap=cfg.ps_overlap,
                   **cfg.stanza_options).iteration_s


def config_link(cfg_at: Callable[[float, float], RunConfig], target_gbps: float, cache: Any, *,
                engine: bool = True, min_dilation: float = 1) -> tuple[ReplayLink, float]:
    """D and link rates of one replayed configuration at `target_gbps` (`cfg_at(D, link_mbit)`
    builds its RunConfig), and the engine seconds they allow for: replay_link with the engine
    term, the seconds measured by engine_seconds once per configuration and kept in `cache`
    (experiments.cache.Cache, kind "engine"). engine=False: the links alone decide D (0 s)."""
    base = cfg_at(1.0, 1000.0)
    secs = 0.0
    if engine:
        key = {**base.cache_key(), "engine_steps": ENGINE_STEPS}
        got = cache.get("engine", key)
        if got is None:
            got = engine_seconds(base, model_step_s(base, 1000.0))
            cache.put("engine", key, got)
            print(f"{base.model} N={base.nodes} {base.label}: engine {got * 1e3:.0f} ms per step (loopback, D = 1)",
                  flush=True)
        secs = float(got)
    link = replay_link(target_gbps, base.cluster_nodes, target_step_s=model_step_s(base, target_gbps),
                       engine_s=secs, mtu=base.mtu, min_dilation=min_dilation)
    return link, secs
