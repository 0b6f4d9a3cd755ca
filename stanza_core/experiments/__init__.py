"""Experiment logic behind the notebooks: one module per experiment family (measured runs,
model predictions, results dicts), so notebook cells hold parameters and calls only."""
import importlib
import pkgutil
from ..runs.replayed import GRID


def grid_experiments() -> dict[str, type]:
    """Every experiment whose notebook replays runs of the full grid, by notebook stem: each module
    of this package is imported, and each registers its parameters class itself
    (stanza_core.runs.replayed.in_grid)."""


    for m in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{m.name}")
    return dict(GRID)
