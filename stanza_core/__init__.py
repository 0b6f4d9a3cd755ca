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
DIST_NAME = "stanza-core"  # pyproject.toml's [project] name


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    if name == "__version__":  # the installed version (pyproject.toml's), read on first use
        from importlib.metadata import PackageNotFoundError, version  # importlib.metadata: ~60 more modules; only once __version__ is read

        try:
            return version(DIST_NAME)
        except PackageNotFoundError:  # a checkout on sys.path that was never `pip install`ed
            return "0+unknown"
    raise AttributeError(f"module 'stanza_core' has no attribute {name!r}")
