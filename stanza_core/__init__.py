"""Stanza workbench: layer separation for distributed CNN training (arXiv 1812.10624).

The library's public surface: the model zoo, the CONV|FC split and the layer profile. The
training engine is `python -m stanza_core.train`; the performance model is `stanza_core.perf`.
"""
from .anatomy import LayerRow, PartTotals, Profile, profile_model
from .models import MODEL_NAMES, get_model
from .split import SplitError, SplitModel, split_model

__all__ = ["MODEL_NAMES", "get_model", "split_model", "SplitModel", "SplitError",
           "profile_model", "Profile", "LayerRow", "PartTotals"]
__version__ = "0.1.0"
