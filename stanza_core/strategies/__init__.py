"""The strategies, one folder each: `<name>/__init__.py` registers its record (stanza_core/registry.py
reads the folders), `<name>/engine.py` is its training engine, `<name>/model.py` its performance
model. base.py holds what the engines share (the `Strategy` interface).

The engine classes are importable from here as before (`from stanza_core.strategies import DDP`);
they are imported on first use, so reading a record costs no torch."""
import importlib

_EXPORTS = {"Strategy": "base", "Local": "local.engine", "DDP": "ddp.engine",
            "ParameterServer": "ps.engine", "Stanza": "stanza.engine"}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
