"""One plotly.min.js for a whole reproduce output folder (reproduce.plotlyjs): a notebook's HTML
figures and its executed notebook load `<out>/plotly.min.js` by relative path, and no folder keeps
a copy of its own. No kernel runs: seconds."""
import json
import shutil
import subprocess

import plotly.graph_objects as go
import pytest
from plotly.offline import get_plotlyjs

import stanza_core.nbtools as nbt
from stanza_core.reproduce.plotlyjs import PLOTLYJS, share_plotlyjs

INIT = f"<script>window.PlotlyConfig = {{}};</script><script>{get_plotlyjs()}</script>"  # the renderer's init


def _notebook(path, html_outputs):
    cells = [{"cell_type": "code", "execution_count": 1, "metadata": {}, "source": "fig",
              "outputs": [{"output_type": "display_data", "metadata": {}, "data": {"text/html": h}}
                          for h in html_outputs]}]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


@pytest.mark.parametrize("where, src", [("exp", "../plotly.min.js"), ("tutorials/t1_x", "../../plotly.min.js")])
def test_a_folder_loads_the_one_copy_at_the_root(tmp_path, where, src):
    folder = tmp_path / where
    nbt.save_figures({"bars": go.Figure(go.Bar(x=["a", "b"], y=[1, 2]))}, folder, png=False)
    assert (folder / PLOTLYJS).is_file()  # save_figures alone: a copy beside the figures
    _notebook(folder / "run.ipynb", [INIT, "<div>a figure</div>"])
    assert share_plotlyjs(folder, tmp_path) == src
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob(PLOTLYJS)] == [PLOTLYJS]
    assert (tmp_path / PLOTLYJS).read_text() == get_plotlyjs()
    figure = (folder / "bars.html").read_text()
    assert f'src="{src}"' in figure and "Plotly.newPlot" in figure and len(figure) < 100_000
    outputs = json.loads((folder / "run.ipynb").read_text())["cells"][0]["outputs"]
    html = [o["data"]["text/html"] for o in outputs]
    assert html[0] == f'<script>window.PlotlyConfig = {{}};</script><script charset="utf-8" src="{src}"></script>'
    assert html[1] == "<div>a figure</div>"
    share_plotlyjs(folder, tmp_path)  # twice is once
    assert json.loads((folder / "run.ipynb").read_text())["cells"][0]["outputs"][0]["data"]["text/html"] == html[0]


def test_the_shared_figure_draws_offline(tmp_path):
    """A headless Chromium draws the figure from the shared copy with no network, and draws
    nothing once that copy is gone (so the check can fail)."""
    from choreographer.browsers.chromium import Chromium

    browser = Chromium.find_browser(skip_local=False)
    if not browser:
        pytest.skip("no Chrome/Chromium here")
    folder = tmp_path / "exp"
    nbt.save_figures({"bars": go.Figure(go.Bar(x=["a", "b"], y=[1, 2]))}, folder, png=False)
    share_plotlyjs(folder, tmp_path)

    def drawn() -> bool:
        dom = subprocess.run([str(browser), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                              "--dump-dom", (folder / "bars.html").as_uri()], capture_output=True, text=True,
                             timeout=120).stdout
        return 'class="main-svg"' in dom

    assert drawn()
    shutil.move(tmp_path / PLOTLYJS, tmp_path / "elsewhere.js")
    assert not drawn()
