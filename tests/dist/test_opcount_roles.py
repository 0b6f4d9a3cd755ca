"""Every role of a distributed step issues no more operator calls than its model pieces run bare.

One step of each rank of a 3-rank gloo job, counted in the rank (stanza_core.opcount.role_counts):
the engine's calls less the network's own (c10d.* and torch's profiler marks around them),
against the same model pieces run bare on the same shapes (opcount.bare_pieces: forward,
backward and SGD of what the rank trains; a ps server's sum of the pushes and SGD). What the
engine may add on top (copies into buckets and send buffers, the bucket copies back) is bounded
at 5 % of the pieces' own calls; no host read inside the step. The local and ddp steps against
the plain loop and plain DDP: tests/unit/test_opcount.py. Figures: docs/benchmarks.md,
"The engine at its pieces' cost".
"""
import json
import os
import sys
from pathlib import Path

import pytest

from stanza_core import procgroup

from dist_launch import ROOT, rank_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

BOUND = 1.05
SIZES = {"alexnet": ["--image-size", "64"], "resnet50": ["--image-size", "32"], "resnet18": ["--image-size", "32"]}
JOBS = [  # (model, strategy flags): every role of stanza and of both ps deployments
    ("alexnet", ["--strategy", "stanza", "--fc-workers", "1", "--global-batch", "8"]),
    ("resnet50", ["--strategy", "stanza", "--fc-workers", "1", "--global-batch", "8"]),
    ("alexnet", ["--strategy", "ps", "--global-batch", "6"]),
    ("resnet50", ["--strategy", "ps", "--global-batch", "6"]),
    ("resnet18", ["--strategy", "ps", "--global-batch", "6", "--ps-overlap", "--bucket-mb", "5"]),
    ("alexnet", ["--strategy", "ps", "--global-batch", "4", "--ps-servers", "1"]),
]


def all_role_rows(tmp: Path) -> list[list[dict]]:
    """Each rank's row of every job of JOBS (in that order), each job a 3-rank `stanza_core.opcount`
    run, all of them one after another in one torchrun launch (jobs_driver.py); `tmp` an empty
    folder for their files. Also benchmarks/opcount_table.py's."""
    outs = [tmp / f"job{i}" for i in range(len(JOBS))]
    jobs = []
    for (model, flags), out in zip(JOBS, outs):
        out.mkdir()
        jobs.append({"opcount": ["--model", model, *SIZES[model], "--num-classes", "10", "--device", "cpu", "--quiet",
                                 *flags], "out": str(out)})
    spec = tmp / "jobs.json"
    spec.write_text(json.dumps(jobs))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3",
           os.path.join(ROOT, "tests", "dist", "jobs_driver.py"), str(spec)]
    p = procgroup.run(cmd, cwd=ROOT, env=rank_env(), capture_output=True, text=True, timeout_s=540)
    assert p.returncode == 0, p.stderr[-3000:]
    per_job = [[json.loads(f.read_text()) for f in sorted(out.glob("rank*.json"))] for out in outs]
    for rows in per_job:
        assert sorted(r["rank"] for r in rows) == [0, 1, 2], p.stdout[-2000:]
    return per_job


@pytest.fixture(scope="module")
def role_rows(tmp_path_factory):
    return all_role_rows(tmp_path_factory.mktemp("opcount"))


@pytest.mark.parametrize("i", range(len(JOBS)), ids=[f"{m}-{' '.join(f[1:])}" for m, f in JOBS])
def test_each_role_costs_its_pieces_calls(role_rows, i):
    model, flags = JOBS[i]
    rows = role_rows[i]
    roles = {r["role"] for r in rows}
    assert roles == ({"conv_worker", "fc_worker"} if "stanza" in flags else
                     {"worker", "ps_server"} if "--ps-servers" in flags else {"worker"})
    for r in rows:
        assert r["ratio"] <= BOUND, r
        assert r["host_reads"] == [], r
        assert r["network"] > 0, r  # every rank's step does reach the network
