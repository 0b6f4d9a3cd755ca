"""A strategy's options travel inside one Variant: an option's name (`fc_workers`, `ps_servers`,
`micro_batches`, ...) is a function parameter only inside its strategy's folder
(stanza_core/strategies/<name>/) and at the edges, where flat options come in and become a
Variant once (Variant.parse): the CLIs, the stored-row and label writers, the notebooks'
parameters. Walks the source with ast, runs nothing but the registry (which option is whose)."""
import ast
from pathlib import Path

import pytest

from stanza_core import registry

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("stanza_core", "benchmarks", "notebooks", "scripts", "tutorials")

# Where flat options are the input: each function named, so that a new one is a decision.
EDGES = {
    ("stanza_core/labels.py", "_parts"), ("stanza_core/labels.py", "config_label"),  # a label from a stored row
    ("stanza_core/labels.py", "config_key"),
    ("stanza_core/bench.py", "run_bench"),  # the bench CLI's Python entry (its flags)
    ("stanza_core/experiments/convergence.py", "plan"),  # notebook 06's parameters
    ("stanza_core/experiments/traffic.py", "plan"),  # notebook 02's parameters
    ("stanza_core/experiments/traffic.py", "ratio_curve"),
    ("stanza_core/runs/replayed.py", "replay_set"),  # the notebooks' replayed grid (k, S, overlap axes)
    ("stanza_core/widgets.py", "_check"), ("stanza_core/widgets.py", "__init__"),  # the explorer's sliders
    ("tutorials/labs/source/lab11/lab11.py", "run_pipeline"),  # a lab's own pipeline, written by the student
}

# Known places that still take flat options inside: to become Variant parameters (and leave this list).
NOT_YET = {
    ("stanza_core/perf/cluster.py", "_links_need"), ("stanza_core/perf/cluster.py", "replay_payload_scale"),
    ("stanza_core/perf/cluster.py", "replay_dilation"),  # a count of dedicated servers for the link rule
    ("stanza_core/perf/optimize.py", "best_assignment"), ("stanza_core/perf/sweep.py", "sweep"),  # search axes
    ("stanza_core/runs/compute_rounds.py", "config_rounds"), ("stanza_core/runs/compute_rounds.py", "device_for"),
    ("stanza_core/runs/plan.py", "payload_scale_of"), ("stanza_core/runs/plan.py", "replay_link"),
}


def option_parameters(source: str) -> list[tuple[str, int, list[str]]]:
    """(function, line, the registered option names among its parameters) of every function."""
    owners = registry.option_names()
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            if hits := [n for n in names if n in owners]:
                out.append((getattr(node, "name", "<lambda>"), node.lineno, hits))
    return out


def outside_their_folder(path: Path, options: list[str]) -> list[str]:
    """The options whose strategy's folder `path` is not in."""
    owners = registry.option_names()
    parts = path.relative_to(ROOT).parts
    folder = parts[2] if parts[:2] == ("stanza_core", "strategies") and len(parts) > 3 else None
    return [o for o in options if owners[o] != folder]


def found() -> set[tuple[str, str]]:
    out = set()
    for root in SOURCES:
        for path in sorted((ROOT / root).rglob("*.py")):
            for name, line, options in option_parameters(path.read_text()):
                if outside_their_folder(path, options):
                    out.add((str(path.relative_to(ROOT)), name))
    return out


def test_option_names_are_parameters_only_in_their_folder_and_at_the_edges():
    stray = sorted(found() - EDGES - NOT_YET)
    assert not stray, ("a strategy's option as a parameter outside its folder: pass a Variant instead "
                       "(or name the function in EDGES where flat options are its input):\n"
                       + "\n".join(f"{p}: {f}" for p, f in stray))


def test_the_lists_name_only_what_is_there():
    gone = sorted((EDGES | NOT_YET) - found())
    assert not gone, f"no longer taking a strategy's option (leave the list): {gone}"
    assert not EDGES & NOT_YET


PLANTED = '''
def predict(profile, cluster, strategy, fc_workers=None, *, ps_servers=0):
    return lambda micro_batches: micro_batches


def fine(profile, variant, *, global_batch=32):
    return variant.options.fc_workers
'''


@pytest.mark.parametrize("path, want", [
    ("stanza_core/perf/model.py", ["fc_workers", "ps_servers", "micro_batches"]),
    ("stanza_core/strategies/stanza/model.py", ["ps_servers"]),  # stanza's own options are at home there
    ("stanza_core/strategies/ps/model.py", ["fc_workers", "micro_batches"]),
])
def test_the_walk_sees_a_planted_parameter(path, want):
    got = option_parameters(PLANTED)
    assert [(f, opts) for f, _, opts in got] == [("predict", ["fc_workers", "ps_servers"]),
                                                 ("<lambda>", ["micro_batches"])]
    assert [o for _, _, opts in got for o in outside_their_folder(ROOT / path, opts)] == want
