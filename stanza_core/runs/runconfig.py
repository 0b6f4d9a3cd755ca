"""One configuration at one emulated link rate (`RunConfig`): everything a run depends on,
validated on creation (one-line ValueError), plain data (`to_dict`, `cache_key`) so that it keys
the cache and goes into every results JSON. Its layout is one variant.Variant (`RunConfig.of(variant,
...)`, `.variant`: the strategy and its options), written flat by `to_dict` and `cache_key` as
before the Variant existed (KEY_FIELDS, plus any other option set away from its default), so
that every key made before still matches; `RunConfig(strategy=..., fc_workers=..., ...)` builds
the Variant from flat keywords (a stored run's config reads back so: Variant.parse, the edge). A grid of them is spec.MeasureSpec; the resolved plan of one (links, D, target step) is
plan.RunPlan: only the plan sets link_mbit and dilation (the actual D).

Glossary: a *configuration* is a strategy with its layout (k FC workers, each FC worker's share
of the batch on the CONV body, M micro-batches; S dedicated PS nodes, overlapped push) on N
nodes; a *run* is one configuration trained for a few steps on the emulated cluster at one link
rate.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .. import checks, registry
from ..launch import cli_args
from ..topology import Topology
from ..variant import HoldsVariant, Variant, unset

COMPUTE_MODES = ("real", "replay")
# The flat layout a run's cache key has held since before the Variant (every key made before
# still matches): the strategy and these options, another strategy's at how they read there.
KEY_FIELDS = ("strategy", "fc_workers", "ps_servers", "ps_overlap", "fc_conv_share", "micro_batches")
UNSET_LINK_MBIT = 1000.0  # link_mbit of a RunConfig whose plan has not set its link yet (or that runs unshaped)


@dataclasses.dataclass(kw_only=True, frozen=True)
class RunConfig(HoldsVariant):
    """One configuration at one emulated link rate: everything a run depends on."""

    model: str  # zoo name (stanza_core.MODEL_NAMES)
    image_size: int  # square input side in pixels
    num_classes: int  # outputs of the last FC layer
    nodes: int  # N: data and FC workers (ps: every worker also serves a shard unless ps_servers)
    variant: Variant  # the strategy (ps, ddp, stanza, a plug-in) and its options
    global_batch: int  # G, split over the data workers
    steps: int  # steps, warmup included
    warmup: int = 1  # steps left out of the throughput
    link_mbit: float  # shaped rate of every link, each direction (wire Mbit/s; a RunPlan sets it from its link)
    delay_ms: float = 0.0  # one-way delay on every upload link
    mtu: int = 9000  # link MTU (jumbo frames: ~1 Gbit/s per link on 2 cores)
    boundary: str | None = None  # stanza's split point (None: automatic)
    compute: str = "real"  # real arithmetic, or replayed per-layer waits (replay_device, dilation)
    replay_device: str | None = None  # device profile the replayed compute follows
    dilation: float = 1.0  # D: replayed compute waits D x the device's time
    payload_scale: int = 1  # F: replayed runs send 1/F of each message on links shaped to 1/F (a RunPlan sets it)

    # the fields a run's cache key leaves out at their defaults (keys made before they existed still match)
    _KEY_DEFAULTS = {"fc_conv_share": 0.0, "micro_batches": 1, "payload_scale": 1}

    def __post_init__(self):
        checks.model_fits(self.model, self.image_size)
        for name in ("num_classes", "global_batch", "steps"):
            checks.positive_int(name, getattr(self, name))
        checks.positive_int("nodes", self.nodes, 2)
        if not isinstance(self.variant, Variant):
            raise ValueError(f"variant must be a stanza_core.variant.Variant, got {type(self.variant).__name__}")
        variant = self.variant
        if registry.owns(self.strategy, "fc_workers"):  # k on N nodes (the Variant checks what needs no N)
            checks.fc_workers(variant.options.fc_workers, self.nodes)
        checks.strategies([self.strategy])
        if not variant.get("fc_conv_share"):  # a hybrid share moves samples onto the FC workers: make_topology checks it
            checks.batch_divides(self.global_batch, self.strategy, self.nodes, variant.get("fc_workers", 0))
        if registry.owns(self.strategy, "fc_workers"):  # the engine's own layout check: the share's batches, M
            variant.topology(self.nodes, self.global_batch)
        if not checks._is_int(self.warmup) or not 0 <= self.warmup < self.steps:
            raise ValueError(f"warmup must be in 0..steps-1 = {self.steps - 1}, got {self.warmup!r}")
        checks.positive_floats("link_mbit", [self.link_mbit])
        if not checks._is_int(self.mtu) or not 576 <= self.mtu <= 65535:
            raise ValueError(f"mtu must be an integer in 576..65535, got {self.mtu!r}")
        if not isinstance(self.delay_ms, (int, float)) or self.delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, got {self.delay_ms!r}")
        if self.compute not in COMPUTE_MODES:
            raise ValueError(f"compute must be one of {', '.join(COMPUTE_MODES)}, got {self.compute!r}")
        if self.compute == "replay" and not self.replay_device:
            raise ValueError("compute 'replay' needs a replay_device (a device profile name or a JSON path)")
        checks.positive_floats("dilation", [self.dilation])
        checks.positive_int("payload_scale", self.payload_scale)
        if self.payload_scale != 1 and self.compute != "replay":
            raise ValueError(f"payload_scale {self.payload_scale} needs compute 'replay' (real compute needs every "
                             "value of every message); expected 1")

    @classmethod
    def of(cls, variant: Variant, **rest: Any) -> "RunConfig":
        """The RunConfig of `variant` with everything else (model, nodes, batch, steps, ...) in `rest`."""
        if not isinstance(variant, Variant):
            raise ValueError(f"RunConfig.of needs a Variant, got {type(variant).__name__}")
        return cls(variant=variant, **rest)

    @property
    def label(self) -> str:
        return self.variant.label

    @property
    def key(self) -> str:
        """labels.config_key of the configuration ("stanza_k1")."""
        return self.variant.key

    def layout(self) -> dict[str, Any]:
        """The options of KEY_FIELDS flat, another strategy's at how they read here (unset, k = 0):
        what a run row records beside the strategy."""
        return {k: v for k, v in self.to_dict().items() if k in KEY_FIELDS[1:]}

    @property
    def ps_servers(self) -> int:
        """Dedicated parameter-server nodes of the run (0 where its strategy has none)."""
        return self.variant.get("ps_servers", 0)

    @property
    def cluster_nodes(self) -> int:
        """Nodes of the emulated cluster: the N workers plus any dedicated PS servers."""
        return self.nodes + self.variant.get("ps_servers", 0)

    def topology(self) -> Topology:
        """The rank layout the engine builds for this run (topology.make_topology): the one
        source of its batches per role (runs.plan, dilation)."""
        return self.variant.topology(self.cluster_nodes, self.global_batch)

    def train_flags(self) -> dict[str, Any]:
        """The training CLI's flags for this run as keywords (launch.cli_args, launch.run_job);
        options at their defaults are None, so an engine without an option still runs every
        configuration that does not use it. No --metrics: the caller says where."""
        replay = self.compute != "real"
        options = self.variant.options.given()  # the strategy's options away from their defaults; k always
        if registry.owns(self.strategy, "fc_workers"):
            options["fc_workers"] = self.variant.options.fc_workers
        return dict(strategy=self.strategy, model=self.model, image_size=self.image_size,
                    num_classes=self.num_classes, global_batch=self.global_batch, steps=self.steps,
                    warmup=self.warmup, boundary=self.boundary, **options,
                    compute=self.compute if replay else None, replay_device=self.replay_device if replay else None,
                    dilation=self.dilation if replay else None,
                    payload_scale=self.payload_scale if self.payload_scale > 1 else None,
                    device="cpu", quiet=True, overwrite=True,
                    timeout_s=600)

    def train_args(self, metrics: str, **extra: Any) -> list[str]:
        """The training CLI's arguments for this run (train_flags, writing its metrics to `metrics`);
        `extra`: the CLI's options a run's configuration does not hold (a benchmark's --timeline,
        --bucket-mb, --replay-wait, ...), as launch.cli_args keywords (None: left out)."""
        return cli_args(**self.train_flags(), metrics=metrics, **extra)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the layout flat (KEY_FIELDS, then the strategy's other options away from
        their defaults), then the other fields."""
        rest = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "variant"}
        own = self.variant.options.values()
        layout = {"strategy": self.strategy, **{k: own[k] if k in own else unset(k) for k in KEY_FIELDS[1:]}}
        extra = {k: v for k, v in self.variant.options.given().items() if k not in KEY_FIELDS}
        return {**layout, **extra, **rest}

    def cache_key(self) -> dict[str, Any]:
        """to_dict without the options at the defaults they had before they existed."""
        return {k: v for k, v in self.to_dict().items() if self._KEY_DEFAULTS.get(k, object()) != v}


_dataclass_init = RunConfig.__init__


def _init(self, *, strategy: str | None = None, variant: Variant | None = None, **kw: Any) -> None:
    """RunConfig(strategy=..., <its options>=..., ...) or RunConfig(variant=..., ...): options as
    keywords (a stored run's flat config) go into the Variant, checked there (one-line ValueError)."""
    owners = registry.option_names()
    options = {k: kw.pop(k) for k in list(kw) if k in owners}
    if variant is not None and strategy in (None, variant.strategy):
        variant = variant.replace(**options) if options else variant
    elif strategy is not None:
        variant = Variant.parse(strategy, options)
    _dataclass_init(self, variant=variant, **kw)


_init.__doc__ = RunConfig.__doc__
RunConfig.__init__ = _init
