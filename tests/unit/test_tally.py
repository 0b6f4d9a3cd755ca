"""The claims' kinds (stanza_core.reproduce.tally): every paper figure in reproductions/*.yaml
has a bound and the rule that set it, a project goal never lands on the paper line of the tally,
the paper's four figures are counted once each (a torchvision count or a second copy of a figure
is refused), and the report's summary shows the same counts. No notebook runs: seconds."""
from pathlib import Path

import pytest
import yaml

from stanza_core.reproduce.spec import Spec, evaluate_claims
from stanza_core.reproduce.spec import SpecError, load_specs
from stanza_core.reproduce.tally import (EXPLAINED_CAT, GOAL, PAPER, PAPER_FIGURES, REPORTED, Tally, category_of,
                                         category_problem, figure_lines, figure_problems, tally, tally_lines)

SPECS = Path(__file__).resolve().parents[2] / "reproductions"

PAPER_CLAIM = {"claim": "planted paper claim", "paper": "1.55x", "ours": "paper_value", "figure": 1.55,
               "expect": 1.55, "tolerance": 0.25, "bound_rule": "the paper's figure +- 0.25",
               "paper_figure": "alexnet_100gbps", "evidence": ["planted"], "ps": "S = N colocated"}
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
    assert kinds == {PAPER, EXPLAINED_CAT, GOAL, REPORTED}  # not vacuous: every kind is in use


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
    assert tally_lines(tally(rows)) == ["paper claims: 1 agree, 0 explained, 0 differ", "goals: 1 of 1 met, 0 missed",
                                        "reported only: 1"]
    outside = {"paper_value": 0.93, "goal_value": 0.5, "reported_value": 3.0}
    rows = evaluate_claims(_spec([PAPER_CLAIM, GOAL_CLAIM, REPORTED_CLAIM]), outside, "quick")[0]
    assert [r["status"] for r in rows] == ["differs", "goal missed", "reported"]
    assert tally_lines(tally(rows)) == ["paper claims: 0 agree, 0 explained, 1 differ", "goals: 0 of 1 met, 1 missed",
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
    for text in ("<th>paper: agree / explained / compared</th>", "<th>goals: met / judged</th>", "<th>reported only</th>",
                 "<th colspan='4'>all experiments</th><th>0 / 0 / 1</th><th>1 / 1</th><th>1</th>",
                 "<i>project goal:</i> within 10 %", "<i>bound:</i> the paper&#x27;s figure +- 0.25"):
        assert text in page, text


TORCHVISION_COUNT = {"claim": "AlexNet FC parameters", "kind": "counted", "paper": "58.63 M", "ours": "models.alexnet.fc_params",
                     "figure": 58.63, "expect": 58.63, "tolerance": 0.005, "bound_rule": "as printed"}


def _yaml_dir(tmp_path, specs: dict[str, list[dict]]) -> Path:
    """A reproductions folder of planted specs, each running a one-cell notebook with out_dir."""
    import nbformat

    (tmp_path / "notebooks").mkdir()
    (tmp_path / "reproductions").mkdir()
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell('out_dir = "x"', metadata={"tags": ["parameters"]})]
    nbformat.write(nb, tmp_path / "notebooks" / "n.ipynb")
    for name, claims in specs.items():
        (tmp_path / "reproductions" / f"{name}.yaml").write_text(yaml.safe_dump(
            {"title": name, "notebook": "notebooks/n.ipynb", "paper": "-", "quick": {}, "full": {}, "claims": claims}))
    return tmp_path / "reproductions"


def _counted(figure_id: str, name: str, evidence=None) -> dict:
    return {**PAPER_CLAIM, "kind": "modelled", "claim": f"counts {figure_id} in {name}", "paper_figure": figure_id,
            "evidence": evidence or [name]}


def test_the_reproductions_count_each_paper_figure_once():
    specs = load_specs(SPECS)
    assert figure_problems({s.name: s.claims for s in specs}) == []
    counted = [c["paper_figure"] for s in specs for c in s.claims if "paper_figure" in c and "evidence" in c]
    assert sorted(counted) == sorted(PAPER_FIGURES)  # four figures, one claim each
    assert not any("figure" in c and "paper_figure" not in c for s in specs for c in s.claims)


def test_a_planted_torchvision_count_as_a_paper_claim_is_refused(tmp_path):
    """The anatomy rows' old form: torchvision's own count given as the paper's figure."""
    assert "not the counted claim of one of the paper's figures" in category_problem(TORCHVISION_COUNT)
    assert "paper_figure must be one of" in category_problem({**TORCHVISION_COUNT, "paper_figure": "alexnet_fc",
                                                              "evidence": ["anatomy"], "ps": "-"})
    good = {f: [_counted(f, "a")] for f in PAPER_FIGURES}
    with pytest.raises(SpecError, match="not the counted claim"):
        load_specs(_yaml_dir(tmp_path, {"a": [c for cs in good.values() for c in cs] + [TORCHVISION_COUNT]}))


def test_a_planted_duplicate_of_a_paper_figure_is_refused(tmp_path):
    """1.55x counted by two notebooks (the old bandwidth_sweep + throughput pair)."""
    claims = {"a": [_counted(f, "a", ["a", "b"]) for f in PAPER_FIGURES], "b": [_counted("alexnet_100gbps", "b")]}
    problems = figure_problems(claims)
    assert len(problems) == 1 and "'alexnet_100gbps'" in problems[0] and "counted by 2 claims" in problems[0]
    with pytest.raises(SpecError, match="counted by 2 claims"):
        load_specs(_yaml_dir(tmp_path, claims))
    # evidence in another notebook is fine once listed, and refused when not
    ok = {"a": [_counted(f, "a", ["a", "b"]) for f in PAPER_FIGURES],
          "b": [{"claim": "shown", "paper": "1.55x", "ours": "v", "paper_figure": "alexnet_100gbps"}]}
    assert figure_problems(ok) == []
    ok["a"][2]["evidence"] = ["a"]
    assert "['b'] show it but are not in its counted claim's evidence" in figure_problems(ok)[0]
    del claims["b"]
    claims["a"] = claims["a"][1:]  # a figure counted by no claim
    assert "is counted by 0 claims" in figure_problems(claims)[0]


def test_the_figure_line_counts_four_figures_and_names_each_ps():
    explained = {**PAPER_CLAIM, "explained": "chose the PS", "paper_figure": "vgg16_100gbps", "figure": 1.72,
                 "expect": 1.72, "ours": "explained_value", "sharded": "sharded_value"}
    rng = {**PAPER_CLAIM, "paper_figure": "range_10gbps", "figure": [1.34, 13.9], "expect": [1.34, 13.9],
           "rel_tolerance": 0.25, "ours": "range_value", "format": "{:.2f}x"}
    del rng["tolerance"]
    claims = [PAPER_CLAIM, explained, rng]
    assert [category_problem(c) for c in claims] == [None, None, None]
    values = {"paper_value": 1.0, "explained_value": 1.75, "sharded_value": 1.03, "range_value": [1.37, 21.7]}
    rows = evaluate_claims(_spec(claims), values, "quick")[0]
    assert [r["status"] for r in rows] == ["differs", "explained under a stated assumption", "differs"]
    assert rows[1]["sharded"] == "1.03" and rows[2]["ours"] == "1.37x to 21.70x"
    lines = figure_lines(rows)
    assert lines[0] == ("paper figures: 0 of 4 agree, 1 explained under a stated assumption, 2 differ, "
                        "1 not judged")
    assert "PS: S = N colocated" in lines[3] and "against the sharded PS 1.03" in lines[4]
    values["range_value"] = [1.37, 13.0]  # both ends within 25 %: the range agrees
    rows = evaluate_claims(_spec(claims), values, "quick")[0]
    assert rows[2]["status"] == "agrees"
    assert figure_lines(rows)[0].startswith("paper figures: 1 of 4 agree, 1 explained")
