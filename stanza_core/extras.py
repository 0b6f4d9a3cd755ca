"""The optional extras of pyproject.toml, named where a missing one is met.

A module that needs an extra imports it through `require`: with the extra installed it is the
plain import; without it, one line naming the install that fixes it, for example

    error: benchmarks/fit_compute_model.py needs scipy, from the extra "bench": pip install "stanza-core[bench]"
    (in a checkout: pip install -e ".[bench]")

instead of a ModuleNotFoundError traceback.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from . import DIST_NAME
from .errors import ConfigError

# module -> the extra of pyproject.toml's [project.optional-dependencies] that brings it
EXTRA_OF = {"scipy": "bench", "nbgrader": "course", "jupyterlab": "lab", "jupytext": "lab",
            "tensorboard": "tensorboard"}


class MissingExtra(ConfigError):
    """An optional dependency is not installed; the message names the pip command."""


def install_hint(extra: str) -> str:
    return f'pip install "{DIST_NAME}[{extra}]" (in a checkout: pip install -e ".[{extra}]")'


def require(module: str, who: str) -> ModuleType:
    """Import `module` (dotted), or raise MissingExtra naming the extra that brings it; `who` is
    what needs it ("benchmarks/fit_compute_model.py", "--tensorboard")."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        extra = EXTRA_OF.get(top)
        if extra is None:  # not an extra's module: a real bug, not a missing install
            raise
        missing = getattr(e, "name", None) or top
        raise MissingExtra(f"{who} needs {missing}, from the extra \"{extra}\": {install_hint(extra)}") from None
