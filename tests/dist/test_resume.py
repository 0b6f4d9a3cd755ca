"""A run stopped and resumed from its checkpoints ends bit for bit where an uninterrupted run does."""
import shutil

import pytest
import torch

from dist_launch import train, train_many

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

COMMON = ["--model", "tiny_cnn", "--image-size", "32", "--global-batch", "12", "--lr", "0.05"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """runs(strategy, n, extra) -> (the checkpoint folder of a run stopped after 3 of 6 steps
    (checkpoints every 2 steps and at the stop), the uninterrupted 6-step run's model, the metrics
    and model of the run resumed from a copy of that folder), made once per strategy in one
    torchrun launch (dist_launch.train_many): the ddp folder also serves
    test_resume_with_other_layout_is_refused. Read-only: a test that resumes again copies it.
    The uninterrupted run goes between the stopped and the resumed one, so whatever a process
    might keep from one job to the next is the end of 6 steps, never the stopped run's state."""
    made = {}

    def get(strategy, n, extra):
        if strategy not in made:
            tmp = tmp_path_factory.mktemp(f"resume-{strategy}")
            args = ["--strategy", strategy, *extra, *COMMON]
            out = train_many(tmp, n, {
                "first": [*args, "--steps", "3", "--checkpoint-dir", str(tmp / "ckpt"), "--checkpoint-every", "2"],
                "whole": [*args, "--steps", "6"],
                "copy": {"copy": [str(tmp / "ckpt"), str(tmp / "resumed-ckpt")]},
                "second": [*args, "--steps", "6", "--checkpoint-dir", str(tmp / "resumed-ckpt"), "--resume"]})
            made[strategy] = tmp / "ckpt", out["whole"][1], out["second"]
        return made[strategy]

    return get


@pytest.mark.parametrize("strategy,n,extra", [("stanza", 4, ["--fc-workers", "2"]), ("ps", 3, []), ("ddp", 2, [])])
def test_stop_and_resume_equals_uninterrupted(runs, strategy, n, extra):
    ckpt, whole, (second, resumed) = runs(strategy, n, extra)
    assert sorted(p.name for p in ckpt.iterdir()) == [f"rank{r:04d}-of-{n:04d}.pt" for r in range(n)]
    assert [s["step"] for s in second["steps"]] == [3, 4, 5]
    assert whole.keys() == resumed.keys()
    for k in whole:
        assert torch.equal(whole[k], resumed[k]), k


def test_resume_with_other_layout_is_refused(tmp_path, runs):
    ckpt = shutil.copytree(runs("ddp", 2, [])[0], tmp_path / "ckpt")  # made with lr 0.05
    _, _, proc = train(tmp_path, "again", 2, "--strategy", "ddp", *COMMON[:-2], "--lr", "0.1", "--steps", "4",
                       "--checkpoint-dir", str(ckpt), "--resume", check=False)
    assert proc.returncode != 0
    assert "error: --resume: checkpoint was made with lr=0.05, this run has 0.1" in proc.stderr


def test_save_every_writes_the_model_after_each_kth_step(tmp_path):
    """Stanza gathers the FC head from its FC worker for every saved model (a collective): the
    model saved after step 2 of a 4-step run is the model of a 2-step run, bit for bit."""
    args = ["--strategy", "stanza", "--fc-workers", "1", *COMMON]
    out = train_many(tmp_path, 3, {"two": [*args, "--steps", "2"],
                                   "four": [*args, "--steps", "4", "--save-every", "2"]})
    two, four = out["two"][1], out["four"][1]
    at2 = torch.load(tmp_path / "four.step2.pt", weights_only=True)
    assert two.keys() == at2.keys() == four.keys()
    for k in two:
        assert torch.equal(two[k], at2[k]), k
    assert not torch.equal(four["classifier.3.weight"], at2["classifier.3.weight"])  # trained on after step 2
    assert not (tmp_path / "four.step4.pt").exists()  # the last step's model is --save itself
