"""One configuration's layout, as one value (`Variant`): what distinguishes a configuration
whatever the model, cluster size, batch or link it runs on.

    Variant(strategy="stanza", fc_workers=1)              .label "stanza k=1"   .key "stanza_k1"
    Variant(strategy="ps", ps_servers=1, ps_overlap=True)  .label "ps S=1 overlap"
    v.topology(nodes, global_batch)                        the engine's rank layout (topology.make_topology)

It is validated once, on creation (one-line ValueError, the registry's rule of which option
belongs to which strategy), and passed whole: MeasureSpec.variants() -> RunConfig.of(variant, ...)
-> perf.predict(profile, cluster, variant, ...) / perf.expected_bytes(profile, variant, nodes, ...).
Only a run plan (runs.plan) sets a run's link and D; the Variant holds neither.

Glossary (labels.py): k = FC workers (stanza), S = dedicated parameter-server nodes (ps; 0 = one
shard colocated with every worker), overlap = each gradient bucket pushed as the backward produces
it, share = each FC worker's share of the global batch on the CONV body, M = micro-batches.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from . import checks, registry
from .labels import config_key, config_label
from .labels import run_options
from .topology import make_topology

FIELDS = ("strategy", "fc_workers", "ps_servers", "ps_overlap", "fc_conv_share", "micro_batches")
BOUNDARY_DTYPES = ("fp32", "bf16", "fp16")  # --boundary-dtype (stanza)
GRAD_COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")  # --grad-compression (stanza)
STANZA_DEFAULTS = {"fc_conv_share": 0.0, "micro_batches": 1, "boundary_dtype": "fp32", "grad_compression": "none"}


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def check_strategy_options(strategy: str, values: dict[str, Any], *, defaults: dict[str, Any], spell=None) -> None:
    """One-line ConfigError for an option set away from its default (`defaults`) under a strategy
    it does not belong to (the registry says which; fc_workers 0 counts as unset too). `spell`:
    the CLI's flags by default, `str` for the Python API's names."""
    given = registry.set_options(values, defaults)
    if given.get("fc_workers") == 0:
        del given["fc_workers"]
    registry.check_options(strategy, given, spell=spell or _flag)


def check_stanza_options(strategy: str, *, fc_conv_share: float = 0.0, micro_batches: int = 1,
                         boundary_dtype: str = "fp32", grad_compression: str = "none") -> None:
    """One-line ConfigError unless stanza's options beyond the paper hold valid values and are
    left at their defaults by every other strategy (the training CLI's check; the experiments'
    RunConfig makes the same one)."""
    checks.positive_int("--micro-batches", micro_batches)
    checks.in_interval("--fc-conv-share", fc_conv_share, 0, 1)
    checks.one_of("--boundary-dtype", boundary_dtype, BOUNDARY_DTYPES)
    checks.one_of("--grad-compression", grad_compression, GRAD_COMPRESSIONS)
    check_strategy_options(strategy, {"fc_conv_share": fc_conv_share, "micro_batches": micro_batches,
                                      "boundary_dtype": boundary_dtype, "grad_compression": grad_compression},
                           defaults=STANZA_DEFAULTS)


@dataclasses.dataclass(kw_only=True, frozen=True)
class Variant:
    """A strategy with its layout: everything but the model, N, G and the link that tells one
    configuration from another (its label and key say exactly this)."""

    strategy: str  # ps, ddp or stanza (the registry's compared strategies)
    fc_workers: int = 0  # k (stanza, >= 1), else 0
    ps_servers: int = 0  # ps: dedicated server nodes beside the workers (0: colocated shards)
    ps_overlap: bool = False  # ps: push each gradient bucket as the backward produces it
    fc_conv_share: float = 0.0  # stanza: share of the global batch each FC worker also trains the CONV body on
    micro_batches: int = 1  # stanza: M chunks per CONV worker, exchanged as a pipeline (1: whole batch)

    def __post_init__(self):
        checks.strategies([self.strategy])
        check_stanza_options(self.strategy, fc_conv_share=self.fc_conv_share, micro_batches=self.micro_batches)
        check_strategy_options(self.strategy, {"fc_workers": self.fc_workers, "ps_servers": self.ps_servers,
                                               "ps_overlap": self.ps_overlap}, spell=str,
                               defaults={f.name: f.default for f in dataclasses.fields(self)})
        if registry.owns(self.strategy, "fc_workers"):
            checks.positive_int("fc_workers", self.fc_workers)
        checks.positive_int("ps_servers", self.ps_servers, 0)
        if not isinstance(self.ps_overlap, bool):
            raise ValueError(f"ps_overlap must be true or false, got {self.ps_overlap!r}")
        object.__setattr__(self, "fc_conv_share", float(self.fc_conv_share))

    @property
    def label(self) -> str:
        """labels.config_label: "ddp", "ps S=1 overlap", "stanza k=1 share=0.25 M=2"."""
        return config_label(self.strategy, self.fc_workers, ps_servers=self.ps_servers, ps_overlap=self.ps_overlap,
                            **self.stanza_options)

    @property
    def key(self) -> str:
        """labels.config_key: "ddp", "ps_S1_overlap", "stanza_k1_share0.25_M2" (a JSON key)."""
        return config_key(self.strategy, self.fc_workers, ps_servers=self.ps_servers, ps_overlap=self.ps_overlap,
                          **self.stanza_options)

    @property
    def stanza_options(self) -> dict[str, Any]:
        """Stanza's options beyond the paper (fc_conv_share, micro_batches)."""
        return {"fc_conv_share": self.fc_conv_share, "micro_batches": self.micro_batches}

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> "Variant":
        """The Variant of a run or summary row (a dict with strategy, fc_workers and optionally
        ps_servers, ps_overlap, fc_conv_share, micro_batches; rows written before an option existed
        have it at its default: labels.run_options)."""
        return cls(strategy=row["strategy"], fc_workers=row.get("fc_workers") or 0, **run_options(row))

    def fields(self) -> dict[str, Any]:
        """The fields as keywords (RunConfig takes them flat, so its cache key is what it always was)."""
        return {name: getattr(self, name) for name in FIELDS}

    def model_options(self) -> dict[str, Any]:
        """The keywords perf.predict and perf.expected_bytes take for this layout (their `strategy`
        argument aside): fc_workers None unless stanza, ps_servers, ps_overlap, stanza's options."""
        return {"fc_workers": self.fc_workers or None, "ps_servers": self.ps_servers,
                "ps_overlap": self.ps_overlap, **self.stanza_options}

    def topology(self, nodes: int, global_batch: int):
        """The engine's rank layout on `nodes` nodes in all (dedicated PS servers included, as
        perf.Cluster counts them) with `global_batch` samples per step (topology.make_topology)."""
        return make_topology(self.strategy, nodes, global_batch, self.fc_workers or 1,
                             fc_conv_share=self.fc_conv_share, micro_batches=self.micro_batches,
                             ps_servers=self.ps_servers)


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
