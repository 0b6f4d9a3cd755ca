"""StepLog (stanza_core.engine.steplog): step times and loss shares recorded without a host sync in the
step, read every --log-every steps. The CUDA-event path runs here with a stand-in event class
whose timestamps are the host's clock, so the bookkeeping is checked on a CPU machine."""
import time

import pytest
import torch

from stanza_core.engine.steplog import StepLog


class FakeEvent:
    """torch.cuda.Event's interface; record() takes the host's perf_counter() (ms arithmetic)."""
    recorded = 0

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.t = None

    def record(self):
        FakeEvent.recorded += 1
        self.t = time.perf_counter()

    def synchronize(self):
        assert self.t is not None

    def elapsed_time(self, other) -> float:
        return (other.t - self.t) * 1e3


def run(log: StepLog, n: int, shares) -> list[int]:
    """n steps of ~2 ms each; the steps after which read() was due."""
    reads = []
    for t in range(n):
        mark = log.start()
        time.sleep(0.002)
        if log.end(mark, shares(t)):
            log.read()
            reads.append(t)
    log.read()
    return reads


@pytest.mark.parametrize("events", [False, True])
def test_every_step_has_its_loss_time_and_span_read_every_k_steps(events):
    kw = dict(device=torch.device("cuda"), event_cls=FakeEvent, sync=lambda: None) if events else \
        dict(device=torch.device("cpu"))
    log = StepLog(every=3, **kw)
    assert log.events == events
    values = [0.5, float("nan"), 2.0, None, 1.25, 3.0, 0.0]
    shares = lambda t: None if values[t] is None else (torch.tensor(values[t]) if t % 2 else values[t])
    reads = run(log, 7, shares)
    assert reads == [2, 5] and log.pending == 0
    assert [None if v is None or v == v else "nan" for v in log.losses] == \
        [None if v is None or v == v else "nan" for v in values]
    assert [v for v in log.losses if v is not None and v == v] == [0.5, 2.0, 1.25, 3.0, 0.0]
    assert len(log.times) == len(log.spans) == 7
    for (a, b), dt in zip(log.spans, log.times):
        assert dt == pytest.approx(b - a, abs=1e-6) and 0.0015 < dt < 1.0  # each step slept 2 ms
    starts = [a for a, _ in log.spans]
    assert starts == sorted(starts) and all(b <= a2 for (_, b), (a2, _) in zip(log.spans, log.spans[1:]))
    now = time.perf_counter()  # spans are on the host's perf_counter() axis, events or not
    assert now - 5.0 < log.spans[0][0] < log.spans[-1][1] <= now


def test_events_are_reused_after_a_read_not_allocated_per_step():
    FakeEvent.recorded = 0
    made = []

    class Counting(FakeEvent):
        def __init__(self, enable_timing=False):
            super().__init__(enable_timing)
            made.append(self)

    log = StepLog(torch.device("cuda"), 2, event_cls=Counting, sync=lambda: None)
    run(log, 10, lambda t: torch.tensor(1.0))
    assert FakeEvent.recorded == 21  # 2 per step + the origin
    assert len(made) <= 5  # the origin + the pairs of the 2 pending steps, reused thereafter


def test_host_clock_on_cuda_for_timeline_and_replayed_runs():
    synced = []
    log = StepLog(torch.device("cuda"), 1, host_clock=True, event_cls=FakeEvent, sync=lambda: synced.append(1))
    assert not log.events
    run(log, 2, lambda t: 1.0)
    assert len(synced) == 4 and log.losses == [1.0, 1.0]  # a device sync at each start and end


# ---------------------------------------------------------------------------------------------
# --log-every in the training loop (world size 1, in process)


def _run(tmp_path, name, *extra):
    import json

    from stanza_core import train

    m = tmp_path / f"{name}.json"
    code = train.main(["--strategy", "local", "--global-batch", "4", "--device", "cpu", "--quiet",
                       "--metrics", str(m), *extra])
    return code, (json.loads(m.read_text()) if m.exists() else None)


def test_log_every_reads_every_step_all_the_same(as_rank0_of, tmp_path):
    as_rank0_of(1)
    _, every1 = _run(tmp_path, "k1", "--steps", "7")
    _, every3 = _run(tmp_path, "k3", "--steps", "7", "--log-every", "3")
    assert [s["step"] for s in every3["steps"]] == list(range(7)) and every3["config"]["log_every"] == 3
    assert [s["loss"] for s in every3["steps"]] == [s["loss"] for s in every1["steps"]]  # the same arithmetic
    spans = every3["ranks"][0]
    assert all(s["time_s"] > 0 for s in every3["steps"]) and len(spans["step_start_s"]) == 7
    for s, a, b in zip(every3["steps"], spans["step_start_s"], spans["step_end_s"]):
        assert s["time_s"] == pytest.approx(b - a)


def test_a_non_finite_loss_is_named_at_its_step_also_between_reads(as_rank0_of, tmp_path, capsys):
    as_rank0_of(1)
    bad = ["--lr", "1e30", "--steps", "8"]
    assert _run(tmp_path, "a", *bad)[0] == 1
    first = capsys.readouterr().err.strip()
    assert _run(tmp_path, "b", *bad, "--log-every", "5")[0] == 1
    later = capsys.readouterr().err.strip()
    assert first.startswith("error: the loss is ") and later == first  # the same step, found at the read


def test_log_every_must_be_positive(as_rank0_of, tmp_path, capsys):
    as_rank0_of(1)
    assert _run(tmp_path, "z", "--log-every", "0")[0] == 2
    assert "--log-every must be >= 1, got 0" in capsys.readouterr().err
