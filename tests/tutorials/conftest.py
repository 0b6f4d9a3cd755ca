"""Run a tutorial the way `make reproduce` does (papermill, the venv's kernel), into tmp_path."""
import json
import time
from pathlib import Path

import pytest

# The tutorial tests execute notebooks (papermill, nbformat, ipykernel) with figures (plotly): without
# that stack (not on every GPU VM image) the folder is skipped, with the reason, in a whole-suite run.
for _pkg in ("plotly", "papermill", "nbformat", "jupytext", "ipykernel"):
    pytest.importorskip(_pkg, reason=f"the tutorial tests need {_pkg} (the notebook stack)")

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
