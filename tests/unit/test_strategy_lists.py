"""The registry is the only list of strategies: no other module of the package spells out two or
more strategy names together (a tuple, list or set literal, an `in (...)` test, or a table of
constants keyed by strategy), so a strategy added to the registry is never missing from a list
somewhere else. A strategy named alone (`strategy == "stanza"`: that strategy's own rule) is
fine, and so is a record of results keyed by the strategies they belong to. Outside the package,
notebooks, tutorials, benchmarks and scripts name the strategies an experiment runs (their
parameters): a choice of what to measure, not a list of what exists."""
from __future__ import annotations

import ast
from pathlib import Path

from stanza_core import registry

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stanza_core"


def literal_lists(path: Path, names: set[str], root: Path = ROOT) -> list[str]:
    """`path:line` of every literal that holds two or more of `names` as string constants."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict) and all(isinstance(v, ast.Constant) for v in node.values):
            items = [k for k in node.keys if k is not None]  # a table per strategy (a record's computed
            # fields, {"ddp": a.ddp.throughput, ...}, name results, not strategies)
        else:
            continue
        found = {e.value for e in items if isinstance(e, ast.Constant) and e.value in names}
        if len(found) >= 2:
            out.append(f"{path.relative_to(root)}:{node.lineno} {sorted(found)}")
    return out


def test_no_module_but_the_registry_lists_strategies():
    names = set(registry.names())
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path.name != "registry.py" or path.parent != PACKAGE
             for hit in literal_lists(path, names)]
    assert found == []


def test_the_search_finds_a_planted_list(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('ok = strategy == "stanza"\nBAD = {"ddp": 1, "stanza": 2}\nif s in ("ps", "ddp"):\n    pass\n'
                       'record = {"ddp": a.ddp, "ps": a.ps}\n')
    hits = [h.split(" ")[0].rsplit(":", 1)[1] for h in literal_lists(planted, set(registry.names()), tmp_path)]
    assert hits == ["2", "3"]

