"""Run a tutorial the way `make reproduce` does (papermill, the venv's kernel), into tmp_path."""
import json
import time
from pathlib import Path

import pytest

# The tutorial tests execute notebooks (papermill, nbformat) with figures (plotly): without that stack
# (some GPU VM images) the whole folder is skipped, with the reason.
pytest.importorskip("plotly", reason="tutorials need plotly (the notebook stack)")
pytest.importorskip("papermill", reason="tutorials need papermill (the notebook stack)")
pytest.importorskip("nbformat", reason="tutorials need nbformat (the notebook stack)")
pytest.importorskip("jupytext", reason="tutorials need jupytext (the notebook stack)")

from stanza_core.reproduce import execute

REPO_ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = REPO_ROOT / "tutorials"


@pytest.fixture
def run_tutorial(tmp_path):
    """run_tutorial("t2_one_step", **params) -> (results dict, out_dir, seconds)."""

    def run(stem, **params):
        out = tmp_path / stem
        t0 = time.perf_counter()
        execute(TUTORIALS / f"{stem}.ipynb", tmp_path / f"{stem}.ipynb",
                {"png": False, **params, "out_dir": str(out)}, timeout_s=600, progress_bar=False)
        return json.loads((out / "results.json").read_text()), out, time.perf_counter() - t0

    return run
