"""Parameter checks shared by every experiment and the bench: one-line ValueErrors saying what
was wrong and what was expected, raised before anything runs. Lists accept a single value or a
comma-separated string (as `papermill -p` passes them)."""
from __future__ import annotations

from collections.abc import Iterable

from .models import MIN_IMAGE_SIZE, MODEL_NAMES, known_model

MEASURED_STRATEGIES = ("ps", "ddp", "stanza")


def _items(values) -> list:
    if isinstance(values, str):
        return [v.strip() for v in values.split(",") if v.strip()]
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        return [values]
    return list(values) if isinstance(values, Iterable) else [values]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def positive_int(name: str, value, low: int = 1) -> int:
    if not _is_int(value) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def int_list(name: str, values, low: int = 1, *, unique: bool = False) -> list[int]:
    """A non-empty list of integers >= low (sorted and deduplicated unless `unique` demands that
    no value repeats, in which case the order is kept)."""
    vals = _items(values)
    try:
        vals = [int(v) if isinstance(v, str) else v for v in vals]
    except ValueError:
        raise ValueError(f"{name} must be a non-empty list of integers >= {low}, got {values!r}") from None
    if not vals or any(not _is_int(v) or v < low for v in vals):
        raise ValueError(f"{name} must be a non-empty list of integers >= {low}, got {values!r}")
    if unique:
        if len(set(vals)) != len(vals):
            raise ValueError(f"{name} lists a value twice: {vals}")
        return vals
    return sorted(set(vals))


def positive_floats(name: str, values) -> list[float]:
    """A non-empty list of positive numbers, in the order given."""
    vals = _items(values)
    try:
        vals = [float(v) if isinstance(v, str) else v for v in vals]
    except ValueError:
        raise ValueError(f"{name} must be a non-empty list of positive numbers, got {values!r}") from None
    if not vals or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in vals):
        raise ValueError(f"{name} must be a non-empty list of positive numbers, got {values!r}")
    return [float(v) for v in vals]


def model_names(values, image_size: int | None = None, *, name: str = "models") -> list[str]:
    """Zoo names (each once), each able to take `image_size` when given."""
    names = _items(values)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"{name} must be a non-empty list of names, got {values!r}")
    for n in names:
        model_fits(n, image_size)
    if len(set(names)) != len(names):
        raise ValueError(f"{name} lists a name twice: {names}")
    return names


def model_fits(model: str, image_size: int | None, *, name: str = "image_size") -> str:
    if not known_model(model):
        raise ValueError(f"unknown model {model!r}; expected one of: {', '.join(MODEL_NAMES)} or package.module:factory")
    if image_size is not None:
        positive_int(name, image_size)
        if image_size < MIN_IMAGE_SIZE.get(model, 1):
            raise ValueError(f"{model} needs {name} >= {MIN_IMAGE_SIZE[model]}, got {image_size}")
    return model


def device_name(name: str, value: str) -> str:
    """A row of the performance model's device table."""
    from .perf import DEVICE_TABLE

    if value not in DEVICE_TABLE:
        raise ValueError(f"unknown {name} {value!r}; expected one of {', '.join(DEVICE_TABLE)}")
    return value


def strategies(values, allowed: tuple[str, ...] = MEASURED_STRATEGIES) -> list[str]:
    names = _items(values)
    bad = [s for s in names if s not in allowed]
    if bad or not names:
        raise ValueError(f"unknown strategy {bad[0] if bad else None!r}; expected {', '.join(allowed)}")
    if len(set(names)) != len(names):
        raise ValueError(f"strategies lists a name twice: {names}")
    return names


def fc_workers(k, nodes: int, *, name: str = "fc_workers") -> int:
    """k FC workers on `nodes` ranks: one of topology.fc_worker_choices (k <= N - k)."""
    from .topology import fc_worker_choices

    fits = fc_worker_choices(nodes)
    if not _is_int(k) or k not in fits:
        raise ValueError(f"{name} {k!r} with {nodes} nodes: expected 1 <= k <= {fits[-1]} "
                         f"(k > N - k leaves an FC worker no CONV worker)")
    return k


def fc_workers_on_every(k: int, nodes: list[int], *, name: str = "fc_workers") -> int:
    """k FC workers fit every cluster size of `nodes` (topology.fc_worker_choices)."""
    from .topology import fc_worker_choices

    if too_small := [n for n in nodes if k not in fc_worker_choices(n)]:
        raise ValueError(f"{name} {k} needs nodes >= {2 * k} (every FC worker serves at least one CONV worker); "
                         f"nodes has {too_small[0]}")
    return k


def fc_workers_that_fit(ks, nodes: int, *, name: str = "fc_workers", needed: bool = True) -> list[int]:
    """The k of `ks` that fit `nodes` ranks (topology.fc_worker_choices), in the order given;
    with `needed`, a one-line error when none does."""
    from .topology import fc_worker_choices

    fits = fc_worker_choices(nodes)
    ks = _items(ks)
    out = [k for k in ks if _is_int(k) and k in fits]
    if needed and not out:
        raise ValueError(f"{name} {ks} leave no k in 1..{fits[-1]} for {nodes} nodes")
    return out


def batch_divides(global_batch: int, strategy: str, nodes: int, k: int = 0) -> None:
    """The global batch splits evenly over the configuration's data workers (topology)."""
    from .topology import Topology

    workers = Topology(strategy, nodes, k if strategy == "stanza" else 0, 0).data_workers
    if global_batch % workers:
        label = strategy + (f" k={k}" if strategy == "stanza" else "")
        raise ValueError(f"global_batch {global_batch} is not divisible by the {workers} data workers "
                         f"of {label} on {nodes} nodes")
