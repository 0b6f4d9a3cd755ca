"""The full grid asks each experiment for its replayed runs: every experiment whose notebook
replays registers its parameters class (runs.replayed.in_grid), and reproduce/grid.py
builds it from the notebook's parameters with no list of notebooks or modules of its own and
without changing the working directory."""
from __future__ import annotations

import dataclasses
import os

import pytest

pytest.importorskip("papermill", reason="the grid reads notebook parameters with papermill")

from stanza_core.runs import replayed
from stanza_core.experiments import grid_experiments
from stanza_core.runs.store import points
from stanza_core.reproduce import grid
from stanza_core.reproduce.spec import REPO_ROOT, load_specs

pytestmark = pytest.mark.slow


def test_every_registered_experiment_has_its_notebook_and_replays_in_full_mode():
    registered = grid_experiments()
    specs = {s.notebook.stem: s for s in load_specs(REPO_ROOT / "reproductions")}
    assert registered and set(registered) <= set(specs)  # each names a notebook the reproduction runs
    here = os.getcwd()
    for stem, spec in specs.items():
        got = grid.replayed_specs(spec, "full")
        assert os.getcwd() == here
        assert bool(got) == (stem in registered), stem  # a notebook that registers nothing replays nothing
        assert all(ms.replayed and points(ms) for ms in got)


def test_a_registered_experiment_is_asked_for_its_specs(monkeypatch, tmp_path):
    """A new experiment is found by its registration alone; paths among its parameters are the
    notebook's."""
    asked = {}
    real = grid.replayed_specs(next(s for s in load_specs(REPO_ROOT / "reproductions")
                                    if s.notebook.stem == "04_node_assignment"), "quick")

    @replayed.in_grid("99_planted")
    @dataclasses.dataclass(kw_only=True)
    class Planted:
        inputs: list[str]
        measure_runs: bool = True
        PATHS = ("inputs",)

        def __post_init__(self):
            asked["inputs"] = self.inputs

        def grid_specs(self):
            return real[:1]

    try:
        spec = type("S", (), {"notebook": tmp_path / "nb" / "99_planted.ipynb"})()
        monkeypatch.setattr(grid, "notebook_parameters", lambda s, mode: {"inputs": ["a.json", "/abs/b.json"]})
        got = grid.replayed_specs(spec, "quick")
        assert len(got) == 1 and got[0].replayed
        assert asked["inputs"] == [str(tmp_path / "nb" / "a.json"), "/abs/b.json"]
    finally:
        replayed.GRID.pop("99_planted")
