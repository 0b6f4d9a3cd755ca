"""`python -m stanza_core`: the package's version and its three commands. The console scripts of
pyproject.toml ([project.scripts]) start here or at the commands' own `main`."""
import sys

from . import DIST_NAME, __version__, registry

COMMANDS = (  # (console script, the same with python -m, what it does); the strategies are the registry's
    ("stanza-train", "python -m stanza_core.train", "train one configuration (torchrun for several ranks)"),
    ("stanza-perf", "python -m stanza_core.perf",
     f"rank {registry.in_words(registry.compared())} by the performance model; calibrate"),
    ("stanza-reproduce", "python -m stanza_core.reproduce", "run the paper's experiments and write the report"),
)


def train() -> None:
    """`stanza-train`: as `python -m stanza_core.train`, leaving the process as a rank must."""
    from .engine.exit_policy import leave  # the engine loads torch; the command list needs none
    from .engine.train import main  # the engine loads torch; the command list needs none

    leave(main())


def main() -> int:
    print(f"{DIST_NAME} {__version__}")
    for script, module, what in COMMANDS:
        print(f"  {script:<17} ({module}): {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
