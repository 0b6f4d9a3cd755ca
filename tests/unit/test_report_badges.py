"""A section's badge says what its claims say, in the report and in the gallery: "ran" (the
notebook ran, nothing compared), "agrees" (every paper claim compared agrees), "goal missed",
"differs" (a paper claim differs); a notebook that failed or was skipped keeps that status. No
notebook runs: seconds."""
import json
from pathlib import Path

import pytest

from stanza_core.reproduce.spec import Spec, evaluate_claims
from stanza_core.reproduce.tally import badge

PAPER = {"claim": "paper claim", "kind": "counted", "paper": "1.55x", "ours": "p", "figure": 1.55, "expect": 1.55,
         "tolerance": 0.25, "bound_rule": "the figure +- 0.25"}
GOAL = {"claim": "goal", "kind": "measured", "paper": "-", "ours": "g", "goal": "within 10 %", "expect": [0.0, 0.1]}
REPORTED = {"claim": "reported", "kind": "modelled", "paper": "-", "ours": "r"}


def _spec(name: str, claims) -> Spec:
    return Spec(name=name, path=Path(f"{name}.yaml"), title=name, notebook=Path(f"{name}.ipynb"), paper="-",
                params={}, claims=claims)


def _rows(claims, results):
    return evaluate_claims(_spec("x", claims), results, "quick")[0]


@pytest.mark.parametrize("claims, results, expected", [
    ([REPORTED], {"r": 1.0}, "ran"),  # nothing compared
    ([GOAL, REPORTED], {"g": 0.05, "r": 1.0}, "ran"),  # a goal met is not agreement with the paper
    ([PAPER, REPORTED], {"p": 1.6, "r": 1.0}, "agrees"),
    ([PAPER, GOAL], {"p": 1.6, "g": 0.5}, "goal missed"),
    ([PAPER, GOAL], {"p": 0.9, "g": 0.05}, "differs"),
    ([PAPER, {**PAPER, "ours": "q"}], {"p": 1.6, "q": 0.9}, "differs"),  # one of two differs
    ([{**PAPER, "modes": ["full"]}], {}, "ran"),  # the paper claim is another mode's: not compared here
])
def test_badge(claims, results, expected):
    assert badge(_rows(claims, results)) == expected


def test_report_and_gallery_show_the_badge_not_ok(tmp_path):
    pytest.importorskip("plotly", reason="the report embeds plotly figures")
    from stanza_core.reproduce.gallery import write_gallery
    from stanza_core.reproduce.report import write_index

    runs = {"agreeing": ("ok", [PAPER], {"p": 1.6}), "differing": ("ok", [PAPER], {"p": 0.9}),
            "reporting": ("ok", [REPORTED], {"r": 1.0}), "broken": ("failed", [PAPER], {"p": 1.6})}
    specs = []
    for name, (status, claims, results) in runs.items():
        specs.append(_spec(name, claims))
        (tmp_path / name).mkdir()
        (tmp_path / name / "status.json").write_text(json.dumps(
            {"name": name, "title": name, "paper": "-", "mode": "quick", "status": status, "error": None,
             "duration_s": 0.1, "executed": None, "html": None, "parameters": {},
             "claims": _rows(claims, results)}))
    page = write_index(tmp_path, specs).read_text()
    for name, shown in (("agreeing", "agrees"), ("differing", "differs"), ("reporting", "ran"), ("broken", "failed")):
        assert f"<td class='{shown}'>{shown}</td>" in page.split(f"href='#{name}'")[1].split("</tr>")[0], name
        section = page.split(f"<section id='{name}'>")[1]
        assert section.split("</p>", 2)[1].startswith(f"<p>Status: <span class='{shown}'>{shown}</span>"), name
    assert ">ok<" not in page
    index = json.loads((tmp_path / "index.json").read_text())
    assert {e["name"]: e["badge"] for e in index["experiments"]} == {
        "agreeing": "agrees", "differing": "differs", "reporting": "ran", "broken": "failed"}
    gallery = write_gallery(tmp_path, specs, []).read_text()
    for shown in ("agrees", "differs", "ran", "failed"):
        assert f"<span class='{shown}'>{shown}</span>" in gallery
    assert "<span class='ok'>" not in gallery
