"""The lecture decks (tutorials/lectures/l*_*.ipynb): a jupytext pair in sync, committed without
outputs, a parameters cell with out_dir, reveal.js slide types on the cells; executed, their
checks hold and nbconvert renders them as slides; the gallery links the slides."""
import json
import re
from pathlib import Path

import jupytext
import nbformat
import pytest

from stanza_core.reproduce import execute
from stanza_core.reproduce.gallery import _export_slides, lecture_notebooks, write_gallery

LECTURES = lecture_notebooks()


def test_there_is_a_deck_per_lecture():
    assert [p.stem for p in LECTURES] == ["l1_two_programs", "l2_moving_gradients", "l3_overlap", "l4_bytes_to_seconds"]


@pytest.mark.parametrize("nb_path", LECTURES, ids=lambda p: p.stem)
def test_lecture_is_complete(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and re.search(r"^out_dir: str = ", params[0].source, re.M)
    slides = [c for c in nb.cells if c.metadata.get("slideshow", {}).get("slide_type") == "slide"]
    assert len(slides) >= 4 and all(c.cell_type == "markdown" for c in slides)
    text = jupytext.read(nb_path.with_suffix(".py"))
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in text.cells]


def test_gallery_links_the_slides(tmp_path):
    stem = LECTURES[1].stem
    folder = tmp_path / "tutorials" / stem
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({"name": stem, "title": "L2", "status": "ok",
                                                    "html": f"{stem}.html", "slides": f"{stem}.slides.html"}))
    page = write_gallery(tmp_path, [], tutorials=[]).read_text()
    assert f"tutorials/{stem}/{stem}.slides.html" in page and "(slides)" in page


@pytest.mark.slow
def test_l2_runs_its_checks_hold_and_renders_as_slides(tmp_path):
    nb = LECTURES[1]
    out = tmp_path / "out"
    executed = tmp_path / nb.name
    execute(nb, executed, {"png": False, "out_dir": str(out)}, timeout_s=600, progress_bar=False)
    r = json.loads((out / "results.json").read_text())
    assert r["ring_exact"] is True and r["ring_sent"] == r["ring_model_sent"]
    assert r["same_bytes"] is True
    assert [role for _, role in r["timeline_roles"]] == ["conv_worker", "conv_worker", "fc_worker"]
    for key in ("ring_steps", "ps_vs_ring", "stanza_step"):
        assert (out / f"{key}.plotly.json").is_file()
    slides = _export_slides(executed).read_text()
    assert slides.count("<section") >= 4 and "import torch" not in slides  # code hidden, one section a slide


def _run(stem, tmp_path):
    nb = next(p for p in LECTURES if p.stem == stem)
    out, executed = tmp_path / "out", tmp_path / nb.name
    execute(nb, executed, {"png": False, "out_dir": str(out)}, timeout_s=600, progress_bar=False)
    slides = _export_slides(executed).read_text()
    assert slides.count("<section") >= 4 and "import torch" not in slides and "import plotly" not in slides
    return json.loads((out / "results.json").read_text()), out


@pytest.mark.slow
def test_l1_shares_split_and_bytes(tmp_path):
    r, out = _run("l1_two_programs", tmp_path)
    assert r["shares"]["alexnet"]["fc_param_share"] == pytest.approx(0.960, abs=5e-4)
    assert r["split_max_abs_diff"] < 1e-5 and r["boundary"] == "avgpool"
    b = r["bytes"]
    assert b["alexnet"]["ddp"] / b["alexnet"]["stanza"] > 20 and b["resnet50"]["ddp"] / b["resnet50"]["stanza"] < 1.3
    assert round(b["resnet50"]["stanza"] / 1e6) == 1132  # notebook 02's figure (N = 8, b = 32, k = 1)
    assert (out / "part_shares.plotly.json").is_file() and (out / "bytes_per_step.plotly.json").is_file()


@pytest.mark.slow
def test_l3_buckets_inside_the_backward_measured_and_modelled(tmp_path):
    r, out = _run("l3_overlap", tmp_path)
    assert all(v["buckets"] > 1 and v["backward_left"] > 0.3 for v in r["measured"]["small"].values())
    assert all(v["buckets"] == 1 and v["backward_left"] < 0.1 for v in r["measured"]["one"].values())
    assert r["saved_at_10_ms"] > 0.3 * r["backward_ms"]
    for key in ("timeline_buckets", "timeline_one_bucket", "modelled_overlap"):
        assert (out / f"{key}.plotly.json").is_file()


@pytest.mark.slow
def test_l4_model_choice_and_ps_limit(tmp_path):
    r, out = _run("l4_bytes_to_seconds", tmp_path)
    assert r["best"]["strategy"] == "stanza"
    assert r["ps_over_stanza"][r["b"].index(32)] == pytest.approx(8.92, abs=0.01) and r["p_over_pc"] == pytest.approx(9.40, abs=0.01)
    assert r["step_ms"]["stanza k=1"] < r["step_ms"]["ddp"] < r["step_ms"]["ps"]
    for key in ("breakdown", "throughput_vs_k", "ps_over_stanza"):
        assert (out / f"{key}.plotly.json").is_file()
