"""Parameter checks shared by the training config, perf, the explorer, every experiment and the
bench: one-line ConfigErrors (ValueErrors) saying what was wrong and what was expected, raised
before anything runs. Lists accept a single value or a comma-separated string (as `papermill -p`
passes them).

    positive_int("nodes", 0)              -> nodes must be a positive integer, got 0
    positive_int("steps", 1, 2)           -> steps must be an integer >= 2, got 1
    number("--lr", 0.0, above=0)          -> --lr must be > 0, got 0.0   (and: must be a finite number)
    in_interval("--momentum", 1.0, 0, 1)  -> --momentum must be in [0, 1), got 1.0
    one_of("device", "tpu", ("cpu",))     -> unknown device 'tpu'; expected one of cpu
"""
from __future__ import annotations

import math
from collections.abc import Iterable

from . import registry
from .errors import ConfigError
from .models import MIN_IMAGE_SIZE, MODEL_NAMES, known_model
from .topology import Topology, fc_worker_choices


def _items(values) -> list:
    if isinstance(values, str):
        return [v.strip() for v in values.split(",") if v.strip()]
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        return [values]
    return list(values) if isinstance(values, Iterable) else [values]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def positive_int(name: str, value, low: int = 1, *, what: str = "") -> int:
    """An integer >= low (`what` names the bound: "the data workers")."""
    if not _is_int(value) or value < low:
        bound = "a positive integer" if low == 1 and not what else f"an integer >= {low}" + (f" ({what})" if what else "")
        raise ConfigError(f"{name} must be {bound}, got {value!r}")
    return value


def number(name: str, value, *, above: float | None = None, at_least: float | None = None) -> float:
    """A finite number (not a bool), > above and >= at_least where given."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    if above is not None and not value > above:
        raise ConfigError(f"{name} must be > {above:g}, got {value!r}")
    if at_least is not None and value < at_least:
        raise ConfigError(f"{name} must be >= {at_least:g}, got {value!r}")
    return value


def in_interval(name: str, value, low: float, high: float) -> float:
    """A number in [low, high)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value < high:
        raise ConfigError(f"{name} must be in [{low:g}, {high:g}), got {value!r}")
    return value


def one_of(name: str, value, choices: Iterable):
    """One of `choices` (a name of a table, a strategy, a dtype ...)."""
    choices = list(choices)
    if value not in choices:
        raise ConfigError(f"unknown {name} {value!r}; expected one of {', '.join(map(str, choices))}")
    return value


def int_list(name: str, values, low: int = 1, *, unique: bool = False) -> list[int]:
    """A non-empty list of integers >= low (sorted and deduplicated unless `unique` demands that
    no value repeats, in which case the order is kept)."""
    vals = _items(values)
    try:
        vals = [int(v) if isinstance(v, str) else v for v in vals]
    except ValueError:
        raise ConfigError(f"{name} must be a non-empty list of integers >= {low}, got {values!r}") from None
    if not vals or any(not _is_int(v) or v < low for v in vals):
        raise ConfigError(f"{name} must be a non-empty list of integers >= {low}, got {values!r}")
    if unique:
        if len(set(vals)) != len(vals):
            raise ConfigError(f"{name} lists a value twice: {vals}")
        return vals
    return sorted(set(vals))


def positive_floats(name: str, values) -> list[float]:
    """A non-empty list of positive numbers, in the order given."""
    vals = _items(values)
    try:
        vals = [float(v) if isinstance(v, str) else v for v in vals]
    except ValueError:
        raise ConfigError(f"{name} must be a non-empty list of positive numbers, got {values!r}") from None
    if not vals or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in vals):
        raise ConfigError(f"{name} must be a non-empty list of positive numbers, got {values!r}")
    return [float(v) for v in vals]


def model_names(values, image_size: int | None = None, *, name: str = "models") -> list[str]:
    """Zoo names (each once), each able to take `image_size` when given."""
    names = _items(values)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{name} must be a non-empty list of names, got {values!r}")
    for n in names:
        model_fits(n, image_size)
    if len(set(names)) != len(names):
        raise ConfigError(f"{name} lists a name twice: {names}")
    return names


def model_fits(model: str, image_size: int | None, *, name: str = "image_size") -> str:
    if not known_model(model):
        raise ConfigError(f"unknown model {model!r}; expected one of: {', '.join(MODEL_NAMES)} or package.module:factory")
    if image_size is not None:
        positive_int(name, image_size)
        if image_size < MIN_IMAGE_SIZE.get(model, 1):
            raise ConfigError(f"{model} needs {name} >= {MIN_IMAGE_SIZE[model]}, got {image_size}")
    return model


def strategies(values, allowed: tuple[str, ...] | None = None) -> list[str]:
    """Distinct strategy names, each one of `allowed` (default: the registry's compared ones)."""
    allowed = registry.compared() if allowed is None else allowed
    names = _items(values)
    bad = [s for s in names if s not in allowed]
    if bad or not names:
        raise ConfigError(f"unknown strategy {bad[0] if bad else None!r}; expected {', '.join(allowed)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"strategies lists a name twice: {names}")
    return names


def fc_workers(k, nodes: int, *, name: str = "fc_workers") -> int:
    """k FC workers on `nodes` ranks: one of topology.fc_worker_choices (k <= N - k)."""
    fits = fc_worker_choices(nodes)
    if not _is_int(k) or k not in fits:
        raise ConfigError(f"{name} {k!r} with {nodes} nodes: expected 1 <= k <= {fits[-1]} "
                         f"(k > N - k leaves an FC worker no CONV worker)")
    return k


def fc_workers_on_every(k: int, nodes: list[int], *, name: str = "fc_workers") -> int:
    """k FC workers fit every cluster size of `nodes` (topology.fc_worker_choices)."""
    if too_small := [n for n in nodes if k not in fc_worker_choices(n)]:
        raise ConfigError(f"{name} {k} needs nodes >= {2 * k} (every FC worker serves at least one CONV worker); "
                         f"nodes has {too_small[0]}")
    return k


def fc_workers_that_fit(ks, nodes: int, *, name: str = "fc_workers", needed: bool = True) -> list[int]:
    """The k of `ks` that fit `nodes` ranks (topology.fc_worker_choices), in the order given;
    with `needed`, a one-line error when none does."""
    fits = fc_worker_choices(nodes)
    ks = _items(ks)
    out = [k for k in ks if _is_int(k) and k in fits]
    if needed and not out:
        raise ConfigError(f"{name} {ks} leave no k in 1..{fits[-1]} for {nodes} nodes")
    return out


def batch_divides(global_batch: int, strategy: str, nodes: int, k: int = 0) -> None:
    """The global batch splits evenly over the configuration's data workers (topology)."""
    workers = Topology(strategy, nodes, k if registry.owns(strategy, "fc_workers") else 0, 0).data_workers
    if global_batch % workers:
        label = strategy + (f" k={k}" if registry.owns(strategy, "fc_workers") else "")
        raise ConfigError(f"global_batch {global_batch} is not divisible by the {workers} data workers "
                         f"of {label} on {nodes} nodes")
