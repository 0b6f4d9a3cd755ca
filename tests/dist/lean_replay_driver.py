"""Run several training jobs one after another in the same torchrun processes, so that a test can
compare many short runs without paying a launch for each:

    python -m torch.distributed.run --standalone --nproc-per-node N lean_replay_driver.py JOBS.json

JOBS.json is a list of training CLI argument lists. Each job joins and leaves its own process
group; a group's rendezvous keys must not meet the previous job's, so every job rendezvous on a
new store that rank 0 hosts on a free port, published to the other ranks through torchrun's own
store. Exits with the first non-zero job's code."""
from __future__ import annotations

import datetime
import json
import os
import socket
import sys

import torch.distributed as dist

from stanza_core import train

from stanza_core.engine import exit_policy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        jobs = json.load(fh)
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=datetime.timedelta(seconds=120))
    rank = int(os.environ["RANK"])
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"  # rank 0 hosts each job's store
    for j, args in enumerate(jobs):
        if rank == 0:
            agent.set(f"lean_replay_port_{j}", str(_free_port()))
        os.environ["MASTER_PORT"] = agent.get(f"lean_replay_port_{j}").decode()
        code = train.main(args)
        if code:
            sys.exit(code)
    exit_policy.leave(0)
