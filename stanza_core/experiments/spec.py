"""What a measurement is: one configuration (`RunConfig`) and a grid of them (`MeasureSpec`),
both validated on creation (one-line ValueError), both plain data (`to_dict`) so that they key
the cache and go into every results JSON.

Glossary: a *configuration* is a strategy with its layout (k FC workers, each FC worker's share
of the batch on the CONV body, M micro-batches; S dedicated PS nodes, overlapped push) on N
nodes; a *run* is one configuration trained for a few steps on the emulated cluster at one link
rate.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..config import check_stanza_options, check_strategy_options
from ..labels import config_label
from ..launch import cli_args
from ..netem.facts import max_link_mbit
from ..perf import check_device
from ..topology import Topology, global_batch_for, make_topology
from .. import checks
from . import plan

COMPUTE_MODES = ("real", "replay")


@dataclasses.dataclass(kw_only=True, frozen=True)
class RunConfig:
    """One configuration at one emulated link rate: everything a run depends on."""

    model: str  # zoo name (stanza_core.MODEL_NAMES)
    image_size: int  # square input side in pixels
    num_classes: int  # outputs of the last FC layer
    nodes: int  # N: data and FC workers (ps: every worker also serves a shard unless ps_servers)
    strategy: str  # ps, ddp or stanza
    fc_workers: int = 0  # k (stanza), else 0
    global_batch: int  # G, split over the data workers
    steps: int  # steps, warmup included
    warmup: int = 1  # steps left out of the throughput
    link_mbit: float  # shaped rate of every link, each direction (wire Mbit/s; a RunPlan sets it from its link)
    delay_ms: float = 0.0  # one-way delay on every upload link
    mtu: int = 9000  # link MTU (jumbo frames: ~1 Gbit/s per link on 2 cores)
    boundary: str | None = None  # stanza's split point (None: automatic)
    ps_servers: int = 0  # ps: dedicated server nodes beside the N workers (0: colocated shards)
    ps_overlap: bool = False  # ps: push each gradient bucket as the backward produces it
    compute: str = "real"  # real arithmetic, or replayed per-layer waits (replay_device, dilation)
    replay_device: str | None = None  # device profile the replayed compute follows
    dilation: float = 1.0  # D: replayed compute waits D x the device's time
    fc_conv_share: float = 0.0  # stanza: share of the global batch each FC worker also trains the CONV body on
    micro_batches: int = 1  # stanza: M chunks per CONV worker, exchanged as a pipeline (1: whole batch)

    # the fields a run's cache key leaves out at their defaults (keys made before they existed still match)
    _KEY_DEFAULTS = {"fc_conv_share": 0.0, "micro_batches": 1}

    def __post_init__(self):
        checks.model_fits(self.model, self.image_size)
        for name in ("num_classes", "global_batch", "steps"):
            checks.positive_int(name, getattr(self, name))
        checks.positive_int("nodes", self.nodes, 2)
        checks.strategies([self.strategy])
        check_stanza_options(self.strategy, fc_conv_share=self.fc_conv_share, micro_batches=self.micro_batches)
        check_strategy_options(self.strategy, {"fc_workers": self.fc_workers, "ps_servers": self.ps_servers,
                                               "ps_overlap": self.ps_overlap}, spell=str,
                               defaults={f.name: f.default for f in dataclasses.fields(self)})
        if self.strategy == "stanza":
            checks.fc_workers(self.fc_workers, self.nodes)
        object.__setattr__(self, "fc_conv_share", float(self.fc_conv_share))
        if not self.fc_conv_share:  # a hybrid share moves samples onto the FC workers: make_topology checks it
            checks.batch_divides(self.global_batch, self.strategy, self.nodes, self.fc_workers)
        if self.strategy == "stanza":  # the engine's own layout check: the share's batches, M per worker batch
            make_topology("stanza", self.nodes, self.global_batch, self.fc_workers,
                          fc_conv_share=self.fc_conv_share, micro_batches=self.micro_batches)
        if not checks._is_int(self.warmup) or not 0 <= self.warmup < self.steps:
            raise ValueError(f"warmup must be in 0..steps-1 = {self.steps - 1}, got {self.warmup!r}")
        checks.positive_floats("link_mbit", [self.link_mbit])
        if not checks._is_int(self.mtu) or not 576 <= self.mtu <= 65535:
            raise ValueError(f"mtu must be an integer in 576..65535, got {self.mtu!r}")
        if not isinstance(self.delay_ms, (int, float)) or self.delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, got {self.delay_ms!r}")
        checks.positive_int("ps_servers", self.ps_servers, 0)
        if self.compute not in COMPUTE_MODES:
            raise ValueError(f"compute must be one of {', '.join(COMPUTE_MODES)}, got {self.compute!r}")
        if self.compute == "replay" and not self.replay_device:
            raise ValueError("compute 'replay' needs a replay_device (a device profile name or a JSON path)")
        checks.positive_floats("dilation", [self.dilation])

    @property
    def label(self) -> str:
        return config_label(self.strategy, self.fc_workers, ps_servers=self.ps_servers, ps_overlap=self.ps_overlap,
                            **self.stanza_options)

    @property
    def stanza_options(self) -> dict[str, Any]:
        """Stanza's options beyond the paper as perf.predict / perf.expected_bytes take them."""
        return {"fc_conv_share": self.fc_conv_share, "micro_batches": self.micro_batches}

    @property
    def cluster_nodes(self) -> int:
        """Nodes of the emulated cluster: the N workers plus any dedicated PS servers."""
        return self.nodes + self.ps_servers

    def topology(self) -> Topology:
        """The rank layout the engine builds for this run (topology.make_topology): the one
        source of its batches per role (experiments.plan, dilation)."""
        return make_topology(self.strategy, self.cluster_nodes, self.global_batch, self.fc_workers or 1,
                             fc_conv_share=self.fc_conv_share, micro_batches=self.micro_batches,
                             ps_servers=self.ps_servers)

    def train_flags(self) -> dict[str, Any]:
        """The training CLI's flags for this run as keywords (launch.cli_args, launch.run_job);
        options at their defaults are None, so an engine without an option still runs every
        configuration that does not use it. No --metrics: the caller says where."""
        replay = self.compute != "real"
        return dict(strategy=self.strategy, model=self.model, image_size=self.image_size,
                    num_classes=self.num_classes, global_batch=self.global_batch, steps=self.steps,
                    warmup=self.warmup, fc_workers=self.fc_workers or None, boundary=self.boundary,
                    ps_servers=self.ps_servers or None, ps_overlap=self.ps_overlap,
                    fc_conv_share=self.fc_conv_share or None,
                    micro_batches=self.micro_batches if self.micro_batches > 1 else None,
                    compute=self.compute if replay else None, replay_device=self.replay_device if replay else None,
                    dilation=self.dilation if replay else None, device="cpu", quiet=True, overwrite=True,
                    timeout_s=600)

    def train_args(self, metrics: str) -> list[str]:
        """The training CLI's arguments for this run (train_flags, writing its metrics to `metrics`)."""
        return cli_args(**self.train_flags(), metrics=metrics)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def cache_key(self) -> dict[str, Any]:
        """to_dict without the options at the defaults they had before they existed."""
        return {k: v for k, v in self.to_dict().items() if self._KEY_DEFAULTS.get(k, object()) != v}


@dataclasses.dataclass(kw_only=True)
class MeasureSpec:
    """A grid of runs: every configuration at every bandwidth, `repeats` times (interleaved)."""

    model: str  # zoo name (stanza_core.MODEL_NAMES)
    image_size: int  # square input side in pixels
    num_classes: int  # outputs of the last FC layer
    nodes: int  # emulated nodes, one process each
    strategies: list[str]  # among ps, ddp, stanza
    fc_workers: list[int]  # stanza's k values, each in 1..nodes // 2
    global_batch: int = 0  # G, divisible by every configuration's data workers ...
    batch_per_worker: int = 0  # ... or (replay only) samples per data worker: G = b x data workers per configuration
    steps: int  # steps per run, warmup included
    warmup: int = 1  # steps left out of the throughput
    target_gbps: list[float] | None = None  # target bandwidths (mapped) ...
    link_mbit: list[float] | None = None  # ... or emulated link rates directly (exactly one of the two)
    target_device: str = "v100"  # the device the target bandwidths refer to (perf device table)
    repeats: int = 1  # runs per configuration and bandwidth (interleaved)
    delay_ms: float = 0.0  # one-way delay added on every upload link
    mtu: int = 9000  # link MTU (the bench's default: jumbo frames)
    # real compute only: a target whose wire rate maps above this is listed as modelled only, not
    # run (None: netem's limit; the bench passes inf). Replayed runs never need it: their D is
    # chosen so that every link fits the emulator (experiments.plan.replay_link).
    max_link_mbit: float | None = None
    timing_reps: int = 5  # repetitions per timing round
    boundary: str | None = None  # stanza's split point (None: automatic)
    compute: str = "real"  # real arithmetic, or "replay": per-layer waits of dilation x replay_device's times
    replay_device: str | None = None  # replay: the device profile the compute follows (perf device table)
    dilation: float = 1.0  # replay: the smallest D (each configuration's own from experiments.plan.replay_link)
    engine: bool = False  # replay: raise each configuration's D for its engine seconds (measured once, cached)
    ps_servers: list[int] = dataclasses.field(default_factory=lambda: [0])  # ps deployments: S extra server nodes (0: colocated)
    ps_overlap: list[bool] = dataclasses.field(default_factory=lambda: [False])  # ps: without / with the overlapped push

    def __post_init__(self):
        checks.model_fits(self.model, self.image_size)
        self.ps_servers = [self.ps_servers] if isinstance(self.ps_servers, int) else list(self.ps_servers)
        self.ps_overlap = [self.ps_overlap] if isinstance(self.ps_overlap, bool) else list(self.ps_overlap)
        for srv in self.ps_servers:
            checks.positive_int("ps_servers", srv, 0)
        if not self.ps_servers or not self.ps_overlap or any(not isinstance(o, bool) for o in self.ps_overlap):
            raise ValueError(f"ps_servers and ps_overlap need one value or more (ints >= 0, bools), got "
                             f"{self.ps_servers!r}, {self.ps_overlap!r}")
        if self.compute not in COMPUTE_MODES:
            raise ValueError(f"compute must be one of {', '.join(COMPUTE_MODES)}, got {self.compute!r}")
        if self.compute == "replay":
            check_device(self.replay_device, "replay_device")
            checks.positive_floats("dilation", [self.dilation])
            if self.target_gbps is None:
                raise ValueError("replayed compute needs target_gbps (a target maps to the link rate target / D)")
        if (self.global_batch == 0) == (self.batch_per_worker == 0):
            raise ValueError("give the batch as global_batch or as batch_per_worker (exactly one)")
        if self.batch_per_worker and self.compute != "replay":
            raise ValueError("batch_per_worker needs compute='replay' (real-compute runs share one global batch)")
        checks.positive_int("global_batch" if self.global_batch else "batch_per_worker",
                            self.global_batch or self.batch_per_worker)
        for name in ("num_classes", "steps", "repeats", "timing_reps"):
            checks.positive_int(name, getattr(self, name))
        if not checks._is_int(self.nodes) or self.nodes < 2:
            raise ValueError(f"nodes must be >= 2 for a distributed run, got {self.nodes!r}")
        self.strategies = checks.strategies(self.strategies)
        self.fc_workers = [self.fc_workers] if isinstance(self.fc_workers, int) else list(self.fc_workers)
        if "stanza" in self.strategies:
            for k in self.fc_workers:
                checks.fc_workers(k, self.nodes)
        if not checks._is_int(self.warmup) or not 0 <= self.warmup < self.steps:
            raise ValueError(f"warmup must be in 0..steps-1 = {self.steps - 1}, got {self.warmup!r}")
        if (self.target_gbps is None) == (self.link_mbit is None):
            raise ValueError("give the bandwidth as target_gbps or as link_mbit (exactly one)")
        if self.target_gbps is not None:
            self.target_gbps = checks.positive_floats("target_gbps", self.target_gbps)
        if self.link_mbit is not None:
            self.link_mbit = checks.positive_floats("link_mbit", self.link_mbit)
        check_device(self.target_device, "target_device")
        if not checks._is_int(self.mtu) or not 576 <= self.mtu <= 65535:
            raise ValueError(f"mtu must be an integer in 576..65535, got {self.mtu!r}")
        if self.max_link_mbit is not None and self.compute == "replay":
            raise ValueError("max_link_mbit applies to real compute only (a replayed run's D makes its links fit)")
        if self.max_link_mbit is None:
            self.max_link_mbit = max_link_mbit(self.mtu)
        if self.delay_ms < 0 or not self.max_link_mbit > 0:
            raise ValueError(f"delay_ms must be >= 0 and max_link_mbit > 0, got {self.delay_ms}, {self.max_link_mbit}")
        if not isinstance(self.engine, bool) or (self.engine and self.compute != "replay"):
            raise ValueError(f"engine must be true or false, and true only with compute='replay'; got {self.engine!r}")
        for s, k in self.configs():
            checks.batch_divides(self.global_batch_of(s, k), s, self.nodes, k)

    def configs(self) -> list[tuple[str, int]]:
        return [(s, k) for s in self.strategies for k in (self.fc_workers if s == "stanza" else [0])]

    def variants(self) -> list[tuple[str, int, int, bool]]:
        """(strategy, k, S, overlap) of every configuration: ps once per deployment asked for."""
        return [(s, k, srv, ov) for s, k in self.configs()
                for srv, ov in ([(a, b) for a in self.ps_servers for b in self.ps_overlap] if s == "ps" else [(0, False)])]

    def plans(self, cache: Any = None, *, t_here: float | None = None, t_target: float | None = None) -> list[plan.RunPlan]:
        """The RunPlan (experiments.plan) of every configuration at every bandwidth of this grid:
        replayed compute at each configuration's own D (plan.replayed_plan, engine seconds from
        `cache` when self.engine); real compute at each target by the link rule with one data
        worker's step here and on the target device (`t_here`, `t_target`), or at each link_mbit."""
        def at(cfg: RunConfig, point: float):
            if self.replayed:
                return plan.replayed_plan(cfg, point, cache, engine=self.engine, min_dilation=self.dilation)
            if self.target_gbps is not None:
                return plan.measured_plan(cfg, point, t_target, t_here)
            return plan.shaped_plan(cfg, point)

        cfgs = [self.run_config(s, k, 1000.0, srv, ov) for s, k, srv, ov in self.variants()]
        return [at(cfg, point) for point in (self.target_gbps or self.link_mbit) for cfg in cfgs]

    def run_config(self, strategy: str, fc_workers: int, link_mbit: float, ps_servers: int = 0,
                   ps_overlap: bool = False) -> RunConfig:
        """The RunConfig of one configuration of this grid at one link rate (a plan sets the rate)."""
        return RunConfig(model=self.model, image_size=self.image_size, num_classes=self.num_classes,
                         nodes=self.nodes, strategy=strategy, fc_workers=fc_workers,
                         global_batch=self.global_batch_of(strategy, fc_workers),
                         steps=self.steps, warmup=self.warmup, link_mbit=round(link_mbit, 6),
                         delay_ms=self.delay_ms, mtu=self.mtu, boundary=self.boundary if strategy == "stanza" else None,
                         ps_servers=ps_servers, ps_overlap=ps_overlap,
                         compute=self.compute, replay_device=self.replay_device if self.compute == "replay" else None,
                         dilation=self.dilation if self.compute == "replay" else 1.0)

    def global_batch_of(self, strategy: str, fc_workers: int) -> int:
        """G of one configuration: the spec's, or batch_per_worker x its data workers (topology)."""
        if self.global_batch:
            return self.global_batch
        return global_batch_for(strategy, self.nodes, fc_workers, self.batch_per_worker)

    @property
    def replayed(self) -> bool:
        return self.compute == "replay"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
