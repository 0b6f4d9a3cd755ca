"""The strategies, one record each: the only place their names, options and facts are listed.

Each built-in strategy is a folder, stanza_core/strategies/<name>/: its `__init__.py` registers
its record, `engine.py` is its engine, `model.py` its performance model. The registry reads the
folders (every subpackage of stanza_core/strategies) when it is first asked; a plug-in is the
same folder outside the package, named in STANZA_PLUGINS.

A record (`StrategySpec`) says what a strategy is to every part of the workbench:

  name, summary     the `--strategy` value and one line on what its step does
  roles             the topology roles its ranks take (topology.py's role names)
  options           the configuration options that belong to it alone (its options class's
                    field names, as the training CLI's flags spell them: fc_workers is
                    --fc-workers); any other strategy given one of them is refused, in one line
  options_class     "module:Class" of its options (a strategy_options.StrategyOptions: one
                    frozen dataclass with the options' defaults, help, checks and label parts);
                    empty: it has no option
  color             its colour in every figure
  engine            "module:Class" of its training engine (a strategies.base.Strategy)
  model             "module" of its performance model (below)
  compared          False for the single-process oracle (what the others are compared with)
  baseline          one of the strategies stanza is compared against (the paper's ps and ddp)
  bucketed          whether it exchanges gradient buckets (--bucket-mb): True, False, or the name
                    of the option that turns them on
  simplicity        the optimiser's tie-break: on equal throughput the lower wins
  layout            "module:Class" of its rank layout (a topology.Layout: its ranks' roles, groups
                    and layout rules); empty: plain data parallelism, every rank a worker
  split             whether its engine trains the CONV body and the FC head apart (the engine
                    splits the model once for it, split.split_model)
  exchange          how its ranks exchange gradients, as the figures draw it: "allreduce" (a ring
                    among the workers), "parameter_server" (push to and pull from shards),
                    "layer_separation" (CONV and FC workers), or "" (drawn as its ranks' bytes alone)
  bare_pieces       "module:function" giving the model pieces a rank of it runs, bare (callables),
                    for the engine's operator-call budget (opcount.bare_pieces); empty: none
  order             where lists and figures place it (lower first; equal: in registration order)

A performance model module provides these functions; perf reads them through the registry alone:

  rank_rows(case: TrafficCase, ranks) -> [{rank, role, sent: {category: bytes}, recv: {...}}]
        what each rank in `ranks` sends and receives per step (the engine's counters equal it)
  summary(case: TrafficCase) -> {bytes_per_step, max_node_sent, max_node_recv}
        the same in O(1) (sweeps over thousands of nodes); called for N >= 2 only
  step_time(case: StepCase) -> (step seconds, the step with free communication, terms)
        one BSP step on the cluster's links (perf/model.py's module docstring has the rules)
  overlap(case: StepCase) -> str
        what the model lets overlap, in words
  candidates(space: Space) -> [Prediction]
        the configurations of this strategy the node-assignment optimiser ranks (perf/optimize.py),
        each predicted by `space.predict`

A case's `variant` is the configuration modelled (variant.Variant: the strategy and its options
object) and its `topo` the layout resolved on the cluster (k, S, dedicated servers, a hybrid FC
worker's samples), so a model reads its own options as `case.variant.options.<name>`. A model
module builds on perf/blocks.py and perf/cluster.py, never on perf's front end (which loads it).

The folders, the engine class and the model module are imported when first asked for, so this
module stays at the bottom of the import graph: the CLI, the config checks, the performance
model, the optimiser, the figures and the widgets read it, and it reads none of them.

Adding a strategy: a folder with its record, its engine and its model (in stanza_core/strategies/
for a built-in one; anywhere on the path for a plug-in: the modules named in STANZA_PLUGINS,
comma-separated, are imported when the registry is first read, in every process, torchrun's
ranks included). docs/architecture.md, "Adding a strategy", walks through one.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .errors import ConfigError
from .strategy_options import StrategyOptions

PLUGINS_ENV = "STANZA_PLUGINS"


@dataclasses.dataclass(frozen=True)
class StrategySpec:
    name: str
    summary: str
    roles: tuple[str, ...]
    color: str
    engine: str
    model: str
    options: tuple[str, ...] = ()
    compared: bool = True
    simplicity: int = 0
    baseline: bool = False
    bucketed: bool | str = False
    # Whether many ranks send to one at once (a parameter server's pushes, a Stanza FC worker's
    # gather): a replayed run's payload scale is then bounded (netem.facts.MAX_PAYLOAD_SCALE_FAN_IN).
    # True unless a strategy says otherwise: a plug-in strategy gets the safe bound.
    fan_in: bool = True
    layout: str = ""
    split: bool = False
    exchange: str = ""
    options_class: str = ""
    bare_pieces: str = ""
    order: int = 100

    def engine_class(self) -> type:
        return load(self.engine)

    def model_module(self):
        return importlib.import_module(self.model)

    def options_type(self) -> type:
        """Its options class (strategy_options.StrategyOptions itself when it has none); its
        fields must be the record's `options`."""
        if (cls := _DERIVED.get(("options_type", self.name))) is not None:
            return cls
        cls = load(self.options_class) if self.options_class else StrategyOptions
        if cls.names() != self.options:
            raise ValueError(f"strategy {self.name}: its record lists options {self.options} but its options "
                             f"class {cls.__name__} has {cls.names()}")
        _DERIVED[("options_type", self.name)] = cls
        return cls


EXCHANGES = ("allreduce", "parameter_server", "layer_separation", "")  # StrategySpec.exchange's values
RESERVED_OPTIONS = ("strategy", "options", "variant", "spell")  # names a Variant and the configs use themselves
_REGISTRY: dict[str, StrategySpec] = {}
_DERIVED: dict[Any, Any] = {}  # what is read from the records often (options), cleared when they change


def load(path: str) -> Any:
    """What a record's "module:name" names (its engine class, layout, label parts, ...), imported
    when first asked for."""
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)
_plugins_loaded = False
_builtins_loaded = False
BUILTINS = "stanza_core.strategies"  # the package whose subpackages are the built-in strategies


def register(spec: StrategySpec) -> StrategySpec:
    """Add a strategy; a second record under a taken name is refused."""
    if not isinstance(spec, StrategySpec):
        raise TypeError(f"register takes a StrategySpec, got {type(spec).__name__}")
    if spec.exchange not in EXCHANGES:
        raise ValueError(f"exchange {spec.exchange!r} of {spec.name}; expected one of {EXCHANGES}")
    _load_builtins()  # a plug-in's name is checked against the built-in ones
    if spec.name in _REGISTRY:
        raise ValueError(f"a strategy named {spec.name!r} is registered already")
    if reserved := [o for o in spec.options if o in RESERVED_OPTIONS]:
        raise ValueError(f"option {reserved[0]!r} of {spec.name}: the name is taken by the configuration itself "
                         f"({', '.join(RESERVED_OPTIONS)})")
    taken = {o: s.name for s in _REGISTRY.values() for o in s.options}
    clash = [o for o in spec.options if o in taken]
    if clash:
        raise ValueError(f"option {clash[0]!r} of {spec.name} belongs to {taken[clash[0]]} already")
    _REGISTRY[spec.name] = spec
    _DERIVED.clear()
    return spec


def unregister(name: str) -> None:
    """Remove a strategy (a plug-in that a test or a notebook registered)."""
    _REGISTRY.pop(name, None)
    _DERIVED.clear()


@contextmanager
def registered(spec: StrategySpec) -> Iterator[StrategySpec]:
    """`spec` registered for the duration of a with-block (tests, notebooks that try one out)."""
    register(spec)
    try:
        yield spec
    finally:
        unregister(spec.name)


def _load_builtins() -> None:
    """Import every folder of stanza_core/strategies (each registers its record). The folders are
    found on disk, so that reading the registry imports no engine."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "strategies")
    for info in sorted(pkgutil.iter_modules([folder]), key=lambda m: m.name):
        if info.ispkg:
            importlib.import_module(f"{BUILTINS}.{info.name}")


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"{PLUGINS_ENV} names {module!r}, which does not import: {e}") from None


def specs() -> tuple[StrategySpec, ...]:
    """Every record, built-in and plug-in, in `order` (equal orders: in registration order)."""
    _load_builtins()
    _load_plugins()
    return tuple(sorted(_REGISTRY.values(), key=lambda s: s.order))


def names() -> tuple[str, ...]:
    """Every strategy the engine runs, in `order`."""
    return tuple(s.name for s in specs())


def compared() -> tuple[str, ...]:
    """The strategies an experiment measures and compares (all but the single-process oracle)."""
    return tuple(s.name for s in specs() if s.compared)


def oracle() -> str:
    """The single-process oracle every strategy is compared with (the record with compared=False)."""
    return next(s.name for s in specs() if not s.compared)


def owns(strategy: str, option: str) -> bool:
    """Whether `option` is one of `strategy`'s own (its record's options): what a layout, a label or
    a check of that option applies to (k: the strategies with FC workers)."""
    return option in get(strategy).options


def baselines() -> tuple[str, ...]:
    """The strategies stanza's speedups are measured against (speedup_vs_<name> in the results)."""
    return tuple(s.name for s in specs() if s.baseline)


def in_words(names: tuple[str, ...] | list[str]) -> str:
    """Names as a sentence lists them: "ps, ddp and stanza" (help texts)."""
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else list(names))


def get(name: str) -> StrategySpec:
    """The record of `name`; a one-line ConfigError for a name nobody registered."""
    _load_builtins()
    _load_plugins()
    spec = _REGISTRY.get(name)
    if spec is None:
        raise ConfigError(f"unknown strategy {name!r}; expected one of {', '.join(names())}")
    return spec


def colors() -> dict[str, str]:
    return {s.name: s.color for s in specs()}


def option_names() -> dict[str, str]:
    """Every strategy's options: option name -> the strategy it belongs to, in `order`."""
    if (names := _DERIVED.get("option_names")) is None:
        names = _DERIVED["option_names"] = {o: s.name for s in specs() for o in s.options}
    return dict(names)


def option_owner(option: str) -> str | None:
    """The strategy an option belongs to alone, or None for an option every strategy takes."""
    return next((s.name for s in specs() if option in s.options), None)


def check_options(strategy: str, given: Mapping[str, Any], *, spell=str) -> None:
    """The one statement of "this option belongs to that strategy only": `given` maps the
    options that were set (those left at their defaults are not in it) to their values; the
    first that belongs to another strategy gets a one-line ConfigError. `spell` words a name:
    the CLI's "--ps-shards 2 applies to --strategy ps only, not ddp" (spell: the flag of a
    field), the Python API's "ps_shards 2 applies to ps only, not ddp" (spell: str)."""
    get(strategy)
    for option, value in given.items():
        owner = option_owner(option)
        if owner is not None and owner != strategy:
            shown = "" if isinstance(value, bool) else f" {value}"
            which = owner if spell is str else f"{spell('strategy')} {owner}"
            raise ConfigError(f"{spell(option)}{shown} applies to {which} only, not {strategy}")


def set_options(values: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of `values` that differ from `defaults` (what check_options takes)."""
    return {k: v for k, v in values.items() if v != defaults.get(k)}
