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


def first_line(e: BaseException) -> str:
    """The message of a backend error a user can act on: its first line, gloo's prefix dropped."""
    text = str(e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    # gloo prefixes its source location: keep the message a user can act on
    return line.split("] ", 1)[-1] if line.startswith("[") else line
