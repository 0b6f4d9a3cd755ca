"""Claim categories, their verdicts and the tally `python -m stanza_core.reproduce` prints.

A claim's category comes from its YAML fields, never from its text:

    paper     `figure:` the paper's number for this claim's own configuration (in the units of
              `ours` after `scale`; a number, or [low, high] where the paper states a range).
              It must have a bound (`expect`) containing the figure and a `bound_rule:` that
              says how the bound was set from the figure. Verdict: agrees / differs.
    goal      `goal:` a target the project set itself where the paper gives no figure (what,
              and who set it). It must have a bound. Verdict: goal met / goal missed.
    reported  neither: a qualitative statement, "not given", or beyond the paper. No bound,
              no verdict.

So a project goal can never be counted as agreement with the paper, and a paper figure can
never be left without a bound.

    >>> category_of({"figure": 1.55, "expect": 1.55, "tolerance": 0.25, "bound_rule": "..."})
    'paper'
    >>> tally_lines(Tally(agree=2, differ=1, met=3, missed=0, reported=4))
    ['paper: 2 of 3 agree, 1 differ', 'goals: 3 of 3 met, 0 missed', 'reported only: 4']
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable

PAPER, GOAL, REPORTED = "paper", "goal", "reported"
AGREES, DIFFERS = "agrees", "differs"  # a paper claim's verdicts
GOAL_MET, GOAL_MISSED = "goal met", "goal missed"  # a goal's
REPORTED_ONLY = "reported"  # a value with no bound in this run: shown, not judged
RAN = "ran"  # a section's badge when its notebook ran and no claim of it was judged
_VERDICTS = {PAPER: (AGREES, DIFFERS), GOAL: (GOAL_MET, GOAL_MISSED)}


def category_of(claim: dict[str, Any]) -> str:
    """The claim's category: paper (has `figure`), goal (has `goal`), else reported."""
    return PAPER if "figure" in claim else GOAL if "goal" in claim else REPORTED


def bounds(claim: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """{mode or "any": (low, high)} from `expect` (a number +- `tolerance`, or [low, high])."""
    e = claim.get("expect")
    per_mode = e if isinstance(e, dict) else {} if e is None else {"any": e}
    tol = claim.get("tolerance", 0)
    return {m: (b - tol, b + tol) if is_number(b) else tuple(b) for m, b in per_mode.items() if b is not None}


def category_problem(claim: dict[str, Any]) -> str | None:
    """Why the claim's category fields are inconsistent (one line), or None when they are fine.
    Assumes `expect` and `modes` are well formed (spec.load_spec checks those first)."""
    category, b = category_of(claim), bounds(claim)
    if "figure" in claim and "goal" in claim:
        return "has both figure (a paper claim) and goal (a project goal): pick one"
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tally:
    agree: int = 0  # paper claims inside their bound
    differ: int = 0  # paper claims outside it
    met: int = 0  # goals met
    missed: int = 0  # goals missed
    reported: int = 0  # values shown with no verdict
    unjudged: int = 0  # rows with no value in this run: another mode's, modelled only, missing


def tally(rows: Iterable[dict[str, Any]]) -> Tally:
    """Count report rows (spec.evaluate_claims' dicts) by their status."""
    n = {s: 0 for s in (AGREES, DIFFERS, GOAL_MET, GOAL_MISSED, REPORTED_ONLY)}
    unjudged = 0
    for row in rows:
        if row["status"] in n:
            n[row["status"]] += 1
        else:
            unjudged += 1
    return Tally(agree=n[AGREES], differ=n[DIFFERS], met=n[GOAL_MET], missed=n[GOAL_MISSED],
                 reported=n[REPORTED_ONLY], unjudged=unjudged)


def badge(rows: Iterable[dict[str, Any]]) -> str:
    """A section's badge from its rows (for a notebook that ran): "differs" when any paper claim
    differs, else "goal missed" when any goal is missed, else "agrees" when a paper claim was
    compared and all agree, else "ran" (nothing compared: goals met or values reported only).

    >>> badge([{"status": AGREES}, {"status": GOAL_MET}]), badge([{"status": REPORTED_ONLY}])
    ('agrees', 'ran')
    """
    t = tally(rows)
    return DIFFERS if t.differ else GOAL_MISSED if t.missed else AGREES if t.agree else RAN


def tally_lines(t: Tally) -> list[str]:
    """The three lines the runner prints last."""
    return [f"paper: {t.agree} of {t.agree + t.differ} agree, {t.differ} differ",
            f"goals: {t.met} of {t.met + t.missed} met, {t.missed} missed",
            f"reported only: {t.reported}"]


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
