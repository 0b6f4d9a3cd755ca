"""Training strategies behind one interface (see base.py): local, ddp, ps, stanza."""
from .base import Strategy
from .ddp import DDP
from .local import Local
from .ps import ParameterServer
from .stanza import Stanza

STRATEGY_CLASSES: dict[str, type[Strategy]] = {"local": Local, "ddp": DDP, "ps": ParameterServer, "stanza": Stanza}

__all__ = ["Strategy", "STRATEGY_CLASSES", "Local", "DDP", "ParameterServer", "Stanza"]
