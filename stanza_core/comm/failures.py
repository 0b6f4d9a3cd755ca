"""Failures of a distributed run, as one line a user can act on: a dead peer or a timeout is a
PeerError naming the rank and what it waited for; NCCL's watchdog is given a timeout that
outlives our own waits, so the wait's line comes first, never the watchdog's SIGABRT.
"""
from __future__ import annotations


class PeerError(RuntimeError):
    """A peer died or did not answer within the timeout."""


def nccl_watchdog_timeout_s(wait_timeout_s: float) -> float:
    """NCCL watchdog timeout for a given wait timeout: strictly larger (by half, at least 30 s),
    so our own host-side wait always fails first, with its one-line message."""
    return wait_timeout_s + max(30.0, 0.5 * wait_timeout_s)


# Ranks sharing this host's cores, where a launcher knows more than torchrun's LOCAL_WORLD_SIZE:
# the emulated cluster runs one torchrun per node, every node on this host (netem.launch.node_env).
HOST_RANKS_ENV = "STANZA_HOST_RANKS"


def join_timeout_s(timeout_s: float, local_ranks: int, cores: int) -> float:
    """How long a rank waits for the others to join the process group: the peer timeout,
    stretched by the ranks sharing each core of this machine. Start-up (importing torch, building
    and splitting the model) is CPU work all local ranks share, so on a machine with more ranks
    than cores the last rank arrives that many times later: 16 replayed VGG-16 ranks on 2 cores
    took more than 120 s to form, while a dead peer of a steady step still fails in timeout_s."""
    return timeout_s * max(1.0, local_ranks / max(1, cores))


def first_line(e: BaseException) -> str:
    """The message of a backend error a user can act on: its first line, gloo's prefix dropped."""
    text = str(e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    # gloo prefixes its source location: keep the message a user can act on
    return line.split("] ", 1)[-1] if line.startswith("[") else line
