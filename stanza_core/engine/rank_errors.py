"""Each rank's uncaught exception, handed to the launcher in a file rather than parsed from stderr.

torchrun gives every rank an error file (env TORCHELASTIC_ERROR_FILE, laid out as
LOG_DIR/<run>/attempt_<n>/<local rank>/error.json under its --log-dir). `record` on a rank's
main writes an exception escaping it there (type, message, traceback, time); `read` gives the
launcher what the ranks wrote. Only exceptions that escape a rank land there: the one-line errors
train prints itself (`error: ...`) stay on stderr.

    @record
    def main(argv=None) -> int: ...

    read("workdir/torchrun")  ->  {1: "RuntimeError: boom"}   # earliest first
"""
from __future__ import annotations

import functools
import glob
import json
import os

ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"


def record(main):
    """torch's @record around `main` when torchrun gave this process an error file. Elsewhere (a
    plain `python -m stanza_core.train`, tests calling main) `main` runs as it is: there is no
    file to write, and record would also switch faulthandler onto stderr, which fails when stderr
    is captured."""
    from torch.distributed.elastic.multiprocessing.errors import record as torch_record  # torch: the launcher reads these files (launch.read) without torch

    recorded = torch_record(main)

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        return (recorded if os.environ.get(ERROR_FILE_ENV) else main)(*args, **kwargs)

    return wrapper


def read(log_dir: str) -> dict[int, str]:
    """{rank: "Type: message" (its first line)} for every rank that left an error file under
    torchrun's `log_dir`, earliest exception first (ties: lower rank). One node: local rank = rank."""
    found = []
    for path in glob.glob(os.path.join(log_dir, "*", "attempt_*", "*", "error.json")):
        try:
            with open(path) as fh:
                message = json.load(fh)["message"]
            text, when = message["message"], int(message["extraInfo"]["timestamp"])
            rank = int(os.path.basename(os.path.dirname(path)))
        except (OSError, ValueError, KeyError, TypeError):  # half written, or another format
            continue
        found.append((when, rank, (text.strip().splitlines() or ["(no message)"])[0]))
    return {rank: text for _, rank, text in sorted(found)}
