"""Run several jobs one after another in the same torchrun processes, so that a test can compare
many short runs without paying a launch (torchrun, and every rank's interpreter and torch import)
for each:

    python -m torch.distributed.run --standalone --nproc-per-node N jobs_driver.py JOBS.json

JOBS.json is a list of jobs, each one of
  - a training CLI argument list: `stanza_core.train` on those arguments (train.main);
  - {"opcount": ARGS, "out": DIR}: `stanza_core.opcount` on the training flags ARGS, each rank
    writing DIR/rank<r>.json (what `torchrun -m stanza_core.opcount` writes under OUT_ENV);
  - {"copy": [SRC, DST]}: rank 0 copies the folder SRC to DST (a checkpoint a later job resumes
    from, SRC kept as it was); every rank waits for the copy.
Each job joins and leaves its own process group; a group's rendezvous keys must not meet the
previous job's, so every job rendezvous on a new store that rank 0 hosts on a free port,
published to the other ranks through torchrun's own store. Exits with the first non-zero job's
code."""
from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import sys

import torch.distributed as dist

from stanza_core import train

from stanza_core.engine import exit_policy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _opcount(argv: list[str], out: str) -> int:
    from stanza_core.opcount import role_counts

    row = role_counts(argv)
    with open(os.path.join(out, f"rank{row['rank']}.json"), "w") as fh:
        json.dump(row, fh)
    return 0


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        jobs = json.load(fh)
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=datetime.timedelta(seconds=120))
    rank = int(os.environ["RANK"])
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"  # rank 0 hosts each job's store
    for j, job in enumerate(jobs):
        if isinstance(job, dict) and "copy" in job:
            if rank == 0:
                shutil.copytree(*job["copy"])
                agent.set(f"jobs_driver_copied_{j}", "1")
            agent.get(f"jobs_driver_copied_{j}")  # waits until rank 0 has set it
            continue
        if rank == 0:
            agent.set(f"jobs_driver_port_{j}", str(_free_port()))
        os.environ["MASTER_PORT"] = agent.get(f"jobs_driver_port_{j}").decode()
        code = _opcount(job["opcount"], job["out"]) if isinstance(job, dict) else train.main(job)
        if code:
            sys.exit(code)
    exit_policy.leave(0)
