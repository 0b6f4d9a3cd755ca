"""Stanza workbench: layer separation for distributed CNN training (arXiv 1812.10624).

The library's public surface: the model zoo, the CONV|FC split and the layer profile. The
training engine is `python -m stanza_core.train`; the performance model is `stanza_core.perf`.
Names are imported on first use, so command-line tools that need no torch (netem) start fast.
"""
import importlib

_EXPORTS = {
    "MODEL_NAMES": "models", "get_model": "models", "train_model": "launch", "run_job": "launch",
    "split_model": "split", "SplitModel": "split", "SplitError": "split",
    "profile_model": "anatomy", "Profile": "anatomy", "LayerRow": "anatomy", "PartTotals": "anatomy",
}
__all__ = list(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'stanza_core' has no attribute {name!r}")
