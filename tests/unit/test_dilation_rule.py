"""The smallest D and the engine term are one value (runs.dilation_rule.DilationRule), declared
once: its checks, the flat form results JSONs keep (MeasureSpec.to_dict), and a parse of the
package that fails where `min_dilation` is declared as a dataclass field a second time."""
import ast
import json
from pathlib import Path

import pytest

from stanza_core.runs.dilation_rule import LINKS_ONLY, DilationParams, DilationRule
from stanza_core.runs.spec import MeasureSpec

PACKAGE = Path(__file__).resolve().parents[2] / "stanza_core"


@pytest.mark.parametrize("kw, message", [
    ({"floor": 0}, "min_dilation must be > 0, got 0"),
    ({"floor": -3.0}, "min_dilation must be > 0, got -3.0"),
    ({"floor": "20"}, "min_dilation must be a finite number, got '20'"),
    ({"floor": True}, "min_dilation must be a finite number, got True"),
    ({"floor": float("inf")}, "min_dilation must be a finite number, got inf"),
    ({"engine": "yes"}, "replay_engine must be true or false, got 'yes'"),
    ({"engine": 1}, "replay_engine must be true or false, got 1"),
])
def test_the_rule_is_checked_on_creation_in_one_line(kw, message):
    with pytest.raises(ValueError) as e:
        DilationRule(**kw)
    assert str(e.value) == message


def test_the_notebook_parameters_make_the_rule_with_the_rule_s_defaults():
    assert DilationParams().dilation_rule == DilationRule() == DilationRule(floor=1.0, engine=True)
    assert DilationParams(min_dilation=20, replay_engine=False).dilation_rule == DilationRule(floor=20, engine=False)
    assert LINKS_ONLY == DilationRule(engine=False)
    with pytest.raises(ValueError, match="^min_dilation must be > 0, got 0$"):
        _ = DilationParams(min_dilation=0).dilation_rule


def test_measure_spec_to_dict_keeps_min_dilation_and_engine_flat_in_their_place():
    """The results JSONs' `spec` and `config` (MeasureSpec.to_dict) hold the fields in the order
    and form they had before the rule was one value: min_dilation and engine after replay_device."""
    spec = MeasureSpec(model="alexnet", image_size=224, num_classes=1000, nodes=4, strategies=["ddp"], fc_workers=[1],
                       batch_per_worker=32, steps=3, target_gbps=[10.0], compute="replay", replay_device="v100",
                       dilation_rule=DilationRule(floor=20, engine=True))
    d = spec.to_dict()
    assert list(d) == ["model", "image_size", "num_classes", "nodes", "strategies", "fc_workers", "global_batch",
                       "batch_per_worker", "steps", "warmup", "target_gbps", "link_mbit", "target_device", "repeats",
                       "delay_ms", "mtu", "max_link_mbit", "timing_reps", "boundary", "compute", "replay_device",
                       "min_dilation", "engine", "ps_servers", "ps_overlap"]
    assert (d["min_dilation"], d["engine"], d["replay_device"]) == (20, True, "v100")
    assert json.dumps(d["min_dilation"]) == "20"  # as given: a notebook's int stays an int in results.json
    real = MeasureSpec(model="tiny_cnn", image_size=16, num_classes=10, nodes=3, strategies=["ddp"], fc_workers=[1],
                       global_batch=12, steps=3, link_mbit=[100.0]).to_dict()
    assert (real["min_dilation"], real["engine"]) == (1.0, False) and "dilation_rule" not in real


def field_declarations(source: str, name: str, where: str) -> list[str]:
    """'<where>:<line> <Class>' for every field `name` declared in a dataclass of `source` (a class
    decorated with dataclass / dataclasses.dataclass, called or not; ClassVar annotations are no field)."""
    def is_dataclass(dec: ast.expr) -> bool:
        f = dec.func if isinstance(dec, ast.Call) else dec
        return (isinstance(f, ast.Name) and f.id == "dataclass") or (isinstance(f, ast.Attribute) and f.attr == "dataclass")

    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and any(is_dataclass(d) for d in node.decorator_list):
            for stmt in node.body:
                if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name
                        and "ClassVar" not in ast.unparse(stmt.annotation)):
                    out.append(f"{where}:{stmt.lineno} {node.name}")
    return out


def package_declarations(name: str) -> list[str]:
    return [d for path in sorted(PACKAGE.rglob("*.py"))
            for d in field_declarations(path.read_text(), name, path.relative_to(PACKAGE.parent).as_posix())]


def check_declared_once(found: list[str]) -> None:
    """A ValueError unless `found` is the one declaration, DilationParams's in runs/dilation_rule.py."""
    if len(found) != 1 or not (found[0].startswith("stanza_core/runs/dilation_rule.py:")
                               and found[0].endswith(" DilationParams")):
        raise ValueError(f"min_dilation is declared as a dataclass field in {len(found)} places "
                         f"(one expected, DilationParams): {found}")


def test_min_dilation_is_declared_as_a_dataclass_field_once_in_the_package():
    check_declared_once(package_declarations("min_dilation"))


def test_the_declaration_check_fails_on_a_planted_second_declaration():
    planted = ("import dataclasses\nfrom dataclasses import dataclass\n\n"
               "@dataclasses.dataclass(kw_only=True)\nclass Spec:\n    min_dilation: float = 1.0\n\n"
               "@dataclass\nclass Point:\n    x: int\n    min_dilation: float\n\n"
               "class Plain:\n    min_dilation: float = 1.0  # no dataclass: no field\n\n"
               "@dataclasses.dataclass\nclass Params:\n    min_dilation: ClassVar[float] = 1.0  # no field\n")
    got = field_declarations(planted, "min_dilation", "stanza_core/runs/planted.py")
    assert got == ["stanza_core/runs/planted.py:6 Spec", "stanza_core/runs/planted.py:11 Point"]
    with pytest.raises(ValueError, match=r"^min_dilation is declared as a dataclass field in 2 places"):
        check_declared_once(package_declarations("min_dilation") + got[:1])
