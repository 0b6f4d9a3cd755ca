"""One configuration's layout, as one value (`Variant`): a strategy and its options object (the
frozen dataclass in the strategy's folder, `<name>/options.py`), what distinguishes a
configuration whatever the model, cluster size, batch or link it runs on.

    Variant(strategy="stanza", fc_workers=1)              .label "stanza k=1"   .key "stanza_k1"
    Variant(strategy="ps", ps_servers=1, ps_overlap=True)  .label "ps S=1 overlap"
    Variant("stanza", Options(fc_workers=2))              the same value, given its options object (stanza/options.py)
    Variant.parse("ddp", flat)                             at an edge: every option flat (another strategy's only unset)
    v.options.micro_batches                                an option of this strategy
    v.get("ps_servers", 0)                                 an option, or the default given where the strategy has none
    v.topology(nodes, global_batch)                        the engine's rank layout (topology.make_topology)

It is validated once, on creation (one-line ConfigError: the options class's own checks, and the
registry's rule of which option belongs to which strategy), and passed whole: TrainConfig.variant,
MeasureSpec.variants() -> RunConfig.of(variant, ...) -> perf.predict(profile, cluster, variant, ...)
/ perf.expected_bytes(profile, variant, nodes, ...) -> Prediction.variant. Only a run plan
(runs.plan) sets a run's link and D; the Variant holds neither.

Glossary (labels.py): k = FC workers (stanza), S = dedicated parameter-server nodes (ps; 0 = one
shard colocated with every worker), overlap = each gradient bucket pushed as the backward produces
it, share = each FC worker's share of the global batch on the CONV body, M = micro-batches.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from . import registry
from .errors import ConfigError
from .labels import config_key, config_label, run_options
from .strategy_options import StrategyOptions
from .topology import make_topology


@dataclasses.dataclass(frozen=True, init=False)
class Variant:
    """A strategy with its options: everything but the model, N, G and the link that tells one
    configuration from another (its label and key say exactly this)."""

    strategy: str  # a registered strategy
    options: StrategyOptions  # its options object (registry record's options_class)

    def __init__(self, strategy: str, options: StrategyOptions | None = None, *, spell=str, **flat: Any):
        """`options`: the strategy's options object, or its options as keywords (`flat`); an option of
        another strategy is refused unless left unset (None, or how it reads outside its strategy:
        its default, k = 0). `spell` words an option in an error: `str` (the Python API) or a flag."""
        spec = registry.get(strategy)
        cls = spec.options_type()
        owners = registry.option_names()
        unknown = [k for k in flat if k not in owners]
        if unknown:
            raise ConfigError(f"unknown option {unknown[0]!r}; expected one of {', '.join(owners)}")
        own = {k: v for k, v in flat.items() if k in cls.names() and v is not None}
        other = {k: v for k, v in flat.items() if k not in cls.names() and v is not None and v != unset(k)}
        registry.check_options(strategy, other, spell=spell)
        if options is None:
            options = cls(**own)
        elif own or not isinstance(options, cls):
            raise ConfigError(f"the options of {strategy} are one {cls.__name__} object or keywords, not "
                              f"{type(options).__name__}{' and keywords' if own else ''}")
        options.check(spell)
        object.__setattr__(self, "strategy", strategy)
        object.__setattr__(self, "options", options)

    @classmethod
    def parse(cls, strategy: str, flat: dict[str, Any], *, spell=str) -> "Variant":
        """The edge from flat option keywords (the CLI's flags, a stored row, a notebook's
        parameters: every registered option by name) to a Variant: this strategy's own options
        taken, the others' refused unless unset (None, or how they read outside their strategy)."""
        return cls(strategy, spell=spell, **flat)

    def get(self, option: str, default: Any = None) -> Any:
        """This strategy's `option`, or `default` where the strategy has no such option."""
        return getattr(self.options, option) if option in self.options.names() else default

    def __reduce__(self):
        return (_rebuild, (self.strategy, self.options))

    def replace(self, *, spell=str, **changes: Any) -> "Variant":
        """This Variant with some options changed (checked as a new one)."""
        return Variant(self.strategy, spell=spell, **{**self.options.values(), **changes})

    @property
    def spec(self) -> registry.StrategySpec:
        return registry.get(self.strategy)

    @property
    def label(self) -> str:
        """labels.config_label: "ddp", "ps S=1 overlap", "stanza k=1 share=0.25 M=2"."""
        return config_label(self.strategy, **self.options.values())

    @property
    def key(self) -> str:
        """labels.config_key: "ddp", "ps_S1_overlap", "stanza_k1_share0.25_M2" (a JSON key)."""
        return config_key(self.strategy, **self.options.values())

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> "Variant":
        """The Variant of a run or summary row (a dict with strategy, its options, flat; rows written
        before an option existed have it at its default: labels.run_options)."""
        spec = registry.get(row["strategy"])
        opts = spec.options_type()
        flat = {**{k: v for k, v in row.items() if k in opts.names()}, **run_options(row),
                "fc_workers": row.get("fc_workers") or None}
        return cls(row["strategy"], **{k: v for k, v in flat.items() if k in opts.names()})

    def flat(self) -> dict[str, Any]:
        """Every registered option by name: this strategy's values, the others' defaults (a
        metrics JSON's config lists them all, as the training CLI's flags)."""
        out = {}
        for spec in registry.specs():
            out.update(self.options.values() if spec.name == self.strategy else spec.options_type().defaults())
        return out

    def topology(self, nodes: int, global_batch: int):
        """The engine's rank layout on `nodes` nodes in all (dedicated PS servers included, as
        perf.Cluster counts them) with `global_batch` samples per step (topology.make_topology)."""
        return make_topology(self, nodes, global_batch)


class HoldsVariant:
    """A value holding one Variant in its field `variant` (TrainConfig, RunConfig, perf's
    Prediction): `.strategy` reads through it; an option is read on the Variant
    (`cfg.variant.options.micro_batches`, or `cfg.variant.get("ps_servers", 0)`)."""

    @property
    def strategy(self) -> str:
        return self.variant.strategy


def _rebuild(strategy: str, options: StrategyOptions) -> Variant:
    return Variant(strategy, options)


def unset(option: str) -> Any:
    """How `option` reads under a strategy it does not belong to (its owner's options class says:
    its default, k = 0): what a flat row or cache key holds there."""
    return registry.get(registry.option_names()[option]).options_type().unset()[option]


# The benchmarks' named configurations (benchmarks/paper_regime_replay.py, replay_fidelity.py,
# replay_engine.py: each takes those it can run): one table, one shape. Made into Variants when
# asked for (bench_variants), not on import: a Variant reads the registry, whose plug-ins may
# import the engine, which imports this module.
_BENCH = {
    "ps": dict(strategy="ps"), "ps_s1": dict(strategy="ps", ps_servers=1),
    "ps_ov": dict(strategy="ps", ps_overlap=True), "ps_s1_ov": dict(strategy="ps", ps_servers=1, ps_overlap=True),
    "ddp": dict(strategy="ddp"),
    "stanza1": dict(strategy="stanza", fc_workers=1), "stanza2": dict(strategy="stanza", fc_workers=2)}


def bench_variants(names: str | list[str] | None = None, *, among: list[str] | None = None) -> dict[str, Variant]:
    """name -> Variant of the benchmarks' named configurations ("ps", "ps_s1", "ps_ov", "ps_s1_ov",
    "ddp", "stanza1", "stanza2"): all of them (or those `among`), or those `names` lists (a list
    or "a,b,c"), in its order; an unknown name is a one-line ValueError naming the known ones."""
    table = {n: Variant(**kw) for n, kw in _BENCH.items()}
    known = list(table) if among is None else list(among)
    if names is None:
        return {n: table[n] for n in known}
    wanted = [n for n in (names.split(",") if isinstance(names, str) else names) if n]
    if bad := [n for n in wanted if n not in known]:
        raise ValueError(f"unknown configuration(s) {', '.join(bad)}; expected some of {', '.join(known)}")
    return {n: table[n] for n in wanted}
