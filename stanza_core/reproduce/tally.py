"""Claim categories, their verdicts and the tally `python -m stanza_core.reproduce` prints.

A claim's category comes from its YAML fields, never from its text:

    paper     `figure:` the paper's number for this claim's own configuration (in the units of
              `ours` after `scale`; a number, or [low, high] where the paper states a range).
              It must have a bound (`expect`) containing the figure and a `bound_rule:` that
              says how the bound was set from the figure, and name which of the paper's four
              figures it is (`paper_figure:`, one of PAPER_FIGURES): a count taken from
              torchvision is not the paper's figure. Verdict: agrees / differs.
    explained a paper claim with `explained:` (the rule by which an assumption was chosen so
              that this figure holds): the figure chose the assumption, so inside its bound it
              is "explained under a stated assumption", never "agrees". Verdict: explained /
              differs.
    goal      `goal:` a target the project set itself where the paper gives no figure (what,
              and who set it). It must have a bound. Verdict: goal met / goal missed.
    reported  neither: a qualitative statement, "not given", or beyond the paper. No bound,
              no verdict.

So a project goal can never be counted as agreement with the paper, and a paper figure can
never be left without a bound.

The paper states four figures (PAPER_FIGURES). Each is counted once, by the one claim that names
it with `paper_figure:` and lists the experiments that show it (`evidence:`); any other claim
naming it is evidence, reported only. A counted claim states the parameter server its value is
under (`ps:`) and may give the same figure against the workbench's sharded PS (`sharded:`, a
results key). `figure_lines` prints "paper figures: A of 4 agree, E explained under a stated
assumption, D differ, U not judged" and one line per figure; a figure whose counted claim has no
`figure:` (shown, no verdict) or no value in the run is not judged.

    >>> category_of({"figure": 1.55, "expect": 1.55, "tolerance": 0.25, "bound_rule": "..."})
    'paper'
    >>> tally_lines(Tally(agree=2, differ=1, met=3, missed=0, reported=4))
    ['paper claims: 2 agree, 0 explained, 1 differ', 'goals: 3 of 3 met, 0 missed', 'reported only: 4']
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable

PAPER, EXPLAINED_CAT, GOAL, REPORTED = "paper", "explained", "goal", "reported"
AGREES, DIFFERS = "agrees", "differs"  # a paper claim's verdicts
EXPLAINED = "explained under a stated assumption"  # an explained claim's verdict inside its bound
NOT_JUDGED = "not judged"
# The paper's own figures (PAPER.md), each counted once: id -> the figure as the paper states it.
PAPER_FIGURES = {"range_10gbps": "1.34x-13.9x over PS at 10 Gb/s",
                 "traffic_vgg16": "up to 10x less traffic than PS (VGG-16)",
                 "alexnet_100gbps": "1.55x over PS at 100 Gb/s (AlexNet)",
                 "vgg16_100gbps": "1.72x over PS at 100 Gb/s (VGG-16)"}
GOAL_MET, GOAL_MISSED = "goal met", "goal missed"  # a goal's
REPORTED_ONLY = "reported"  # a value with no bound in this run: shown, not judged
RAN = "ran"  # a section's badge when its notebook ran and no claim of it was judged
_VERDICTS = {PAPER: (AGREES, DIFFERS), EXPLAINED_CAT: (EXPLAINED, DIFFERS), GOAL: (GOAL_MET, GOAL_MISSED)}


def category_of(claim: dict[str, Any]) -> str:
    """The claim's category: paper (has `figure`; explained with `explained`), goal (has `goal`),
    else reported."""
    if "figure" in claim:
        return EXPLAINED_CAT if "explained" in claim else PAPER
    return GOAL if "goal" in claim else REPORTED


def counts_figure(claim: dict[str, Any]) -> bool:
    """Whether the claim is the one that counts its paper figure (it lists its evidence)."""
    return "paper_figure" in claim and "evidence" in claim


def bounds(claim: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """{mode or "any": (low, high)} from `expect` (a number +- `tolerance`, or [low, high])."""
    e = claim.get("expect")
    per_mode = e if isinstance(e, dict) else {} if e is None else {"any": e}
    tol = claim.get("tolerance", 0)
    rel = claim.get("rel_tolerance")
    if rel is not None:  # [low, high] with each end within rel of its own value
        return {m: (b[0] * (1 - rel), b[1] * (1 + rel)) for m, b in per_mode.items() if b is not None}
    return {m: (b - tol, b + tol) if is_number(b) else tuple(b) for m, b in per_mode.items() if b is not None}


def inside_bound(claim: dict[str, Any], value: Any, lohi: tuple[float, float]) -> bool | None:
    """Whether `value` lies in the bound (None: nothing to judge). A [low, high] value against a
    `rel_tolerance` bound: each end within that share of the figure's own end."""
    rel = claim.get("rel_tolerance")
    if rel is not None and isinstance(value, list) and len(value) == 2 and all(map(is_number, value)):
        fig = claim["expect"]
        return all(abs(v / f - 1) <= rel for v, f in zip(value, fig))
    return None if not is_number(value) else lohi[0] <= value <= lohi[1]


def category_problem(claim: dict[str, Any]) -> str | None:
    """Why the claim's category fields are inconsistent (one line), or None when they are fine.
    Assumes `expect` and `modes` are well formed (spec.load_spec checks those first)."""
    category, b = category_of(claim), bounds(claim)
    if "figure" in claim and "goal" in claim:
        return "has both figure (a paper claim) and goal (a project goal): pick one"
    if "paper_figure" in claim and claim["paper_figure"] not in PAPER_FIGURES:
        return f"paper_figure must be one of the paper's figures {sorted(PAPER_FIGURES)}, got {claim['paper_figure']!r}"
    if "figure" in claim and not counts_figure(claim):
        return ("has a figure but is not the counted claim of one of the paper's figures (paper_figure and "
                "evidence): a count from torchvision or a second copy of a figure is a goal or reported only")
    if "explained" in claim and "figure" not in claim:
        return "has explained but no figure: explained goes with the paper's figure it chose an assumption by"
    if counts_figure(claim) and not str(claim.get("ps") or "").strip():
        return "counts a paper figure but does not state the parameter server it is under (ps)"
    if "rel_tolerance" in claim and not (isinstance(claim.get("expect"), list) and len(claim["expect"]) == 2):
        return "rel_tolerance needs expect as [low, high] (each end within that share)"
    if category == REPORTED:
        if b:
            return "has a bound (expect) but neither figure (the paper's number) nor goal (the project's target)"
        if "bound_rule" in claim:
            return "has a bound_rule but no figure: bound_rule goes with a paper claim's bound"
        return None
    if category == GOAL:
        if not b:
            return "has a goal but no bound (expect): a goal needs a target to be met or missed"
        if "bound_rule" in claim:
            return "has a bound_rule beside a goal: write the target and its source in goal"
        return None
    fig = claim["figure"]
    if not (is_number(fig) or (isinstance(fig, list) and len(fig) == 2 and all(map(is_number, fig)))):
        return f"figure must be the paper's number or [low, high], got {fig!r}"
    if not b:
        return f"has the paper's figure {fig!r} but no bound (expect): a paper claim needs one"
    if not str(claim.get("bound_rule") or "").strip():
        return "has a figure and a bound but no bound_rule saying how the bound was set from the figure"
    if "any" not in b and (left := [m for m in claim.get("modes", ["quick", "full"]) if m not in b]):
        return f"expect by mode leaves out {left}, a mode the paper claim runs in"
    lo_f, hi_f = (fig, fig) if is_number(fig) else fig
    for mode, (lo, hi) in b.items():
        if not lo <= lo_f <= hi_f <= hi:
            where = "" if mode == "any" else f" ({mode})"
            return f"bound [{lo:g}, {hi:g}]{where} does not contain the paper's figure {fig!r}"
    return None


def verdict(category: str, inside: bool | None) -> str:
    """The row status: agrees / differs for a paper claim, goal met / missed for a goal;
    "reported" when there is no bound to judge by (inside is None) or no category."""
    return REPORTED_ONLY if inside is None or category not in _VERDICTS else _VERDICTS[category][0 if inside else 1]


def figure_problems(claims_by_spec: dict[str, list[dict[str, Any]]], complete: bool = True) -> list[str]:
    """Why the claims of every spec ({spec name: claims}) do not count each paper figure once
    (one line each): a figure counted twice, or not at all (when `complete`: the whole project's
    specs, not a subset), an experiment that shows a figure missing from its counted claim's
    evidence."""
    counted: dict[str, list[str]] = {f: [] for f in PAPER_FIGURES}
    shown: dict[str, set[str]] = {f: set() for f in PAPER_FIGURES}
    evidence: dict[str, set[str]] = {}
    for name, claims in claims_by_spec.items():
        for c in claims:
            f = c.get("paper_figure")
            if f not in PAPER_FIGURES:
                continue
            shown[f].add(name)
            if counts_figure(c):
                counted[f].append(f"{name}: {c['claim']}")
                evidence[f] = set(c["evidence"])
    out = []
    for f, where in counted.items():
        if len(where) > 1 or (complete and not where):
            out.append(f"paper figure {f!r} ({PAPER_FIGURES[f]}) is counted by {len(where)} claims, not one"
                       + (f": {'; '.join(where)}" if where else ""))
        elif where and (left := sorted(shown[f] - evidence[f])):
            out.append(f"paper figure {f!r}: {left} show it but are not in its counted claim's evidence")
    return out


def figure_lines(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The line "paper figures: A of 4 agree, E explained under a stated assumption, D differ,
    U not judged", then one line per figure: its verdict, our value, the PS it is under and the
    same figure against the sharded PS. `rows`: report rows (spec.evaluate_claims)."""
    by = {r["paper_figure"]: r for r in rows if r.get("counted") and r.get("paper_figure") in PAPER_FIGURES}
    n = {AGREES: 0, EXPLAINED: 0, DIFFERS: 0}
    lines = []
    for f, text in PAPER_FIGURES.items():
        r = by.get(f)
        status = r["status"] if r and r["status"] in n else NOT_JUDGED
        if status in n:
            n[status] += 1
        if r is None:
            lines.append(f"  {text}: not judged (not in this run)")
            continue
        what = "" if r["value"] is None else f"ours {r['ours']}"
        what += f"; against the sharded PS {r['sharded']}" if r.get("sharded") else ""
        lines.append(f"  {text}: {status}{' (' + what + ')' if what else ''}; PS: {r.get('ps') or '-'}")
    u = len(PAPER_FIGURES) - sum(n.values())
    return [f"paper figures: {n[AGREES]} of {len(PAPER_FIGURES)} agree, {n[EXPLAINED]} explained under a stated "
            f"assumption, {n[DIFFERS]} differ, {u} not judged", *lines]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tally:
    agree: int = 0  # paper claims inside their bound
    explained: int = 0  # explained claims inside their bound
    differ: int = 0  # paper claims outside it
    met: int = 0  # goals met
    missed: int = 0  # goals missed
    reported: int = 0  # values shown with no verdict
    unjudged: int = 0  # rows with no value in this run: another mode's, modelled only, missing


def tally(rows: Iterable[dict[str, Any]]) -> Tally:
    """Count report rows (spec.evaluate_claims' dicts) by their status."""
    n = {s: 0 for s in (AGREES, EXPLAINED, DIFFERS, GOAL_MET, GOAL_MISSED, REPORTED_ONLY)}
    unjudged = 0
    for row in rows:
        if row["status"] in n:
            n[row["status"]] += 1
        else:
            unjudged += 1
    return Tally(agree=n[AGREES], explained=n[EXPLAINED], differ=n[DIFFERS], met=n[GOAL_MET], missed=n[GOAL_MISSED],
                 reported=n[REPORTED_ONLY], unjudged=unjudged)


def badge(rows: Iterable[dict[str, Any]]) -> str:
    """A section's badge from its rows (for a notebook that ran): "differs" when any paper claim
    differs, else "goal missed" when any goal is missed, else "agrees" when a paper claim was
    compared and all agree, else "ran" (nothing compared: goals met or values reported only).

    >>> badge([{"status": AGREES}, {"status": GOAL_MET}]), badge([{"status": REPORTED_ONLY}])
    ('agrees', 'ran')
    """
    t = tally(rows)
    return DIFFERS if t.differ else GOAL_MISSED if t.missed else AGREES if t.agree else \
        EXPLAINED if t.explained else RAN


def tally_lines(t: Tally) -> list[str]:
    """The claim lines the runner prints after figure_lines: every paper claim (counted ones and,
    were there any, others), goals, reported only."""
    return [f"paper claims: {t.agree} agree, {t.explained} explained, {t.differ} differ",
            f"goals: {t.met} of {t.met + t.missed} met, {t.missed} missed",
            f"reported only: {t.reported}"]


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
