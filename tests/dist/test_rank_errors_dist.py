"""A failed job is summed up by the exception its failing rank raised, read from torchrun's error
file (@record on train's main), not by the peer that noticed the failure afterwards.

Rank 1's model (below; the ranks import this module by name) raises in its fourth forward, a step
into training; rank 0 then prints its own one-line error about the closed connection, which is what
the text of stderr alone would have blamed."""
from __future__ import annotations

import os

import pytest
import torch.nn as nn

from stanza_core.launch import JobError, run_job

HERE = os.path.dirname(os.path.abspath(__file__))


class FailsOnRank1(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                                 nn.Linear(16, num_classes))
        self.calls = 0

    def forward(self, x):
        self.calls += 1  # the first calls are the launcher's checks of the model: let them pass
        if self.calls > 3 and os.environ.get("RANK") == "1":
            raise RuntimeError("boom on rank 1")
        return self.net(x)


@pytest.mark.slow
def test_a_rank_exception_is_read_from_its_error_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", HERE)  # run_job puts the repository first
    with pytest.raises(JobError) as err:
        run_job(nodes=2, strategy="ddp", model="test_rank_errors_dist:FailsOnRank1", global_batch=4, image_size=32,
                steps=6, device="cpu", workdir=str(tmp_path), timeout_s=120)
    assert str(err.value) == "ddp-test_rank_errors_dist_FailsOnRank1-n2-k0: rank 1 raised RuntimeError: boom on rank 1 (exit 1)"
