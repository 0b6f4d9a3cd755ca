"""--log-every K on several ranks: loss shares read every K steps (one allreduce of their sum per
read) train exactly as reading every step does, and every step keeps its loss and time."""
from __future__ import annotations

import pytest

from dist_launch import assert_same_params, train

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_stanza_reading_every_4_steps_equals_local(tmp_path, local_run):
    common = ["--model", "tiny_cnn", "--image-size", "32", "--global-batch", "24", "--steps", "6", "--lr", "0.05"]
    ref, ref_state, _ = local_run(*common)  # test_exactness.py's tiny_cnn oracle, when it ran first
    got, state, _ = train(tmp_path, "stanza", 3, "--strategy", "stanza", "--fc-workers", "1", "--log-every", "4",
                          *common)
    assert_same_params(state, ref_state)
    assert [s["step"] for s in got["steps"]] == list(range(6))
    assert [s["loss"] for s in got["steps"]] == pytest.approx([s["loss"] for s in ref["steps"]], rel=1e-5)
    for r in got["ranks"]:
        assert len(r["step_start_s"]) == len(r["step_end_s"]) == 6
        assert all(b > a for a, b in zip(r["step_start_s"], r["step_end_s"]))
