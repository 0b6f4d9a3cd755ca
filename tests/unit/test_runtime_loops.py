"""No loop at run time between perf's front end and the strategies' models. The import picture
(each module's own import statements, read with ast) gets the edges the registry adds when the
program runs: a module that calls `model_module()` loads every registered strategy's `model`
(its record's "module" string, loaded by import_module, which no import statement shows). A
strategy's model imports perf's building blocks (perf/blocks.py, perf/cluster.py); if it
imported the front end (predict, expected_bytes, best_assignment), that would close a loop.
Each of perf and the strategy models also imports on its own in a fresh interpreter, in either
order."""
import ast
import subprocess
import sys
from pathlib import Path

from stanza_core import registry

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stanza_core"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The workbench modules `name` imports (top level or in a function), as written."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = f"{base}.{node.module}" if node.level and node.module else (base if node.level else node.module)
            for a in node.names:
                if f"{target}.{a.name}" in known:  # `from . import registry`: the module itself
                    out.add(f"{target}.{a.name}")
                elif target in known:
                    out.add(target)
    out.discard(name)
    return out


def loads_strategy_models(path: Path) -> bool:
    """Whether the module asks the registry for a strategy's model module (import_module at run time)."""
    return any(isinstance(n, ast.Attribute) and n.attr == "model_module" for n in ast.walk(ast.parse(path.read_text()))
               if isinstance(n, ast.Attribute)) and path.name != "registry.py"


def picture() -> dict[str, set[str]]:
    """module -> the modules it imports, plus the run-time edges to every strategy model."""
    mods = modules()
    known = set(mods)
    models = {spec.model for spec in registry.specs() if spec.model in known}
    graph = {name: imports_of(name, path, known) for name, path in mods.items()}
    for name, path in mods.items():
        if loads_strategy_models(path):
            graph[name] |= models
    return graph


def loop_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path start -> ... -> start, if there is one (depth first)."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def test_the_run_time_edges_are_in_the_picture():
    graph = picture()
    models = {spec.model for spec in registry.specs() if spec.model in graph}
    assert {"stanza_core.strategies.stanza.model", "stanza_core.strategies.ps.model",
            "stanza_core.strategies.ddp.model"} <= models
    for front in ("stanza_core.perf.model", "stanza_core.perf.traffic", "stanza_core.perf.optimize"):
        assert models <= graph[front], front  # predict, the byte counts and the optimiser ask the registry


def test_no_strategy_model_closes_a_loop_with_perf():
    graph = picture()
    loops = {spec.model: loop_through(graph, spec.model) for spec in registry.specs() if spec.model in graph}
    loops = {m: path for m, path in loops.items() if path}
    assert not loops, "a strategy's model reaches perf's front end, which loads it at run time:\n" + "\n".join(
        " -> ".join(path) for path in loops.values())


def test_the_check_sees_a_planted_loop():
    graph = picture()
    graph["stanza_core.strategies.stanza.model"] = graph["stanza_core.strategies.stanza.model"] | {"stanza_core.perf.model"}
    assert loop_through(graph, "stanza_core.strategies.stanza.model")[-2:] == [
        "stanza_core.perf.model", "stanza_core.strategies.stanza.model"]


def _imports_cleanly(*names: str) -> None:
    """Import `names` in this order in a fresh interpreter, then use perf's front end and the models."""
    code = ("import importlib, stanza_core.registry as r; "
            + "".join(f"importlib.import_module({n!r}); " for n in names)
            + "import stanza_core.perf as p; assert p.predict and all(s.model_module().step_time for s in r.specs())")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' then '.join(names)}\n{done.stderr[-2000:]}"


def test_perf_and_each_strategy_model_import_in_either_order():
    models = [spec.model for spec in registry.specs() if spec.model.startswith("stanza_core.")]
    _imports_cleanly("stanza_core.perf", *models)
    for model in models:  # each model first, in an interpreter of its own
        _imports_cleanly(model, "stanza_core.perf")
