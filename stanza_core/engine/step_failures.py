"""What stops a run between steps, named by its step.

  a non-finite loss  every rank learns whether the global loss of the steps since the last
                     check was finite (`check_finite`, one uncounted allreduce); the first step
                     that was not raises NonFiniteLoss naming it and the last good checkpoint,
                     before anything of that step is saved;
  a dead peer        wherever step t noticed it, one PeerError line naming the step (`naming_step`).
"""
from __future__ import annotations

import contextlib
import math

from ..comm import PeerError


class NonFiniteLoss(RuntimeError):
    """The global loss of a step is NaN or infinite: the run stops before saving anything of it."""


def check_finite(cfg, comm, first: int, shares: list, start: int) -> float | None:
    """Every rank learns whether the global loss of steps first, first+1, ... (its `shares` of
    them, just read) was finite: one uncounted allreduce of their sum (a sum of finite losses is
    finite; NaN or inf in any share makes it non-finite), then per step only when it was not.
    NonFiniteLoss names the first non-finite step; else the global loss summed over those steps
    (the progress bar's window loss). Replayed losses are not computed: no check, None."""
    if cfg.compute != "real" or not shares:
        return None
    with naming_step(comm, first + len(shares) - 1):
        total = comm.sum_scalar(sum(0.0 if s is None else s for s in shares))
        if math.isfinite(total):
            return total
        for i, s in enumerate(shares):  # rare: find the step (a huge but finite window sum rechecks clean)
            step_total = comm.sum_scalar(s)
            if not math.isfinite(step_total):
                t = first + i
                last = last_checkpoint(cfg, start, t)
                raise NonFiniteLoss(f"the loss is {step_total} at step {t}: run stopped, nothing of this step saved"
                                    + (f"; last good checkpoint: step {last} in {cfg.checkpoint_dir}" if last else ""))


@contextlib.contextmanager
def naming_step(comm, t: int):
    """A dead peer, wherever step t noticed it (the step or its loss allreduce): one line naming the step."""
    try:
        yield
    except Exception as e:
        err = comm.peer_error(e)
        if isinstance(err, PeerError):
            raise PeerError(f"{err} (step {t})") from None
        raise


def last_checkpoint(cfg, start: int, t: int) -> int | None:
    """Step of the newest checkpoint written before step t (None if none)."""
    if not cfg.checkpoint_dir:
        return None
    every = [s for s in range(start + 1, t + 1) if cfg.checkpoint_every and s % cfg.checkpoint_every == 0]
    return every[-1] if every else (start if start else None)
