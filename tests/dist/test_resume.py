"""A run stopped and resumed from its checkpoints ends bit for bit where an uninterrupted run does."""
import shutil

import pytest
import torch

from dist_launch import train

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

COMMON = ["--model", "tiny_cnn", "--image-size", "32", "--global-batch", "12", "--lr", "0.05"]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """stopped(strategy, n, extra) -> the checkpoint folder of a run stopped after 3 of 6 steps
    (checkpoints every 2 steps and at the stop), made once per strategy: the ddp one also serves
    test_resume_with_other_layout_is_refused. Read-only: a test that resumes copies it."""
    made = {}

    def get(strategy, n, extra):
        if strategy not in made:
            tmp = tmp_path_factory.mktemp(f"stopped-{strategy}")
            train(tmp, "first", n, "--strategy", strategy, *extra, *COMMON, "--steps", "3",
                  "--checkpoint-dir", str(tmp / "ckpt"), "--checkpoint-every", "2")
            made[strategy] = tmp / "ckpt"
        return made[strategy]

    return get


@pytest.mark.parametrize("strategy,n,extra", [("stanza", 4, ["--fc-workers", "2"]), ("ps", 3, []), ("ddp", 2, [])])
def test_stop_and_resume_equals_uninterrupted(tmp_path, stopped, strategy, n, extra):
    args = ["--strategy", strategy, *extra, *COMMON]
    _, whole, _ = train(tmp_path, "whole", n, *args, "--steps", "6")
    ckpt = shutil.copytree(stopped(strategy, n, extra), tmp_path / "ckpt")
    assert sorted(p.name for p in ckpt.iterdir()) == [f"rank{r:04d}-of-{n:04d}.pt" for r in range(n)]
    second, resumed, _ = train(tmp_path, "second", n, *args, "--steps", "6", "--checkpoint-dir", str(ckpt), "--resume")
    assert [s["step"] for s in second["steps"]] == [3, 4, 5]
    assert whole.keys() == resumed.keys()
    for k in whole:
        assert torch.equal(whole[k], resumed[k]), k


def test_resume_with_other_layout_is_refused(tmp_path, stopped):
    ckpt = shutil.copytree(stopped("ddp", 2, []), tmp_path / "ckpt")  # made with lr 0.05
    _, _, proc = train(tmp_path, "again", 2, "--strategy", "ddp", *COMMON[:-2], "--lr", "0.1", "--steps", "4",
                       "--checkpoint-dir", str(ckpt), "--resume", check=False)
    assert proc.returncode != 0
    assert "error: --resume: checkpoint was made with lr=0.05, this run has 0.1" in proc.stderr


def test_save_every_writes_the_model_after_each_kth_step(tmp_path):
    """Stanza gathers the FC head from its FC worker for every saved model (a collective): the
    model saved after step 2 of a 4-step run is the model of a 2-step run, bit for bit."""
    args = ["--strategy", "stanza", "--fc-workers", "1", *COMMON]
    _, two, _ = train(tmp_path, "two", 3, *args, "--steps", "2")
    _, four, _ = train(tmp_path, "four", 3, *args, "--steps", "4", "--save-every", "2")
    at2 = torch.load(tmp_path / "four.step2.pt", weights_only=True)
    assert two.keys() == at2.keys() == four.keys()
    for k in two:
        assert torch.equal(two[k], at2[k]), k
    assert not torch.equal(four["classifier.3.weight"], at2["classifier.3.weight"])  # trained on after step 2
    assert not (tmp_path / "four.step4.pt").exists()  # the last step's model is --save itself
