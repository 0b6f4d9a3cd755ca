"""Convergence figures (viz.convergence) and the logic of notebook 06 that needs no job:
plan validation, held-out digits, accuracy of a saved model."""
import pytest
import torch

pytest.importorskip("plotly", reason="figures and notebook helpers need plotly (some GPU VM images lack it)")

from stanza_core import get_model, viz
from stanza_core.experiments import convergence as C


def _results():
    p = C.plan(model="tiny_cnn", nodes=3, global_batch=24, steps=4, eval_every=2)
    loss = [2.3, 2.2, 2.0, 1.9]
    runs = {}
    for i, s in enumerate(p["strategies"]):
        steps = [{"step": t, "loss": l + 1e-7 * i, "time_s": 0.1, "wall_s": 0.1 * (t + 1)} for t, l in enumerate(loss)]
        evals = [{"step": e, "wall_s": 0.1 * e, "accuracy_all": 0.2 * e / 2, "accuracy_heldout": 0.15 * e / 2}
                 for e in (2, 4)]
        runs[s] = {"strategy": s, "nodes": 1 if s == "local" else 3, "fc_workers": 1 if s == "stanza" else None,
                   "steps": steps, "evals": evals, "final_loss": steps[-1]["loss"], "final_accuracy": 0.4,
                   "final_accuracy_heldout": 0.3, "train_time_s": 0.4, "step_time_median_s": 0.1}
    return C.results(p, runs)


def test_results_and_figures():
    r = _results()
    assert r["strategies"]["stanza"]["max_loss_diff_vs_local"] == pytest.approx(3e-7)
    assert r["max_loss_diff_vs_local"] == pytest.approx(3e-7)
    assert r["strategies"]["stanza"]["first_step_loss_gap_above"] is None  # every gap below 1e-4
    assert (r["dataset_size"], r["heldout_size"]) == (1797, 1797 - 4 * 24)
    figs = viz.convergence_figures(r)
    loss = figs["loss"]
    by = {(t.legendgroup, t.xaxis): t for t in loss.data}
    assert list(by[("stanza", "x")].y) == [s["loss"] for s in r["strategies"]["stanza"]["steps"]]
    assert list(by[("ps", "x2")].x) == pytest.approx([0.1, 0.2, 0.3, 0.4])
    acc = [t for t in figs["accuracy"].data if t.legendgroup == "ddp" and t.xaxis == "x"]
    assert [list(t.y) for t in acc] == [[0.2, 0.4], [0.15, 0.3]]  # all digits, held out
    diff = {t.name: t for t in figs["loss_difference"].data}
    assert list(diff["ddp (N = 3)"].y) == pytest.approx([2e-7] * 4)
    assert list(figs["table"].data[0].cells.values[0]) == ["local", "ps (N = 3)", "ddp (N = 3)",
                                                          "stanza (N = 3, k = 1)"]


def test_heldout_digits_are_those_never_drawn():
    p = C.plan(model="tiny_cnn", nodes=3, global_batch=24, steps=10)
    held, size = C.heldout_indices(p)
    assert size == 1797 and len(held) == 1797 - 240 and held == sorted(held)
    p = C.plan(model="tiny_cnn", nodes=3, global_batch=24, steps=75)  # 1800 >= 1797: the whole set
    assert C.heldout_indices(p)[0] == []


def test_accuracy_of_a_saved_model(tmp_path):
    torch.manual_seed(0)
    net = get_model("tiny_cnn", 10)
    with torch.no_grad():  # a model that always answers class 3
        for m in net.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.zero_()
                m.bias.zero_()
        net.classifier[-1].bias[3] = 1.0
    path = tmp_path / "m.pt"
    torch.save(net.state_dict(), path)
    from sklearn.datasets import load_digits
    y = load_digits().target
    assert C.accuracy("tiny_cnn", str(path), 32) == pytest.approx((y == 3).mean())
    threes = [i for i in range(len(y)) if y[i] == 3][:10]
    assert C.accuracy("tiny_cnn", str(path), 32, indices=threes + [int((y != 3).argmax())]) == pytest.approx(10 / 11)


@pytest.mark.parametrize("kwargs, message", [
    (dict(global_batch=25), "global_batch 25 is not divisible by the 3 data workers of ps on 3 nodes"),
    (dict(fc_workers=2), "fc_workers 2 with 3 nodes: expected 1 <= k <= 1"),
    (dict(strategies=["ps", "stanza"]), "strategies must include local"),
    (dict(strategies=["local", "async"]), "strategies must be distinct names from"),
    (dict(model="nope"), "unknown model 'nope'"),
    (dict(momentum=1.0), "lr must be > 0 and momentum in [0, 1)"),
])
def test_plan_rejects_bad_parameters_in_one_line(kwargs, message):
    with pytest.raises(ValueError) as e:
        C.plan(**kwargs)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_plan_segments():
    assert C.plan(steps=60, eval_every=15)["eval_steps"] == [15, 30, 45, 60]
    assert C.plan(steps=50, eval_every=20)["eval_steps"] == [20, 40, 50]
    assert C.plan(steps=60)["eval_steps"] == [60]
