"""How a rank reports a failure and leaves its process.

  bad input    (ConfigError, SplitError, a bad flag) found before any process group forms:
               one line, printed once per job, machine or rank as the error's scope says
               (`error_line`), exit code 2;
  failure in a process group (a dead peer, a non-finite loss): exit code 1, leaving at once
               (`exit_now`): interpreter shutdown would tear down a broken group;
  success      a rank of a distributed run skips the C++ teardown after the interpreter's
               (`leave`), where gloo was seen to abort a finished run now and then.
"""
from __future__ import annotations

import os
import sys

from ..comm import group_is_up


def error_line(e: Exception, rank: int, local_rank: int) -> str | None:
    """The line this rank prints for bad input, or None when another rank prints it.

    A job-wide error (the same on every rank) is printed once, by rank 0; an error about this
    machine's GPUs once per machine, by its local rank 0; an error about this rank's own
    device or checkpoint by every rank that hits it, prefixed with its rank."""
    scope = getattr(e, "scope", "job")
    if scope == "rank":
        return f"error: rank {rank}: {e}"
    if scope == "host":
        return f"error: rank {rank}: {e}" if local_rank == 0 else None
    return f"error: {e}" if rank == 0 else None


def exit_now(code: int) -> int:
    """With a process group up, leave at once: interpreter shutdown would tear down a broken group
    (gloo threads blocked on a dead peer abort the process, 'terminate called...')."""
    if group_is_up():
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(code)
    return code


def leave(code: int) -> None:
    """A rank's exit. After a finished run its process group is destroyed and its files written
    and closed; what is left is the C++ teardown after the interpreter's, where a gloo rank was
    seen to abort now and then ('terminate called without an active exception', no Python frame:
    about 1 run in 10 on a busy machine), turning a finished run into a failed one. A rank of a
    distributed run that finished skips that teardown (os._exit after flushing its output). A
    failed rank exits normally: leaving at once would let torchrun stop its peers before they
    print their own errors (failures inside a process group already leave at once, exit_now)."""
    if code == 0 and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
