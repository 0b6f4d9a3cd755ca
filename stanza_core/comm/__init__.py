"""The one package that calls torch.distributed.

  process_group.py  `Comm`, a rank's handle: process groups, P2P, allreduce, waits with the
                    timeout (a dead peer is a one-line PeerError), the timeline
  accounting.py     byte counters: what a step's transfers count, by category
  failures.py       PeerError (one line), the NCCL watchdog's timeout beyond our waits, the
                    join timeout (the peer timeout stretched by local ranks per core)
  staged.py         P2P of CUDA tensors over gloo, through host copies
  hooks.py          DDP and its comm hooks: counted gradient buckets, fp16 / bf16 / PowerSGD
                    compression of the engine's buckets, PowerSGD state per group
  checkpoint_io.py  checkpoint folders through torch.distributed.checkpoint (replicated tensors
                    stored once, loadable at any world size), metadata read without arbitrary pickles

Strategies reach the network through `Comm` only; the names below are the package's surface.
"""
from .accounting import CATEGORIES, ByteCounter, report
from .failures import PeerError, join_timeout_s, nccl_watchdog_timeout_s
from .hooks import POWERSGD_START, FlatBucket
from .process_group import Comm, backend_name, group_is_up
from .staged import STAGED_P2P_ENV

__all__ = ["CATEGORIES", "POWERSGD_START", "STAGED_P2P_ENV", "ByteCounter", "Comm", "FlatBucket", "PeerError",
           "backend_name", "group_is_up", "join_timeout_s", "nccl_watchdog_timeout_s", "report"]
