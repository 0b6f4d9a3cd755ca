"""The error of bad user input (the lowest module: everything that checks input raises it)."""
from __future__ import annotations

import argparse
import os
import sys


class ConfigError(ValueError):
    """Bad user input; the message is one line saying what was wrong and what was expected.

    `scope` says who can see it: "job" (the same on every rank: only rank 0 prints it), "host"
    (this machine's GPUs: local rank 0 of each machine prints it) or "rank" (this rank's own
    device or checkpoint: every rank that hits it prints it, prefixed with its rank)."""

    def __init__(self, message: str = "", *, scope: str = "job"):
        super().__init__(message)
        self.scope = scope


class ArgError(ConfigError):
    """A bad command-line argument, raised instead of printed (OneLineParser(raise_errors=True))."""


class OneLineParser(argparse.ArgumentParser):
    """The command-line parser of every command: a bad argument is one line, `error: MESSAGE`,
    and exit status 2, with no usage block (the same prefix as every other input error).

    With `raise_errors=True` it raises ArgError instead, for a command whose caller decides who
    prints (training: rank 0 only, like every other job-wide input error)."""

    def __init__(self, *args, raise_errors: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.raise_errors = raise_errors

    def error(self, message):
        if self.raise_errors:
            raise ArgError(message)
        self.exit(2, f"error: {message}\n")


def command_name(module: str) -> str:
    """How the user started this command, for usage lines and hints: the console script's name
    (`stanza-train`, pyproject.toml's [project.scripts]) when started by it, else
    `python -m MODULE`."""

    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return script if script.startswith("stanza-") else f"python -m {module}"
