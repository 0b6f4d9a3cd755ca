"""`python -m stanza_core.reproduce` (the console script `stanza-reproduce`): see the package
docstring; the options (`--version` among them) are reproduce.run's."""
import sys

from .run import main


if __name__ == "__main__":
    sys.exit(main())
