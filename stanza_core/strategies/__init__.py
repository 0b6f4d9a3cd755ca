"""Training strategies behind one interface (see base.py): local, ddp, ps, stanza. Which class
runs a strategy is its registry record's (stanza_core/registry.py: `get(name).engine_class()`)."""
from .base import Strategy
from .ddp import DDP
from .local import Local
from .ps import ParameterServer
from .stanza import Stanza

__all__ = ["Strategy", "Local", "DDP", "ParameterServer", "Stanza"]
