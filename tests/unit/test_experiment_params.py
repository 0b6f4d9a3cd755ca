"""Notebooks build their parameters dataclass from their `parameters` cell by name
(`nbtools.experiment_params`): every field named there arrives, the rest keep their defaults,
and no parameter a notebook declares is silently dropped."""
import ast
import dataclasses
import importlib
import re
from pathlib import Path

import pytest

pytest.importorskip("plotly", reason="figures and notebook helpers need plotly (some GPU VM images lack it)")

from stanza_core.nbtools import experiment_params

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CALL = re.compile(r"nbt\.experiment_params\((\w+)\.(\w+), globals\(\)\)")
USERS = [p for p in sorted(NOTEBOOKS.glob("*.py")) if CALL.search(p.read_text())]


@dataclasses.dataclass(kw_only=True)
class _Params:
    nodes: int
    steps: int = 3
    label: str = dataclasses.field(init=False)

    def __post_init__(self):
        if self.nodes < 2:
            raise ValueError(f"nodes must be an integer >= 2, got {self.nodes!r}")
        self.label = f"N={self.nodes}, {self.steps} steps"


def test_fields_by_name_defaults_kept_other_names_left_out():
    p = experiment_params(_Params, {"nodes": 4, "out_dir": "x", "label": "not a parameter", "__name__": "m"})
    assert (p.nodes, p.steps, p.label) == (4, 3, "N=4, 3 steps")
    assert experiment_params(_Params, {"nodes": 2, "steps": 5}).steps == 5
    with pytest.raises(ValueError, match="nodes must be an integer >= 2, got 1"):
        experiment_params(_Params, {"nodes": 1})


def test_the_notebooks_with_a_parameters_class_build_it_by_name():
    assert [p.stem for p in USERS] == ["03_throughput", "04_node_assignment", "05_bandwidth_sweep",
                                       "07_model_validation", "09_today_gpus", "10_scale"]


@pytest.mark.parametrize("nb", USERS, ids=lambda p: p.stem)
def test_every_parameter_reaches_the_dataclass_or_a_later_cell(nb):
    src = nb.read_text()
    module, cls = CALL.search(src).groups()
    fields = {f.name for f in dataclasses.fields(getattr(importlib.import_module(f"stanza_core.experiments.{module}"),
                                                         cls)) if f.init}
    params = [n.target.id for n in ast.parse(src).body if isinstance(n, ast.AnnAssign)]
    rest = src[src.index("nbt.experiment_params("):]
    dropped = [n for n in params if n not in fields and not re.search(rf"\b{n}\b", rest)]
    assert params and not dropped, f"{nb.name}: parameters neither in {cls} nor used by a cell: {dropped}"


@pytest.mark.parametrize("stem, cls", [("03_throughput", "throughput.ThroughputParams"),
                                       ("09_today_gpus", "today_gpus.TodayParams")])
def test_the_old_dilation_parameter_is_a_one_line_error_naming_min_dilation(stem, cls):
    """`dilation` (the smallest D) was renamed `min_dilation` (RunConfig.dilation is a run's actual D):
    a saved parameter set or a papermill -p under the old name (papermill passes an undeclared
    parameter on) fails at once, naming the new one: the class's RENAMED, not a field of its own."""
    src = (NOTEBOOKS / f"{stem}.py").read_text()
    ns = {n.target.id: ast.literal_eval(n.value) for n in ast.parse(src).body if isinstance(n, ast.AnnAssign)}
    assert "min_dilation" in ns and "dilation" not in ns
    module, name = cls.split(".")
    klass = getattr(importlib.import_module(f"stanza_core.experiments.{module}"), name)
    assert "dilation" not in {f.name for f in dataclasses.fields(klass)}
    assert experiment_params(klass, {**ns, "min_dilation": 20.0}).min_dilation == 20.0
    with pytest.raises(ValueError, match=r"^the parameter dilation is now min_dilation .*set min_dilation: 20.0$"):
        experiment_params(klass, {**ns, "dilation": 20.0})
