"""One name per configuration, the same in every table, figure and results JSON.

    config_label("stanza", 1)                          -> "stanza k=1"
    config_label("ps", ps_servers=2, ps_overlap=True)  -> "ps S=2 overlap"
    config_key("stanza", 1)                            -> "stanza_k1"   (a JSON key / claim path part)

k = FC workers (stanza), S = dedicated parameter-server nodes (ps; 0 = one shard colocated with
every worker), overlap = each gradient bucket pushed as the backward produces it.
Stanza beyond the paper: share = each FC worker's share of the global batch on the CONV body,
M = micro-batches, then "boundary dtype|gradient compression" when either is not exact:
    config_label("stanza", 1, fc_conv_share=0.25, micro_batches=2)  -> "stanza k=1 share=0.25 M=2"
"""
from __future__ import annotations

from . import registry


def _parts(strategy: str, fc_workers: int | None, ps_servers: int, ps_overlap: bool,
           **options) -> list[tuple[str, str]]:
    """The label parts of a configuration: its strategy's (its options class's `label_parts`, in
    the strategy's folder), from those of the options given that are its own; none for a strategy
    that is not registered."""
    if strategy not in registry.names():
        return []
    cls = registry.get(strategy).options_type()
    given = {"fc_workers": fc_workers, "ps_servers": ps_servers, "ps_overlap": ps_overlap, **options}
    return cls.of({k: v for k, v in given.items() if v is not None}).label_parts()


def config_label(strategy: str, fc_workers: int | None = 0, *, ps_servers: int = 0, ps_overlap: bool = False,
                 **options) -> str:
    """The label a person reads: "ddp", "ps", "ps S=1 overlap", "stanza k=2", "stanza k=1 M=4"."""
    parts = _parts(strategy, fc_workers, ps_servers, ps_overlap, **options)
    return " ".join([strategy] + [f"{a}={b}" if b else a for a, b in parts])


def config_key(strategy: str, fc_workers: int | None = 0, *, ps_servers: int = 0, ps_overlap: bool = False,
               **options) -> str:
    """The same name as a key (no spaces or '='): "ddp", "ps_S1_overlap", "stanza_k2", "stanza_k1_M2"."""
    parts = _parts(strategy, fc_workers, ps_servers, ps_overlap, **options)
    return "_".join([strategy] + [f"{a}{b}" for a, b in parts])


def run_options(run: dict) -> dict:
    """The layout options of a run or summary row; rows written before an option existed have it
    at its default."""
    return {"ps_servers": run.get("ps_servers") or 0, "ps_overlap": bool(run.get("ps_overlap")),
            "fc_conv_share": run.get("fc_conv_share") or 0.0, "micro_batches": run.get("micro_batches") or 1}


def _row_options(run: dict) -> dict:
    """A row's layout options (run_options) and any other option of its strategy the row holds."""
    own = registry.get(run["strategy"]).options if run["strategy"] in registry.names() else ()
    extra = {k: run[k] for k in own if k in run and k not in ("fc_workers", "ps_servers", "ps_overlap")
             and run[k] is not None}
    return {**run_options(run), **extra}


def run_label(run: dict) -> str:
    """config_label of a run or summary row (a dict with strategy, fc_workers and optionally
    ps_servers, ps_overlap, fc_conv_share, micro_batches, or any other option of its strategy)."""
    return config_label(run["strategy"], run.get("fc_workers") or 0, **_row_options(run))


def run_key(run: dict) -> str:
    """config_key of a run or summary row."""
    return config_key(run["strategy"], run.get("fc_workers") or 0, **_row_options(run))
