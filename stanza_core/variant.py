"""One configuration's layout, as one value (`Variant`): a strategy and its options object (the
frozen dataclass in the strategy's folder, `<name>/options.py`), what distinguishes a
configuration whatever the model, cluster size, batch or link it runs on.

    Variant(strategy="stanza", fc_workers=1)              .label "stanza k=1"   .key "stanza_k1"
    Variant(strategy="ps", ps_servers=1, ps_overlap=True)  .label "ps S=1 overlap"
    Variant("stanza", StanzaOptions(fc_workers=2))        the same value, given its options object
    v.options.micro_batches, or v.micro_batches            an option (another strategy's: unset)
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

# The fields a RunConfig's cache key has held since before the Variant: its flat layout.
FIELDS = ("strategy", "fc_workers", "ps_servers", "ps_overlap", "fc_conv_share", "micro_batches")


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


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
        other = {k: v for k, v in flat.items() if k not in cls.names() and v is not None and v != _unset(k)}
        registry.check_options(strategy, other, spell=spell)
        if options is None:
            options = cls(**own)
        elif own or not isinstance(options, cls):
            raise ConfigError(f"the options of {strategy} are one {cls.__name__} object or keywords, not "
                              f"{type(options).__name__}{' and keywords' if own else ''}")
        options.check(spell)
        object.__setattr__(self, "strategy", strategy)
        object.__setattr__(self, "options", options)

    def __getattr__(self, name: str) -> Any:
        """An option by name: this strategy's own, or how another strategy's reads here (unset)."""
        if name.startswith("_") or name in ("strategy", "options"):
            raise AttributeError(name)
        options = self.__dict__.get("options")
        if options is not None and name in options.names():
            return getattr(options, name)
        if name in registry.option_names():
            return _unset(name)
        raise AttributeError(f"{type(self).__name__} has no option or attribute {name!r}")

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

    @property
    def stanza_options(self) -> dict[str, Any]:
        """Stanza's options beyond the paper that a run row records (fc_conv_share, micro_batches)."""
        return {"fc_conv_share": self.fc_conv_share, "micro_batches": self.micro_batches}

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> "Variant":
        """The Variant of a run or summary row (a dict with strategy, its options, flat; rows written
        before an option existed have it at its default: labels.run_options)."""
        spec = registry.get(row["strategy"])
        opts = spec.options_type()
        flat = {**{k: v for k, v in row.items() if k in opts.names()}, **run_options(row),
                "fc_workers": row.get("fc_workers") or None}
        return cls(row["strategy"], **{k: v for k, v in flat.items() if k in opts.names()})

    def fields(self) -> dict[str, Any]:
        """The flat layout a RunConfig's cache key holds (FIELDS): unset where not this strategy's."""
        return {name: self.strategy if name == "strategy" else getattr(self, name) for name in FIELDS}

    def flat(self) -> dict[str, Any]:
        """Every registered option by name: this strategy's values, the others' defaults (a
        metrics JSON's config lists them all, as the training CLI's flags)."""
        out = {}
        for spec in registry.specs():
            out.update(self.options.values() if spec.name == self.strategy else spec.options_type().defaults())
        return out

    def extra_options(self) -> dict[str, Any]:
        """This strategy's options outside FIELDS set away from their defaults (a plug-in's, stanza's
        wire dtypes): what a RunConfig's key adds to the flat layout, so older keys stay as they were."""
        return {k: v for k, v in self.options.given().items() if k not in FIELDS}

    def model_options(self) -> dict[str, Any]:
        """The keywords perf.predict and perf.expected_bytes take for this layout (their `strategy`
        argument aside): fc_workers None unless stanza, ps_servers, ps_overlap, stanza's options."""
        return {"fc_workers": self.fc_workers or None, "ps_servers": self.ps_servers,
                "ps_overlap": self.ps_overlap, **self.stanza_options}

    def topology(self, nodes: int, global_batch: int):
        """The engine's rank layout on `nodes` nodes in all (dedicated PS servers included, as
        perf.Cluster counts them) with `global_batch` samples per step (topology.make_topology)."""
        return make_topology(self.strategy, nodes, global_batch, self.fc_workers or 1, self.ps_shards,
                             fc_conv_share=self.fc_conv_share, micro_batches=self.micro_batches,
                             ps_servers=self.ps_servers)


class HoldsVariant:
    """What a value holding one Variant in its field `variant` (TrainConfig, RunConfig, perf's
    Prediction) reads through it: `.strategy`, and an option by name (`cfg.micro_batches`). An
    option of another strategy reads unset (k = 0), or, with OPTION_DEFAULTS, at its default (as
    the training CLI's flags hold every option)."""

    OPTION_DEFAULTS = False

    @property
    def strategy(self) -> str:
        return self.variant.strategy

    def __getattr__(self, name: str) -> Any:
        variant = self.__dict__.get("variant")
        if name.startswith("_") or variant is None:
            raise AttributeError(name)
        if self.OPTION_DEFAULTS and name in (flat := variant.flat()):
            return flat[name]
        try:
            return getattr(variant, name)
        except AttributeError:
            raise AttributeError(f"{type(self).__name__} has no attribute or option {name!r}") from None


def _rebuild(strategy: str, options: StrategyOptions) -> Variant:
    return Variant(strategy, options)


def _unset(option: str) -> Any:
    """How `option` reads under a strategy it does not belong to (its owner's options class says)."""
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


def model_call(strategy, fc_workers, given: dict[str, Any], defaults: dict[str, Any]):
    """perf.predict / perf.expected_bytes: (strategy name, fc_workers, options) from their
    `strategy` argument, a name or a Variant. With a Variant, fc_workers and the layout options
    must be left at their defaults (one-line ValueError otherwise): the Variant says them."""
    if isinstance(strategy, str):
        return strategy, fc_workers, given
    if not isinstance(strategy, Variant):
        raise ValueError(f"strategy must be a name or a stanza_core.variant.Variant, got {type(strategy).__name__}")
    opts = strategy.model_options()
    clash = [k for k in ("fc_workers", *given) if k in opts and
             (fc_workers if k == "fc_workers" else given[k]) != (None if k == "fc_workers" else defaults[k])]
    if clash:
        raise ValueError(f"{clash[0]} given beside a Variant ({strategy.label}): the Variant sets it")
    k = opts.pop("fc_workers")
    return strategy.strategy, k, {**given, **{o: v for o, v in opts.items() if o in given}}


def given_variant(strategy: "str | Variant", **options: Any) -> Variant:
    """perf.predict / perf.expected_bytes: the Variant they model. A name: its options from the
    keywords (those of other strategies and None ignored; call it once the model's own checks have
    passed). A Variant: itself, with any keyword set away from its default merged in where the
    Variant leaves that option at its default (a one-line ValueError where both set it)."""
    if not isinstance(strategy, Variant):
        cls = registry.get(strategy).options_type()
        return Variant(strategy, **{k: v for k, v in options.items() if k in cls.names() and v is not None})
    if unknown := [k for k in options if k not in registry.option_names()]:
        raise ConfigError(f"unknown option {unknown[0]!r}; expected one of {', '.join(registry.option_names())}")
    defaults, own = strategy.options.defaults(), strategy.options.values()
    changes = {k: v for k, v in options.items() if k in own and v is not None and v != defaults[k]}
    if clash := [k for k, v in changes.items() if own[k] != defaults[k] and own[k] != v]:
        raise ValueError(f"{clash[0]} given beside a Variant ({strategy.label}): the Variant sets it")
    return strategy.replace(**changes) if changes else strategy


def model_args(strategy: "str | Variant", fc_workers, flat: dict[str, Any], defaults: dict[str, Any],
               options: dict[str, Any]):
    """perf.predict / perf.expected_bytes: their arguments resolved, as (name, k, flat options, the
    Variant builder). `strategy` a name: `flat` (their keyword options) as given. A Variant: its own
    options, with those given only as keywords merged in (given_variant), and the layout keywords
    left at `defaults` (model_call). The builder makes the Variant they model once their own checks
    have passed (k resolved, plug-in `options` checked by their class)."""
    if isinstance(strategy, Variant):
        strategy = given_variant(strategy, ps_shards=flat.get("ps_shards"), boundary_dtype=flat.get("boundary_dtype"),
                                 grad_compression=flat.get("grad_compression"), **options)
        flat = {**flat, "boundary_dtype": strategy.boundary_dtype, "grad_compression": strategy.grad_compression,
                "ps_shards": strategy.ps_shards or None}
    given = strategy
    layout = {k: flat[k] for k in defaults}
    name, k, layout = model_call(strategy, fc_workers, layout, defaults)
    flat = {**flat, **layout}

    def variant(resolved_k) -> Variant:
        if isinstance(given, Variant):
            return given
        return given_variant(given, **{**flat, "fc_workers": resolved_k}, **options)
    return name, k, flat, variant
