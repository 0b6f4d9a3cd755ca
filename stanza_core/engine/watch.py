"""What a person watching a training run sees, and what a logger records of it (rank 0).

  log levels   the `stanza_core` logger, one line per record on stderr: `error: ...` and
               `warning: ...` always; INFO (the default) adds the progress bar and the end
               summary; -v (DEBUG) adds one line per --log-every window; -q (WARNING) shows
               warnings and errors only. Ranks other than 0 log warnings and errors only.
  progress bar tqdm over the steps; every --log-every steps its postfix shows the window's
               loss (the mean global loss of its steps) and samples/s (the global batch over
               rank 0's step times).
  step log     optional: --tensorboard DIR writes TensorBoard event files (the scalars `loss`,
               `samples_per_s`, `step_time_s`, each at the window's last step; the
               "tensorboard" extra), --log-csv PATH one CSV row per window, written as it goes.
  summary      one line at the end, from the metrics JSON: steps, final loss, samples/s, the
               median step time and MB per step.

A window's loss is the global loss (summed over ranks) that the non-finite check already
reduces every --log-every steps (step_failures.check_finite), so watching adds no collective.
Replayed compute computes no loss: its windows show samples/s only.
"""
from __future__ import annotations

import csv
import logging
import sys

from tqdm import tqdm

from ..extras import require

LOGGER = "stanza_core"
CSV_FIELDS = ("step", "steps_in_window", "loss", "step_time_s", "samples_per_s")
log = logging.getLogger(LOGGER)


class _Handler(logging.Handler):
    """One line per record on the current sys.stderr, through tqdm.write so a bar stays intact."""

    def emit(self, record):
        msg = record.getMessage()
        if record.levelno >= logging.WARNING:
            msg = f"{record.levelname.lower()}: {msg}"
        tqdm.write(msg, file=sys.stderr)


def setup_logging(level: int = logging.INFO) -> logging.Logger:
    """The command line's logger (idempotent): our handler only, not the root logger's."""
    if not any(isinstance(h, _Handler) for h in log.handlers):
        log.addHandler(_Handler())
    log.propagate = False
    log.setLevel(level)
    return log


def level_of(cfg, rank: int) -> int:
    if rank != 0 or cfg.quiet:
        return logging.WARNING
    return logging.DEBUG if cfg.verbose else logging.INFO


class Watch:
    """Rank 0's view of the run: the bar, the -v lines, the TensorBoard and CSV step logs.
    Other ranks get a Watch that does nothing (`enabled` False)."""

    def __init__(self, cfg, world_size: int, start: int, enabled: bool):
        self.cfg, self.enabled = cfg, enabled
        self.bar = self.tb = self._csv = self._csv_file = None
        if not enabled:
            return
        if log.isEnabledFor(logging.INFO):
            self.bar = tqdm(total=cfg.steps, initial=start, desc=f"{cfg.strategy} x{world_size}", unit="step",
                            file=sys.stderr)
        if cfg.tensorboard:
            require("tensorboard", "--tensorboard")  # the extra, named in one line when missing
            from torch.utils.tensorboard import SummaryWriter  # tensorboard: an optional extra (require above names the install)

            self.tb = SummaryWriter(log_dir=cfg.tensorboard)
        if cfg.log_csv:
            self._csv_file = open(cfg.log_csv, "w", newline="")
            self._csv = csv.writer(self._csv_file)
            self._csv.writerow(CSV_FIELDS)

    def step_done(self):
        if self.bar is not None:
            self.bar.update(1)

    def window(self, last_step: int, loss: float | None, times: list[float]):
        """The --log-every window that ended with step `last_step` (0-based): its mean global
        loss (None: not computed) and rank 0's step times."""
        if not self.enabled or not times:
            return
        total = sum(times)
        rate = self.cfg.global_batch * len(times) / total if total > 0 else None
        step_time = total / len(times)
        if self.bar is not None:
            post = {} if loss is None else {"loss": f"{loss:.4g}"}
            if rate is not None:
                post["samples/s"] = f"{rate:.1f}"
            self.bar.set_postfix(post, refresh=False)
        log.debug("step %d: loss %s, %s samples/s, %.4g s per step", last_step + 1,
                  "n/a" if loss is None else f"{loss:.6g}", "n/a" if rate is None else f"{rate:.1f}", step_time)
        if self.tb is not None:
            if loss is not None:
                self.tb.add_scalar("loss", loss, last_step + 1)
            if rate is not None:
                self.tb.add_scalar("samples_per_s", rate, last_step + 1)
            self.tb.add_scalar("step_time_s", step_time, last_step + 1)
        if self._csv is not None:
            self._csv.writerow((last_step + 1, len(times), "" if loss is None else repr(loss), repr(step_time),
                                "" if rate is None else repr(rate)))
            self._csv_file.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        if self.tb is not None:
            self.tb.close()
        if self._csv_file is not None:
            self._csv_file.close()
        self.bar = self.tb = self._csv = self._csv_file = None


def summary_line(metrics: dict, metrics_path: str | None) -> str:
    """One line from the metrics JSON: what ran, its last loss, throughput and bytes per step."""
    c, steps = metrics["config"], metrics["steps"]
    loss = steps[-1]["loss"] if steps else None
    parts = [f"{c['strategy']} x{c['world_size']} {c['model']}: {len(steps)} steps",
             "loss not computed (replayed compute)" if loss is None else f"final loss {loss:.4g}"]
    if metrics.get("throughput"):
        parts.append(f"{metrics['throughput']:.1f} samples/s" + (" here" if "replay" in metrics else ""))
    if metrics.get("target_throughput"):  # replayed: the target device's, measured / dilation
        parts.append(f"{metrics['target_throughput']:.1f} on the target device")
    if metrics.get("step_time_median_s"):
        parts.append(f"median step {metrics['step_time_median_s'] * 1e3:.1f} ms")
    parts.append(f"{metrics['bytes_per_step'] / 1e6:.3g} MB per step")
    return ", ".join(parts) + (f"; metrics: {metrics_path}" if metrics_path else "")
