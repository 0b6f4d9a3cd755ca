"""`python -m stanza_core.train` (and torchrun's `-m stanza_core.train`): the training engine's
command line, stanza_core/engine/train.py. The engine's Python entry points are named here too."""
from .engine.config import TrainConfig
from .engine.exit_policy import leave
from .engine.train import build_parser, main, parse_config, prepare, rank_device

__all__ = ["TrainConfig", "build_parser", "main", "parse_config", "prepare", "rank_device"]

if __name__ == "__main__":
    leave(main())
