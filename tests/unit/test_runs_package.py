"""The run pipeline is one package, stanza_core/runs, below the notebooks' logic: no module of it
imports stanza_core.experiments (experiments -> runs, never back), and none of the pipeline's
modules is left in experiments/."""
import ast
from pathlib import Path

import stanza_core

PKG = Path(stanza_core.__file__).parent
PIPELINE = {"runconfig", "spec", "plan", "run", "store", "cache", "measurement", "replay_bench", "replayed",
            "compute_rounds"}


def imported_modules(path: Path) -> set[str]:
    """Absolute names of what a module of stanza_core/runs imports (relative imports resolved)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = ["stanza_core", "runs"][: 2 - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


def test_runs_imports_nothing_of_experiments():
    files = sorted((PKG / "runs").glob("*.py"))
    assert {f.stem for f in files} >= PIPELINE
    back = {f.name: sorted(m for m in imported_modules(f) if m.startswith("stanza_core.experiments"))
            for f in files}
    assert not any(back.values()), back


def test_the_resolver_sees_a_planted_upward_import(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("from ..experiments import throughput\nfrom .plan import replay_link\n")
    got = imported_modules(planted)
    assert "stanza_core.experiments.throughput" in got and "stanza_core.runs.plan.replay_link" in got


def test_no_pipeline_module_is_left_in_experiments():
    assert not PIPELINE & {f.stem for f in (PKG / "experiments").glob("*.py")}
