"""Every tutorial runs headlessly (papermill) and its checks hold: tutorials/t1_anatomy.ipynb,
t2_one_step.ipynb, t3_plain_distributed.ipynb, t4_overlap.ipynb, t5_performance_model.ipynb.
Each notebook asserts its own checks (a failing assert fails the run); these tests read the
numbers back from its results.json. Tolerances: gradients and parameters are fp32 sums taken in
a different order (1e-6 / 1e-5); bytes are exact."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from stanza_core import get_model
from stanza_core.data import batch_indices, open_dataset
from stanza_core.launch import job_env
from stanza_core.models import sample_keys

TUTORIALS = Path(__file__).resolve().parents[2] / "tutorials"

pytestmark = pytest.mark.slow  # each starts a kernel; t3 / t4 / t5 launch torchrun jobs


def test_t1_anatomy_split_is_exact_and_the_cut_is_the_cheapest(run_tutorial):
    r, out, _ = run_tutorial("t1_anatomy", image_size=64)
    assert r["max_abs_diff"] < 1e-5
    assert (r["conv_params"], r["fc_params"]) == (2_469_696, 58_631_144)  # AlexNet at any input size
    assert r["boundary"] == r["cheapest_cut"] == "avgpool"
    assert r["fc_param_share"] == pytest.approx(0.960, abs=5e-4)
    costs = {c["next"]: c["bytes"] for c in r["candidates"]}
    assert min(costs, key=costs.get) == "avgpool" and len(costs) >= 3
    for key in ("shares", "cuts", "table", "layers"):
        assert (out / f"{key}.plotly.json").is_file()


def test_t2_one_step_ledger_equals_the_model_and_gradients_equal_local(run_tutorial):
    r, out, _ = run_tutorial("t2_one_step")
    assert r["ledger_equals_model"] is True
    assert r["max_grad_diff"] < 1e-6 and r["loss"] == pytest.approx(r["local_loss"], rel=1e-6)
    # N = 3, k = 1: 2 x (activations + labels) out, 2 gradients back, a 2-member CONV ring
    assert r["messages"] == 8
    cats = sorted(m["category"] for m in r["ledger"])
    assert cats == sorted(["activations"] * 2 + ["labels"] * 2 + ["activation_grads"] * 2 + ["conv_grads"] * 2)
    assert (out / "ledger_diagram.plotly.json").is_file()


def test_t2_one_step_with_two_fc_workers(run_tutorial):
    r, _, _ = run_tutorial("t2_one_step", nodes=4, fc_workers=2, global_batch=8)
    assert r["ledger_equals_model"] is True and r["max_grad_diff"] < 1e-6
    assert sum(m["category"] == "fc_grads" for m in r["ledger"]) == 2  # the 2-member FC ring


def test_t3_plain_script_equals_the_engine(run_tutorial):
    r, _, _ = run_tutorial("t3_plain_distributed")
    assert r["tensors_compared"] == 8 and r["max_param_diff"] < 1e-5
    assert r["bytes_match"] is True and r["plain_sent_per_step"] == r["engine_sent_per_step"]


def test_t4_overlap_timeline_shows_buckets_inside_the_backward(run_tutorial):
    r, out, _ = run_tutorial("t4_overlap", steps=2)
    assert all(v["buckets"] > 1 for v in r["small_buckets"].values())
    assert all(v["buckets"] == 1 for v in r["one_bucket"].values())
    for rank, bars in r["intervals"].items():
        if int(rank) < 3:  # CONV workers: the first bucket leaves before the backward ends
            backward = next(b for b in bars if b["what"] == "backward")
            first = min(b["start"] for b in bars if b["what"] == "allreduce")
            assert first < backward["end"]
        else:  # the FC worker computed one chunk per CONV worker
            assert sorted(b["peer"] for b in bars if b["what"] == "FC forward + backward") == [0, 1, 2]
    assert (out / "timeline.plotly.json").is_file() and (out / "timeline_one_bucket.plotly.json").is_file()
    # modelled: buckets never end later than one bucket, and at 10 Gb/s they hide a visible share
    for row in r["modelled"]:
        assert row["buckets"]["exposed_ms"] <= row["one_bucket"]["exposed_ms"] + 1e-9
        assert row["one_bucket"]["buckets"] == 1 < row["buckets"]["buckets"]
    at10 = next(row for row in r["modelled"] if row["gbps"] == 10.0)
    assert at10["one_bucket"]["exposed_ms"] - at10["buckets"]["exposed_ms"] > 0.3 * at10["backward_ms"]
    assert (out / "modelled_overlap.plotly.json").is_file()


def test_t5_performance_model_predicts_the_bytes_of_a_run(run_tutorial):
    r, _, _ = run_tutorial("t5_performance_model")
    assert r["bytes_exact"] is True
    assert r["by_hand"]["ring_s"] == pytest.approx(r["model_costs"]["ring_s"], rel=1e-12)
    assert r["by_hand"]["transfer_s"] == pytest.approx(r["model_costs"]["transfer_s"], rel=1e-12)
    p = r["predictions"]
    # a colocated sharded PS moves exactly a ring allreduce's cluster total (even shards)
    assert p["stanza"]["bytes_per_step"] < p["ddp"]["bytes_per_step"] <= p["ps"]["bytes_per_step"]
    assert r["best"]["strategy"] == "stanza"  # VGG-16, 16 V100s, 10 Gb/s (modelled)


def test_t3_plain_script_with_two_fc_workers_equals_local_sgd(tmp_path):
    """t3_stanza_step.py alone (no engine) on N = 4, k = 2: one momentum-SGD step of one process
    on the whole batch."""
    N, k, G, seed = 4, 2, 8, 0
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={N}",
           str(TUTORIALS / "t3_stanza_step.py"), "--fc-workers", str(k), "--global-batch", str(G), "--steps", "1",
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, env=job_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = {}
    for r in range(N):
        got.update(torch.load(tmp_path / f"rank{r}.pt", weights_only=True)["params"])
    torch.manual_seed(seed)
    model = get_model("tiny_cnn", 10)
    data = open_dataset("synthetic", 16, 10, seed)
    x, y = data.get(batch_indices(data, 0, G, seed, slice(0, G)))
    with sample_keys(seed, 0, torch.arange(G)):
        (F.cross_entropy(model(x), y, reduction="sum") / G).backward()
    torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9).step()
    assert got.keys() == dict(model.named_parameters()).keys()
    for n, p in model.named_parameters():
        torch.testing.assert_close(got[n], p.detach(), rtol=1e-5, atol=1e-6)
