"""`python -m stanza_core.reproduce` (the console script `stanza-reproduce`): see the package
docstring. `--version` is answered here; every other option belongs to reproduce.run."""
import sys

from .. import DIST_NAME, __version__
from .run import main as run_main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--version" in argv:  # as argparse's version action: the version, exit 0, whatever else is given
        print(f"{DIST_NAME} {__version__}")
        return 0
    return run_main(argv)


if __name__ == "__main__":
    sys.exit(main())
