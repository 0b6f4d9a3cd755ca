"""No module outside a strategy's own folder compares a strategy's name: what differs between
strategies is read from their records (registry.py: roles, layout, split, exchange, options, ...),
so a strategy added as a folder is never mistaken for another (drawn as a parameter server,
labelled without its options, laid out as ddp). A comparison is `==`, `!=`, `in`, `not in`, `is`
or `is not` with a registered name as a string constant on either side (or inside a literal
tuple, list or set on either side). stanza_core/strategies/<name>/ may compare names: it is that
strategy's own code.

REMAINING lists the comparisons not yet replaced by a record's attribute, as (file, line text):
the test fails on any comparison not in it, and on an entry that is gone, so the list only
shrinks (delete the entry when the comparison goes)."""
from __future__ import annotations

import ast
from pathlib import Path

from stanza_core import registry

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stanza_core"

REMAINING = {  # (file, stripped line text); Assignment.ddp is the ddp candidate by its field's name
    ("stanza_core/perf/optimize.py", 'ddp = next(p for p in cands if p.strategy == "ddp")'),
}


def _constants(node: ast.AST) -> list:
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return []


def name_comparisons(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, stripped line text) of every comparison of a string constant in `names`."""
    lines = source.splitlines()
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(
                isinstance(c, str) and c in names for side in (node.left, *node.comparators) for c in _constants(side)):
            out.append((node.lineno, lines[node.lineno - 1].strip()))
    return sorted(set(out))


def own_folder(path: Path) -> bool:
    """A file inside stanza_core/strategies/<name>/ (the strategy's own code)."""
    rel = path.relative_to(PACKAGE).parts
    return len(rel) > 2 and rel[0] == "strategies"


def test_no_module_outside_a_strategys_folder_compares_its_name():
    names = set(registry.names())
    found = {(str(path.relative_to(ROOT)), text) for path in sorted(PACKAGE.rglob("*.py")) if not own_folder(path)
             for _, text in name_comparisons(path.read_text(), names)}
    assert sorted(found - REMAINING) == [], "compare a record's attribute instead (registry.py)"
    assert sorted(REMAINING - found) == [], "gone: delete these entries from REMAINING"


def test_the_search_finds_planted_comparisons():
    planted = ('if strategy == "stanza":\n    pass\n'
               'ok = cfg.strategy != "ddp"\n'
               'if s in ("ps", "x"):\n    pass\n'
               'if "local" not in names:\n    pass\n'
               'fine = registry.owns(strategy, "fc_workers")\n'
               'also_fine = {"stanza": 1}["stanza"]\n'
               'other = mode == "global"\n')
    hits = name_comparisons(planted, set(registry.names()))
    assert [line for line, _ in hits] == [1, 3, 4, 6]


def test_own_folders_are_exempt_and_nothing_else():
    assert own_folder(PACKAGE / "strategies" / "stanza" / "layout.py")
    assert not own_folder(PACKAGE / "strategies" / "base.py")
    assert not own_folder(PACKAGE / "topology.py")
