"""`python -m stanza_core.reproduce`: see the package docstring."""
import sys

from .run import main

sys.exit(main())
