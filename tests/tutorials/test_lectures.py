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


def test_there_is_a_lecture_deck():
    assert [p.stem for p in LECTURES] == ["l2_moving_gradients"]


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
    stem = LECTURES[0].stem
    folder = tmp_path / "tutorials" / stem
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({"name": stem, "title": "L2", "status": "ok",
                                                    "html": f"{stem}.html", "slides": f"{stem}.slides.html"}))
    page = write_gallery(tmp_path, [], tutorials=[]).read_text()
    assert f"tutorials/{stem}/{stem}.slides.html" in page and "(slides)" in page


@pytest.mark.slow
def test_l2_runs_its_checks_hold_and_renders_as_slides(tmp_path):
    nb = LECTURES[0]
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
