"""What a measurement is: a grid of configurations (`MeasureSpec`: every configuration at every
bandwidth, `repeats` times), validated on creation (one-line ValueError), plain data (`to_dict`)
so that it keys the cache and goes into every results JSON. One configuration is
runconfig.RunConfig, its layout a variant.Variant (`MeasureSpec.variants`);
`MeasureSpec.plans` resolves each into a plan.RunPlan.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any

from ..netem.facts import max_link_mbit
from ..perf import check_device
from ..topology import global_batch_for
from .. import checks, registry
from . import plan
from .dilation_rule import LINKS_ONLY, DilationRule
from .runconfig import COMPUTE_MODES, UNSET_LINK_MBIT, RunConfig
from ..variant import Variant

@dataclasses.dataclass(kw_only=True)
class MeasureSpec:
    """A grid of runs: every configuration at every bandwidth, `repeats` times (interleaved)."""

    model: str  # zoo name (stanza_core.MODEL_NAMES)
    image_size: int  # square input side in pixels
    num_classes: int  # outputs of the last FC layer
    nodes: int  # emulated nodes, one process each
    strategies: list[str] = dataclasses.field(default_factory=list)  # among ps, ddp, stanza (or: configurations)
    fc_workers: list[int] = dataclasses.field(default_factory=lambda: [1])  # stanza's k values, each in 1..nodes // 2
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
    # chosen so that every link fits the emulator (runs.plan.replay_link).
    max_link_mbit: float | None = None
    timing_reps: int = 5  # repetitions per timing round
    boundary: str | None = None  # stanza's split point (None: automatic)
    compute: str = "real"  # real arithmetic, or "replay": per-layer waits of D x replay_device's times (D: the plan's)
    replay_device: str | None = None  # replay: the device profile the compute follows (perf device table)
    # replay: the smallest D and whether the engine's seconds raise it (each configuration's own D from runs.plan)
    dilation_rule: DilationRule = LINKS_ONLY
    ps_servers: list[int] = dataclasses.field(default_factory=lambda: [0])  # ps deployments: S extra server nodes (0: colocated)
    ps_overlap: list[bool] = dataclasses.field(default_factory=lambda: [False])  # ps: without / with the overlapped push
    # the configurations themselves, each a Variant with any options of its strategy (instead of the
    # grid strategies x fc_workers x ps_servers x ps_overlap; None: that grid)
    configurations: list[Variant] | None = None

    def __post_init__(self):
        checks.model_fits(self.model, self.image_size)
        if self.configurations is not None:
            self._take_configurations()
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
        if any(registry.owns(s, "fc_workers") for s in self.strategies):
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
        if not isinstance(self.dilation_rule, DilationRule):
            raise ValueError(f"dilation_rule must be a runs.dilation_rule.DilationRule, got {self.dilation_rule!r}")
        if self.dilation_rule.engine and self.compute != "replay":
            raise ValueError("the engine term of D (dilation_rule.engine) needs compute='replay'")
        for s, k in self.configs():
            checks.batch_divides(self.global_batch_of(Variant.parse(s, {"fc_workers": k or None})), s, self.nodes, k)

    def _take_configurations(self) -> None:
        """Given configurations: Variants, distinct; the strategies and k values are theirs."""
        vs = self.configurations
        if not isinstance(vs, (list, tuple)) or not vs or any(not isinstance(v, Variant) for v in vs):
            raise ValueError(f"configurations must be a non-empty list of stanza_core.variant.Variant, got {vs!r}")
        if len(set(vs)) != len(vs):
            raise ValueError(f"configurations lists one twice: {', '.join(v.label for v in vs)}")
        if self.strategies or self.fc_workers != [1] or self.ps_servers != [0] or self.ps_overlap != [False]:
            raise ValueError("give the configurations or the grid (strategies, fc_workers, ps_servers, ps_overlap), "
                             "not both")
        self.configurations = list(vs)
        self.strategies = list(dict.fromkeys(v.strategy for v in vs))
        self.fc_workers = sorted({v.options.fc_workers for v in vs if registry.owns(v.strategy, "fc_workers")}) or [1]
        self.ps_servers = sorted({v.get("ps_servers", 0) for v in vs}) or [0]

    def configs(self) -> list[tuple[str, int]]:
        if self.configurations is not None:
            return list(dict.fromkeys((v.strategy, v.get("fc_workers", 0)) for v in self.configurations))
        return [(s, k) for s in self.strategies for k in (self.fc_workers if registry.owns(s, "fc_workers") else [0])]

    def variants(self) -> list[Variant]:
        """The Variant of every configuration: those given, or the grid's, ps once per deployment
        (S, overlap) asked for."""
        if self.configurations is not None:
            return list(self.configurations)
        return [Variant(strategy=s, fc_workers=k, ps_servers=srv, ps_overlap=ov) for s, k in self.configs()
                for srv, ov in ([(a, b) for a in self.ps_servers for b in self.ps_overlap]
                                if registry.owns(s, "ps_servers") else [(0, False)])]

    def plans(self, cache: Any = None, *, t_here: float | None = None, t_target: float | None = None) -> list[plan.RunPlan]:
        """The RunPlan (runs.plan) of every configuration at every bandwidth of this grid:
        replayed compute at each configuration's own D (plan.replayed_plan by self.dilation_rule,
        engine seconds from `cache`); real compute at each target by the link rule with one data
        worker's step here and on the target device (`t_here`, `t_target`), or at each link_mbit."""
        def at(cfg: RunConfig, point: float):
            if self.replayed:
                return plan.replayed_plan(cfg, point, cache, self.dilation_rule)
            if self.target_gbps is not None:
                return plan.measured_plan(cfg, point, t_target, t_here)
            return plan.shaped_plan(cfg, point)

        cfgs = [self.run_config(v) for v in self.variants()]
        return [at(cfg, point) for point in (self.target_gbps or self.link_mbit) for cfg in cfgs]

    def run_config(self, variant: Variant, link_mbit: float = UNSET_LINK_MBIT) -> RunConfig:
        """The RunConfig of one configuration of this grid (its Variant); its link rate and D are
        placeholders until a plan sets them (the planner, runs.plan)."""
        s = variant.strategy
        return RunConfig.of(variant, model=self.model, image_size=self.image_size, num_classes=self.num_classes,
                            nodes=self.nodes, global_batch=self.global_batch_of(variant),
                            steps=self.steps, warmup=self.warmup, link_mbit=round(link_mbit, 6),
                            delay_ms=self.delay_ms, mtu=self.mtu,
                            boundary=self.boundary if registry.get(s).split else None,
                            compute=self.compute,
                            replay_device=self.replay_device if self.compute == "replay" else None)

    def global_batch_of(self, variant: Variant) -> int:
        """G of one configuration: the spec's, or batch_per_worker x its data workers (topology)."""
        if self.global_batch:
            return self.global_batch
        return global_batch_for(variant, self.nodes, self.batch_per_worker)

    @property
    def replayed(self) -> bool:
        return self.compute == "replay"

    def to_dict(self) -> dict[str, Any]:
        """Plain data (results JSONs, bench JSONs read back): every field, the dilation rule as its
        flat min_dilation and engine in its place, as before the rule was one value."""
        d = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}
        given = d.pop("configurations")
        out = {k: v for name, value in d.items()
               for k, v in (self.dilation_rule.to_dict().items() if name == "dilation_rule" else [(name, value)])}
        if given is not None:  # each as a run's config holds it: the strategy and its options, flat
            out["configurations"] = [{"strategy": v.strategy, **v.options.values()} for v in given]
        return out
