"""The claims' three kinds (stanza_core.reproduce.tally): every paper figure in reproductions/*.yaml
has a bound and the rule that set it, a project goal never lands on the paper line of the tally,
and the report's summary shows the same three counts. No notebook runs: seconds."""
from pathlib import Path

import pytest
import yaml

from stanza_core.reproduce.spec import Spec, evaluate_claims
from stanza_core.reproduce.tally import (GOAL, PAPER, REPORTED, Tally, category_of, category_problem, tally,
                                         tally_lines)

SPECS = Path(__file__).resolve().parents[2] / "reproductions"

PAPER_CLAIM = {"claim": "planted paper claim", "paper": "1.55x", "ours": "paper_value", "figure": 1.55,
               "expect": 1.55, "tolerance": 0.25, "bound_rule": "the paper's figure +- 0.25"}
GOAL_CLAIM = {"claim": "planted goal", "paper": "not given", "ours": "goal_value", "goal": "within 10 %",
              "expect": [0.0, 0.10]}
REPORTED_CLAIM = {"claim": "planted reported claim", "paper": "qualitative", "ours": "reported_value"}


def _problems(folder: Path) -> list[str]:
    """Every claim of every YAML in `folder` that breaks the kinds' rules, as 'file: claim: why'.
    The paper-figure rule is checked here directly too, not only through category_problem."""
    out = []
    for path in sorted(folder.glob("*.yaml")):
        for c in yaml.safe_load(path.read_text())["claims"]:
            if "figure" in c and (c.get("expect") is None or not str(c.get("bound_rule") or "").strip()):
                out.append(f"{path.name}: {c['claim']}: a paper figure without a bound or its bound_rule")
            elif problem := category_problem(c):
                out.append(f"{path.name}: {c['claim']}: {problem}")
    return out


def _spec(claims) -> Spec:
    return Spec(name="planted", path=Path("planted.yaml"), title="planted", notebook=Path("planted.ipynb"),
                paper="-", params={}, claims=claims)


def test_every_paper_figure_in_the_reproductions_has_a_bound_and_its_rule():
    assert _problems(SPECS) == []
    kinds = {category_of(c) for p in SPECS.glob("*.yaml") for c in yaml.safe_load(p.read_text())["claims"]}
    assert kinds == {PAPER, GOAL, REPORTED}  # not vacuous: every kind is in use


def test_a_planted_paper_figure_without_a_bound_fails_the_check(tmp_path):
    unbounded = {k: v for k, v in PAPER_CLAIM.items() if k not in ("expect", "tolerance")}
    (tmp_path / "planted.yaml").write_text(yaml.safe_dump({"claims": [PAPER_CLAIM, unbounded, GOAL_CLAIM]}))
    assert _problems(tmp_path) == [
        "planted.yaml: planted paper claim: a paper figure without a bound or its bound_rule"]
    assert "no bound" in category_problem(unbounded)


@pytest.mark.parametrize("change, message", [
    ({"bound_rule": None}, "no bound_rule"),  # a bound whose rule is not written down
    ({"expect": 2.0}, "does not contain the paper's figure 1.55"),  # a bound set away from the figure
    ({"goal": "also a goal"}, "pick one"),
    ({"expect": {"quick": 1.55}}, "leaves out ['full']"),  # the full run would report it unjudged
    ({"figure": "1.55x"}, "figure must be the paper's number"),
])
def test_inconsistent_paper_claims_are_refused(change, message):
    claim = {k: v for k, v in {**PAPER_CLAIM, **change}.items() if v is not None}
    assert message in category_problem(claim)


@pytest.mark.parametrize("claim, message", [
    ({**REPORTED_CLAIM, "expect": [0.0, 1.0]}, "neither figure"),  # a verdict with no source
    ({**GOAL_CLAIM, "expect": None}, "a goal needs a target"),
    ({**REPORTED_CLAIM, "bound_rule": "x"}, "bound_rule goes with a paper claim"),
])
def test_a_bound_needs_a_figure_or_a_goal(claim, message):
    assert message in category_problem({k: v for k, v in claim.items() if v is not None})


def test_a_goal_never_counts_as_paper_agreement():
    """A goal met and a paper claim that agrees land on different lines; so do their misses."""
    inside = {"paper_value": 1.6, "goal_value": 0.05, "reported_value": 3.0}
    rows, missing = evaluate_claims(_spec([PAPER_CLAIM, GOAL_CLAIM, REPORTED_CLAIM]), inside, "quick")
    assert missing == [] and [r["status"] for r in rows] == ["agrees", "goal met", "reported"]
    assert [r["category"] for r in rows] == [PAPER, GOAL, REPORTED]
    assert tally_lines(tally(rows)) == ["paper: 1 of 1 agree, 0 differ", "goals: 1 of 1 met, 0 missed",
                                        "reported only: 1"]
    outside = {"paper_value": 0.93, "goal_value": 0.5, "reported_value": 3.0}
    rows = evaluate_claims(_spec([PAPER_CLAIM, GOAL_CLAIM, REPORTED_CLAIM]), outside, "quick")[0]
    assert [r["status"] for r in rows] == ["differs", "goal missed", "reported"]
    assert tally_lines(tally(rows)) == ["paper: 0 of 1 agree, 1 differ", "goals: 0 of 1 met, 1 missed",
                                        "reported only: 1"]


def test_rows_without_a_value_are_counted_apart():
    only_full = {**PAPER_CLAIM, "modes": ["full"]}
    rows = evaluate_claims(_spec([only_full, GOAL_CLAIM]), {"goal_value": 0.0}, "quick")[0]
    assert [r["status"] for r in rows] == ["not in quick run", "goal met"]
    assert tally(rows) == Tally(met=1, unjudged=1)


def test_the_report_summary_shows_the_three_counts(tmp_path):
    pytest.importorskip("plotly", reason="the report embeds plotly figures")
    import json

    from stanza_core.reproduce.report import write_index

    rows = evaluate_claims(_spec([PAPER_CLAIM, GOAL_CLAIM, REPORTED_CLAIM]),
                           {"paper_value": 0.93, "goal_value": 0.05, "reported_value": 3.0}, "quick")[0]
    (tmp_path / "planted").mkdir()
    (tmp_path / "planted" / "status.json").write_text(json.dumps(
        {"name": "planted", "title": "planted", "paper": "-", "mode": "quick", "status": "ok", "error": None,
         "duration_s": 0.1, "executed": None, "html": None, "parameters": {}, "claims": rows}))
    page = write_index(tmp_path, [_spec([])]).read_text()
    for text in ("<th>paper: agree / compared</th>", "<th>goals: met / judged</th>", "<th>reported only</th>",
                 "<th colspan='4'>all experiments</th><th>0 / 1</th><th>1 / 1</th><th>1</th>",
                 "<i>project goal:</i> within 10 %", "<i>bound:</i> the paper&#x27;s figure +- 0.25"):
        assert text in page, text
