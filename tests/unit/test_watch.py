"""Training you can watch (engine/watch.py): the bar's loss and samples/s every --log-every steps,
the one-line summary, -q / -v, the TensorBoard and CSV step logs, and the metrics JSON's
provenance. One real 4-step local run (tiny_cnn, about a second), its step log checked against
the metrics JSON it wrote (the per-step global losses: the window loss is their mean)."""
import csv
import json
import math
import re
import subprocess
from pathlib import Path

import pytest

import stanza_core
from stanza_core import train

ROOT = Path(__file__).resolve().parents[2]
RUN = ["--strategy", "local", "--steps", "4", "--warmup", "1", "--log-every", "2", "--global-batch", "8",
       "--device", "cpu"]


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """A -v run with --tensorboard and --log-csv: (metrics, stderr, folder)."""
    out = tmp_path_factory.mktemp("watch")
    mp = pytest.MonkeyPatch()
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        mp.setenv(k, v)
    cap = _Capture(mp)
    try:
        rc = train.main(RUN + ["-v", "--metrics", str(out / "m.json"), "--tensorboard", str(out / "tb"),
                               "--log-csv", str(out / "steps.csv")])
    finally:
        mp.undo()
    assert rc == 0, cap.text()
    return json.loads((out / "m.json").read_text()), cap.text(), out


class _Capture:
    """sys.stderr replaced for the run (capsys is function-scoped; the run is shared)."""

    def __init__(self, mp):
        import io
        import sys

        self.buf = io.StringIO()
        mp.setattr(sys, "stderr", self.buf)

    def text(self) -> str:
        return self.buf.getvalue()


def _windows(metrics) -> list[tuple[int, float]]:
    """(last step, 1-based; mean global loss) of each --log-every 2 window, from the metrics JSON."""
    losses = [s["loss"] for s in metrics["steps"]]
    return [(i + 2, (losses[i] + losses[i + 1]) / 2) for i in range(0, len(losses), 2)]


def test_the_bar_shows_each_windows_loss_and_samples_per_s(watched):
    metrics, err, _ = watched
    for _, loss in _windows(metrics):
        assert f"loss={loss:.4g}" in err, err
    assert re.search(r"samples/s=\d+\.\d", err), err


def test_verbose_logs_one_line_per_window(watched):
    metrics, err, _ = watched
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.startswith("step ")]
    assert [ln.split(":")[0] for ln in lines] == ["step 2", "step 4"], err
    for line, (_, loss) in zip(lines, _windows(metrics)):
        assert f"loss {loss:.6g}," in line, line


def test_one_summary_line_from_the_metrics(watched):
    metrics, err, out = watched
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if "final loss" in ln]
    assert len(lines) == 1, err
    assert lines[0].startswith("local x1 tiny_cnn: 4 steps, final loss " + f"{metrics['steps'][-1]['loss']:.4g}, ")
    assert f"{metrics['throughput']:.1f} samples/s" in lines[0] and str(out / "m.json") in lines[0]


def test_the_csv_step_log_holds_the_window_losses(watched):
    metrics, _, out = watched
    rows = list(csv.DictReader((out / "steps.csv").open()))
    assert [int(r["step"]) for r in rows] == [2, 4] and all(r["steps_in_window"] == "2" for r in rows)
    for row, (_, loss) in zip(rows, _windows(metrics)):
        assert math.isclose(float(row["loss"]), loss, rel_tol=1e-12), (row, loss)
        assert float(row["samples_per_s"]) > 0 and float(row["step_time_s"]) > 0


def test_tensorboard_event_files_load_in_a_reader(watched):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    metrics, _, out = watched
    acc = EventAccumulator(str(out / "tb"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"loss", "samples_per_s", "step_time_s"}
    got = [(e.step, e.value) for e in acc.Scalars("loss")]
    want = _windows(metrics)
    assert [s for s, _ in got] == [s for s, _ in want]
    for (_, value), (_, loss) in zip(got, want):  # event files store float32
        assert math.isclose(value, loss, rel_tol=1e-6), (value, loss)


def test_the_metrics_json_names_the_version_and_the_commit(watched):
    config = watched[0]["config"]
    assert config["stanza_core_version"] == stanza_core.__version__
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:  # not a git checkout (an sdist): the commit is unknown, and said so
        assert config["git_commit"] is None
    else:
        assert config["git_commit"] == head.stdout.strip() and isinstance(config["git_dirty"], bool)


def test_quiet_prints_nothing_but_writes_the_metrics(as_rank0_of, capsys, tmp_path):
    as_rank0_of(1)
    assert train.main(RUN + ["-q", "--metrics", str(tmp_path / "m.json")]) == 0
    assert capsys.readouterr().err == ""
    assert (tmp_path / "m.json").is_file()


def test_a_replayed_summary_names_both_throughputs():
    from stanza_core.engine.watch import summary_line

    m = {"config": {"strategy": "ddp", "world_size": 4, "model": "alexnet"}, "steps": [{"loss": None}] * 3,
         "throughput": 10.0, "target_throughput": 40.0, "step_time_median_s": 0.1, "bytes_per_step": 2e6,
         "replay": {"dilation": 4.0}}
    assert summary_line(m, None) == ("ddp x4 alexnet: 3 steps, loss not computed (replayed compute), "
                                     "10.0 samples/s here, 40.0 on the target device, median step 100.0 ms, "
                                     "2 MB per step")
