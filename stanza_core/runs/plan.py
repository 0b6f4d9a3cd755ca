"""A run plan: one configuration resolved once, then passed (never worked out again downstream).

    replayed_plan(cfg, target_gbps, cache, ...)    -> RunPlan   replayed compute: D by perf's rule
    cell_plans(cfgs, target_gbps, engine_s)        -> plans     replayed runs side by side at one D
    measured_plan(cfg, target_gbps, t_target, t_here) -> RunPlan  real compute: the link mapped
    shaped_plan(cfg, wire_mbit)                    -> RunPlan   a wire rate given directly
    stored_plan(cfg, row)                          -> RunPlan   a plan as the store recorded it, run again
    scaled_twin(plan, F)                           -> RunPlan   the same run at the same D with payload scale F

These are the only ways to a RunPlan (each ends in the private `_plan`): no caller hands a plan
its own D, link, target step or engine seconds.

A RunPlan carries, each computed here and only here:
    config          the RunConfig the engine runs (its link_mbit is the wire rate, its D the plan's)
    topology        the rank layout (topology.make_topology), hence
    global_batch, batch_per_worker, fc_batch   samples per step, per CONV worker, per hybrid FC worker
    link            D, the TCP payload rate each link carries and the wire rate the shaper is set to
    target_gbps     the bandwidth of the target cluster this run stands for (None: a rate given)
    target_step_s   the performance model's step on the target cluster (replayed runs: what D keeps
                    the engine seconds within 5 % of), None for real compute
    engine_s        the engine's own seconds per step measured at D = 1 (replayed runs), else None
    engine_measured when and from which commit engine_s was measured (stored in every replayed run)
    label, key      labels.config_label / config_key
    cache_key()     what the measured-runs cache keys the run by

The link rule (`link_at`): the payload rate is perf.emulated_bandwidth (target / D for replayed
compute, target x t_target / t_here for real compute); the wire rate carrying it is payload /
(F netem.facts.payload_per_wire_byte(mtu)) (the MTU's framing, stated once in netem/facts.py; F
the payload scale: a replayed run sends 1/F of every message, comm/process_group.py). The
performance model is given the payload rate (x D for replayed runs: `Link.model_gbps`).

Payload scale rule (`payload_scale_of`, perf.replay_payload_scale): F brings the links' term of D
to 1 (at most netem.facts.MAX_PAYLOAD_SCALE), and at most the step's byte-weighted 10th-percentile
message over netem.facts.MIN_MESSAGE_BYTES once the engine run has measured the messages.

Dilation rule (`replay_link`): D = max(min_dilation, perf.replay_dilation(target, N, engine_s,
target_step_s, ps_servers)) with the emulator's facts (netem.facts: the fastest link, the
aggregate this machine holds); `replayed_plan` takes the floor and whether the engine term applies
as one value (dilation_rule.DilationRule), measures a configuration's engine seconds once (a replay
run at D = 1 on loopback, `engine_seconds`) and keeps them in the runs cache.

What D is chosen from, here too: `engine_seconds(cfg, compute_only_s)` (the engine's own CPU
seconds per step that replay keeps: cfg's replay run at D = 1 on loopback, its median step less
the model's step), `engine_seconds_arg` (a benchmark's --engine-s: a number, or measured once per
key), `model_prediction` / `model_step_s` (perf.predict of a replayed configuration on its
device-table profile).
"""
from __future__ import annotations

import dataclasses
import math
import time
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .. import registry
from ..topology import Topology

SETUP_S_PER_NODE = 10.0  # seconds per emulated node to start a run (namespaces, a Python + torch per rank): rough
RUN_TIMEOUT_FLOOR_S = 1800.0  # the shortest wall-clock limit of one run
RUN_TIMEOUT_FACTOR = 3.0  # a run's limit: this many times what its steps should take

from .dilation_rule import DilationRule
from .runconfig import UNSET_LINK_MBIT
from ..launch import run_job
from ..netem.facts import (MAX_AGGREGATE_MBIT, MAX_PAYLOAD_SCALE, MAX_PAYLOAD_SCALE_FAN_IN, MIN_LINK_MBIT,
                           MIN_MESSAGE_BYTES, max_link_mbit, payload_gbps, payload_per_wire_byte)

if TYPE_CHECKING:  # the plan only reads and replaces RunConfigs
    from .runconfig import RunConfig


COMPUTE_ONLY_GBPS = 1000.0  # a network this fast leaves a modelled step its compute alone
ENGINE_STEPS = 4  # steps of the D = 1 run that measures a configuration's engine seconds (1 warmup)


def engine_run(cfg: RunConfig, compute_only_s: float, *, steps: int = ENGINE_STEPS,
               timeout_s: float = 900) -> dict[str, float | None]:
    """The engine's own seconds per step of `cfg` at its payload scale (gloo's copies and
    reductions, Python: what replay keeps): its replay run at D = 1 on loopback
    (cfg.cluster_nodes local processes, unshaped), median step less `compute_only_s` (the model's
    step on a 1000 Gb/s network); and the step's byte-weighted 10th-percentile message (logical
    bytes, engine.metrics.message_sizes); when and from which commit they were measured.
    {"seconds", "message_p10_bytes", "measured_at", "git_commit", "git_dirty"}."""
    if cfg.compute != "replay":
        raise ValueError(f"engine_seconds measures replayed runs, got compute {cfg.compute!r}")
    flags = dataclasses.replace(cfg, steps=steps, warmup=1, dilation=1.0).train_flags()
    flags.pop("timeout_s")  # the CLI's collective timeout stays at its default; run_job's is the job's
    at = time.strftime("%Y-%m-%d %H:%M:%S")
    m = run_job(cfg.cluster_nodes, timeout_s=timeout_s, **flags)
    return {"seconds": max(0.0, m["step_time_median_s"] - compute_only_s),
            "message_p10_bytes": (m.get("messages") or {}).get("p10_bytes"),
            "measured_at": at, "git_commit": m["config"].get("git_commit"), "git_dirty": m["config"].get("git_dirty")}


def engine_seconds(cfg: RunConfig, compute_only_s: float, *, steps: int = ENGINE_STEPS, timeout_s: float = 900) -> float:
    """engine_run's seconds."""
    return engine_run(cfg, compute_only_s, steps=steps, timeout_s=timeout_s)["seconds"]


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


def engine_seconds_arg(value: str, known: dict[str, float], key: str, cfg: RunConfig,
                       compute_only_s: float | None = None) -> float:
    """A benchmark's --engine-s for one run: the number given, or ('auto') engine_seconds(cfg,
    compute_only_s: by default the model's step on a COMPUTE_ONLY_GBPS network), measured once per
    `key` and kept in `known` (which the benchmark writes out)."""
    if check_engine_s_arg(value) != "auto":
        return float(value)
    if key not in known:
        if compute_only_s is None:
            compute_only_s = model_step_s(cfg, COMPUTE_ONLY_GBPS)
        known[key] = engine_seconds(cfg, compute_only_s)
        print(f"{key}: engine {known[key] * 1e3:.0f} ms per step (loopback, D = 1)", file=sys.stderr, flush=True)
    return known[key]


def model_prediction(cfg: RunConfig, gbps: float):
    """perf.predict of replayed configuration `cfg` on its replay device's profile (perf.device_profile),
    every node (dedicated PS servers included) linked at `gbps` of payload."""
    from ..perf import Cluster, device_profile, named_profile, predict  # perf: ~125 more modules (tabulate, torch's flop counter); keeps `stanza-reproduce --help` light

    profile = named_profile(cfg.model, cfg.image_size, cfg.num_classes)
    batch = cfg.topology().worker_batch(cfg.global_batch)  # per data worker
    dev = device_profile(cfg.replay_device, profile, batch).profile  # as replay.prepare resolves it
    return predict(profile, Cluster(cfg.cluster_nodes, gbps, device=dev), cfg.variant, global_batch=cfg.global_batch,
                   with_ranks=False)


def model_step_s(cfg: RunConfig, gbps: float) -> float:
    """model_prediction's step time."""
    return model_prediction(cfg, gbps).iteration_s


@dataclasses.dataclass(frozen=True)
class Link:
    """Where a run's links stand: D, the payload rate they carry, the wire rate shaped."""

    dilation: float  # D: replayed compute waits D x the device's time (1 for real compute)
    payload_gbps: float  # TCP payload each link carries, each direction (logical: as an unscaled run)
    wire_mbit: float  # the shaper's rate (wire Mbit/s, each direction): payload_gbps / F, framed
    mtu: int  # link MTU the wire rate is for
    payload_scale: int = 1  # F: each message carries 1/F of its elements on a link shaped to 1/F

    @property
    def model_gbps(self) -> float:
        """The bandwidth the performance model is given for this run: the payload rate x D."""
        return self.payload_gbps * self.dilation


def link_at(target_gbps: float, mtu: int, *, dilation: float | None = None, t_target: float | None = None,
            t_here: float | None = None, payload_scale: int = 1) -> Link:
    """The one link rule: payload = perf.emulated_bandwidth(target, ...) (target / D, or target x
    t_target / t_here for real compute), wire = payload / (F payload_per_wire_byte(mtu)), F the
    payload scale (replayed runs; 1: every message whole)."""
    from ..perf import emulated_bandwidth  # perf: ~125 more modules (tabulate, torch's flop counter); keeps `stanza-reproduce --help` light

    if dilation is not None:
        payload = emulated_bandwidth(target_gbps, dilation=dilation)
    else:
        payload = emulated_bandwidth(target_gbps, t_target, t_here)
    return Link(dilation=float(dilation or 1.0), payload_gbps=payload,
                wire_mbit=1000 * payload / (payload_scale * payload_per_wire_byte(mtu)), mtu=mtu,
                payload_scale=payload_scale)


def shaped_link(wire_mbit: float, mtu: int) -> Link:
    """The Link of a wire rate given directly (no target): the payload it carries."""
    return Link(dilation=1.0, payload_gbps=payload_gbps(wire_mbit, mtu), wire_mbit=float(wire_mbit), mtu=mtu)


def payload_scale_of(target_gbps: float, nodes: int, *, mtu: int = 9000, ps_servers: int = 0,
                     message_bytes: float | None = None, fan_in: bool = False) -> int:
    """F of a replayed run (perf.replay_payload_scale with the emulator's facts): the links' term
    of D brought to 1, at most netem.facts.MAX_PAYLOAD_SCALE (MAX_PAYLOAD_SCALE_FAN_IN for a
    strategy whose ranks send to one at once, registry.StrategySpec.fan_in), and with
    `message_bytes` (the step's byte-weighted 10th-percentile message, when measured) at most
    message_bytes / MIN_MESSAGE_BYTES."""
    from ..perf import replay_payload_scale  # perf: ~125 more modules (tabulate, torch's flop counter); keeps `stanza-reproduce --help` light

    return replay_payload_scale(target_gbps, nodes, max_link_mbit=max_link_mbit(mtu),
                                max_aggregate_mbit=MAX_AGGREGATE_MBIT, ps_servers=ps_servers,
                                max_scale=MAX_PAYLOAD_SCALE_FAN_IN if fan_in else MAX_PAYLOAD_SCALE,
                                message_bytes=message_bytes,
                                min_message_bytes=MIN_MESSAGE_BYTES)


def config_payload_scale(cfg: "RunConfig", target_gbps: float, message_bytes: float | None = None) -> int:
    """payload_scale_of for a configuration: its nodes, MTU, dedicated servers and its strategy's
    fan-in (registry.StrategySpec.fan_in)."""
    return payload_scale_of(target_gbps, cfg.cluster_nodes, mtu=cfg.mtu, ps_servers=cfg.ps_servers,
                            message_bytes=message_bytes, fan_in=registry.get(cfg.strategy).fan_in)


def replay_link(target_gbps: float, nodes: int, *, target_step_s: float | None = None, engine_s: float = 0.0,
                mtu: int = 9000, min_dilation: float = 1, ps_servers: int = 0, payload_scale: int = 1) -> Link:
    """D and link rates of a replayed run at `target_gbps` on `nodes` emulated nodes (the
    `ps_servers` dedicated PS servers counted) with payload scale F (`payload_scale`): the
    smallest D at which this machine keeps up (perf.replay_dilation; `engine_s` > 0, the
    engine's seconds at that F, needs `target_step_s`, the model's step on the target), at least
    min_dilation."""
    from ..perf import replay_dilation  # perf: ~125 more modules (tabulate, torch's flop counter); keeps `stanza-reproduce --help` light

    d = replay_dilation(target_gbps, nodes, max_link_mbit=max_link_mbit(mtu), max_aggregate_mbit=MAX_AGGREGATE_MBIT,
                        engine_s=engine_s, target_step_s=target_step_s, ps_servers=ps_servers,
                        payload_scale=payload_scale)
    return link_at(target_gbps, mtu, dilation=max(d, min_dilation), payload_scale=payload_scale)


def shared_replay_link(target_gbps: float, nodes: int, needs: Iterable[tuple[float, float]], *,
                       mtu: int = 9000) -> Link:
    """One Link for several runs measured side by side at the same D: `needs` holds each run's
    (target_step_s, engine_s); D is the largest replay_link gives any of them."""
    d = max([replay_link(target_gbps, nodes, target_step_s=step, engine_s=eng, mtu=mtu).dilation
             for step, eng in needs], default=1)
    return replay_link(target_gbps, nodes, mtu=mtu, min_dilation=d)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunPlan:
    """One configuration resolved once (the module docstring); built only by the planner functions."""

    config: RunConfig  # what the engine runs: link_mbit = link.wire_mbit, dilation = link.dilation
    topology: Topology  # the rank layout of config
    link: Link  # D, payload and wire rates
    target_gbps: float | None  # the target cluster's bandwidth (None: a wire rate given directly)
    target_step_s: float | None  # the model's step on the target cluster (replayed runs), else None
    engine_s: float | None  # the engine's own seconds per step at D = 1 (replayed runs, when measured)
    engine_measured: dict | None = None  # when and from which commit engine_s was measured (at, commit, dirty)
    batch_per_worker: int  # samples per CONV (data) worker
    fc_batch: int  # samples each hybrid FC worker also runs the CONV body on (0: none)
    label: str  # "stanza k=1" (labels.config_label)
    key: str  # "stanza_k1" (labels.config_key)

    @property
    def global_batch(self) -> int:
        return self.config.global_batch

    @property
    def dilation(self) -> float:
        return self.link.dilation

    def expected_s(self) -> float | None:
        """Seconds the run should take (modelled): SETUP_S_PER_NODE per emulated node, then its
        steps (warm-up included) of D x the model's step on the target. None without a target step."""
        if self.target_step_s is None:
            return None
        return SETUP_S_PER_NODE * self.config.cluster_nodes + self.config.steps * self.dilation * self.target_step_s

    def timeout_s(self) -> float:
        """The run's wall-clock limit: RUN_TIMEOUT_FACTOR x expected_s, at least RUN_TIMEOUT_FLOOR_S.
        A fixed 1800 s cut off long replayed runs that were going well (VGG-16 stanza k=1 on 16 nodes
        at D = 1600: modelled 25 min, it ran past 30), while a hung peer must still end the run."""
        expected = self.expected_s()
        return max(RUN_TIMEOUT_FLOOR_S, RUN_TIMEOUT_FACTOR * expected) if expected else RUN_TIMEOUT_FLOOR_S

    def cache_key(self, **extra: Any) -> dict[str, Any]:
        """What the measured-runs cache keys this run by (the configuration, the rates, `extra`)."""
        return {**self.config.cache_key(), **extra}

    def row(self) -> dict[str, Any]:
        """The plan's values every run row carries beside what was measured."""
        return {"label": self.label, "target_gbps": self.target_gbps, "link_mbit": self.link.wire_mbit,
                "payload_gbps": self.link.payload_gbps, "dilation": self.link.dilation,
                "payload_scale": self.link.payload_scale,
                "target_step_s": self.target_step_s, "engine_s": self.engine_s,
                "engine_measured": self.engine_measured,
                "global_batch": self.global_batch, "batch_per_worker": self.batch_per_worker,
                "fc_batch": self.fc_batch}


def _plan(cfg: RunConfig, link: Link, *, target_gbps: float | None = None, target_step_s: float | None = None,
             engine_s: float | None = None, engine_measured: dict | None = None) -> RunPlan:
    """The plan of configuration `cfg` on `link`: cfg at the link's wire rate and D, its layout."""
    if link.mtu != cfg.mtu:
        raise ValueError(f"a link for MTU {link.mtu} given to a run at MTU {cfg.mtu}")
    replay = cfg.compute == "replay"
    if not replay and (link.dilation != 1 or link.payload_scale != 1):
        raise ValueError(f"D = {link.dilation:g}, F = {link.payload_scale} given to a real-compute run (only "
                         "replayed compute dilates and scales payloads)")
    cfg = dataclasses.replace(cfg, link_mbit=round(link.wire_mbit, 6), dilation=link.dilation if replay else 1.0,
                              payload_scale=link.payload_scale)
    topo = cfg.topology()
    return RunPlan(config=cfg, topology=topo, link=link, target_gbps=target_gbps, target_step_s=target_step_s,
                   engine_s=engine_s, engine_measured=engine_measured,
                   batch_per_worker=topo.worker_batch(cfg.global_batch), fc_batch=topo.fc_batch,
                   label=cfg.label, key=cfg.key)


def stored_plan(cfg: RunConfig, row: dict) -> RunPlan:
    """The plan a stored run recorded (its plan row, RunPlan.to_dict: D, payload and wire rates,
    target, target step, engine seconds), for `cfg`: that configuration run again on exactly its
    stored plan (with another step count, say), whatever today's rule would choose."""
    link = Link(dilation=float(row["dilation"]), payload_gbps=float(row["payload_gbps"]),
                wire_mbit=float(row["link_mbit"]), mtu=cfg.mtu, payload_scale=int(row.get("payload_scale", 1)))
    return _plan(cfg, link, target_gbps=row.get("target_gbps"), target_step_s=row.get("target_step_s"),
                 engine_s=row.get("engine_s"), engine_measured=row.get("engine_measured"))


def shaped_plan(cfg: RunConfig, wire_mbit: float) -> RunPlan:
    """A real-compute run at a wire rate given directly."""
    return _plan(cfg, shaped_link(wire_mbit, cfg.mtu))


def measured_plan(cfg: RunConfig, target_gbps: float, t_target: float, t_here: float) -> RunPlan:
    """A real-compute run standing for `target_gbps`: the link rule with one data worker's step on
    the target device (t_target) and here under the run's contention (t_here, a timing round)."""
    return _plan(cfg, link_at(target_gbps, cfg.mtu, t_target=t_target, t_here=t_here), target_gbps=target_gbps)


def replayed_plan(cfg: RunConfig, target_gbps: float, cache: Any, rule: DilationRule = DilationRule(), *,
                  engine_s: float | None = None, payload_scale: int | None = None) -> RunPlan:
    """A replayed run at `target_gbps`: F by payload_scale_of and D by replay_link, at least
    rule.floor, with the engine term where rule.engine holds (dilation_rule.DilationRule; by
    default floor 1, engine term on). With the engine term (no `engine_s` given) the configuration's
    engine run at the F its links ask for is measured once (engine_run, kept in `cache`, an
    runs.cache.Cache, kind "engine"); its messages (logical sizes: the same at any F) may lower F
    (payload_scale_of's message bound). Where the engine term raises D so far that the scaled
    wire rate target / (D F) falls under netem.facts.MIN_LINK_MBIT (the slowest rate the shaper
    is known to hold), F is lowered to keep it there. A lower F is measured again (its engine
    seconds give D). Without that run (rule.engine false, or `engine_s` given) the configuration's
    messages are unknown and its messages travel whole (F = 1; D by the links and `engine_s`).
    `payload_scale` given: that F (1: every message whole; the grid's listing passes the links'
    F to estimate), D by the same rule."""
    if cfg.compute != "replay":
        raise ValueError(f"replayed_plan needs a replayed configuration, got compute {cfg.compute!r}")
    base = dataclasses.replace(cfg, link_mbit=UNSET_LINK_MBIT, dilation=1.0, payload_scale=1)
    step = model_step_s(base, target_gbps)
    measure = rule.engine and engine_s is None
    if payload_scale is not None:
        scale = payload_scale
    elif measure:  # the engine run measures the messages that bound F below
        scale = config_payload_scale(base, target_gbps)
    else:  # messages unknown: none is made smaller than it is
        scale = 1

    def link_at_scale(f: int) -> tuple[Link, float | None, float | None, dict | None]:
        secs, messages, when = engine_s, None, None
        if measure:
            rec = _engine_record(dataclasses.replace(base, payload_scale=f), cache)
            secs, messages = rec["seconds"], rec.get("message_p10_bytes")
            when = {"at": rec.get("measured_at"), "commit": rec.get("git_commit"), "dirty": rec.get("git_dirty"),
                    "payload_scale": f}
        link = replay_link(target_gbps, base.cluster_nodes, target_step_s=step, engine_s=secs or 0.0, mtu=base.mtu,
                           min_dilation=rule.floor, ps_servers=base.ps_servers, payload_scale=f)
        return link, secs, messages, when

    link, secs, messages, when = link_at_scale(scale)
    if payload_scale is None:
        for _ in range(3):  # each bound only lowers F; a lower F's own D is measured again
            bound = config_payload_scale(base, target_gbps, messages)
            if link.wire_mbit < MIN_LINK_MBIT:
                bound = min(bound, max(1, math.floor(scale * link.wire_mbit / MIN_LINK_MBIT)))
            if bound >= scale:
                break
            scale = bound
            link, secs, messages, when = link_at_scale(scale)
    return _plan(cfg, link, target_gbps=target_gbps, target_step_s=step, engine_s=secs, engine_measured=when)


def scaled_twin(p: RunPlan, payload_scale: int) -> RunPlan:
    """The run of plan `p` at the same D and the same emulated (payload) rate with payload scale F:
    1/F of every message on links shaped to 1/F (benchmarks/payload_scaling.py: scaled against
    unscaled at one D)."""
    link = link_at(p.target_gbps, p.link.mtu, dilation=p.dilation, payload_scale=payload_scale)
    return _plan(p.config, link, target_gbps=p.target_gbps, target_step_s=p.target_step_s, engine_s=p.engine_s,
                 engine_measured=p.engine_measured)


def _engine_record(cfg: RunConfig, cache: Any) -> dict:
    """engine_run of `cfg` (at its payload scale), measured once and kept in `cache` (kind "engine";
    an entry made before message sizes were recorded holds the seconds alone)."""
    key = {**cfg.cache_key(), "engine_steps": ENGINE_STEPS}
    rec = cache.get("engine", key)
    if rec is None:
        rec = engine_run(cfg, model_step_s(cfg, COMPUTE_ONLY_GBPS))
        cache.put("engine", key, rec)
        scale = f", F={cfg.payload_scale}" if cfg.payload_scale > 1 else ""
        print(f"{cfg.model} N={cfg.nodes} {cfg.label}{scale}: engine {rec['seconds'] * 1e3:.0f} ms per step "
              f"(loopback, D = 1)", flush=True)
    return rec if isinstance(rec, dict) else {"seconds": float(rec)}


def cell_plans(cfgs: dict[str, RunConfig], target_gbps: float, engine_s: dict[str, float]) -> dict[str, RunPlan]:
    """Replayed runs measured side by side at one D (a benchmark's cell: the same cluster, the same
    target): each configuration's target step (model_step_s), one link whose D is the largest any of
    them needs with its engine seconds `engine_s[name]` (shared_replay_link), each plan on it."""
    if not cfgs:
        return {}
    nodes = {cfg.cluster_nodes for cfg in cfgs.values()}
    mtus = {cfg.mtu for cfg in cfgs.values()}
    if len(nodes) > 1 or len(mtus) > 1:
        raise ValueError(f"a cell's runs share one cluster: got {sorted(nodes)} nodes, MTU {sorted(mtus)}")
    if any(cfg.compute != "replay" for cfg in cfgs.values()):
        raise ValueError("cell_plans needs replayed configurations")
    steps = {name: model_step_s(cfg, target_gbps) for name, cfg in cfgs.items()}
    link = shared_replay_link(target_gbps, nodes.pop(), [(steps[name], engine_s[name]) for name in cfgs],
                              mtu=mtus.pop())
    return {name: _plan(cfg, link, target_gbps=target_gbps, target_step_s=steps[name], engine_s=engine_s[name])
            for name, cfg in cfgs.items()}
