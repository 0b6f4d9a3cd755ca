"""The coding labs (9-11) graded with the student's ranks jailed: what `gradekit` is in the grader's
namespace (tutorials.grade_notebook puts it there in place of the real module).

`run_lab(lab, case, **fns)` and `grade(lab, part, **fns)` send the lab's rank program (the source
of its grader module, without the reference side of the exercise being run and without the
one-process references) and the case to the student's jailed process, which runs the ranks there
(tutorials.answers) and answers with their results as JSON: tensors, numbers, the counters' log.
The checks (`grader._judge`: one-process references, expected bytes, overlap) run here, in the
grading process, on those values. Hidden cases (every case not named try*) draw their seed from
the term's secret.
"""
from __future__ import annotations

import ast
import importlib
import random
from pathlib import Path

from tutorials import autograde, feedback_lines
from tutorials.gradekit import RankFailure, RankResult, compare

TRUSTED_ONLY = ("reference", "expected", "grade", "_judge")


def jail_source(lab: str, mine: tuple[str, ...], keep: tuple[str, ...] = ()) -> str:
    """The grader module's source as the jail gets it: no reference side of `mine`, no references
    (but those of `keep`: the student bundle keeps `reference`, the one-process oracle of the
    visible cases)."""
    module = importlib.import_module(f"tutorials.labs.source.{lab}.grader")
    tree = ast.parse(Path(module.__file__).read_text())
    drop = {getattr(module, "SIDES", {}).get(m) for m in mine} | (set(TRUSTED_ONLY) - set(keep))
    tree.body = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name in drop)]
    return ast.unparse(tree)


class Shim:
    """gradekit, as the graded cells of one submission see it."""

    RankFailure, RankResult = RankFailure, RankResult

    def __init__(self, session: autograde.Session, secret: str):
        self.session, self.secret = session, secret
        self.failed: list[tuple[str, str]] = []  # (check, its kind) of each check `grade` found failing

    def _case(self, lab: str, name: str) -> dict:
        grader = importlib.import_module(f"tutorials.labs.source.{lab}.grader")
        case = dict(grader.CASES[name])
        if not name.startswith("try"):
            case["seed"] = random.Random(f"{self.secret}:{lab}:{name}").randrange(1, 10**6)
        return case

    def _run(self, lab: str, case: dict, functions: dict) -> list[RankResult]:
        names = {k: getattr(v, "name", None) for k, v in functions.items()}
        if None in names.values():
            raise autograde.AnswerError("the test passes something other than the notebook's functions")
        mine = tuple(case.get("mine", names))
        req = {"ranks": jail_source(lab, mine), "module": f"stanza_lab_{lab}_ranks", "case": case,
               "functions": names}
        out = self.session.ask_ranks(req)
        if not isinstance(out, dict) or ("failure" in out) == ("results" in out):
            raise autograde.AnswerError("the ranks' results were not in the expected form")
        if "failure" in out:  # the jail's words: only what the grader can check (tutorials.feedback_lines)
            raise RankFailure(feedback_lines.rank_failure(str(out["failure"]), set(names.values())))
        try:
            return [RankResult(int(r["rank"]), r["value"], list(r["calls"]), str(r["output"])) for r in out["results"]]
        except (KeyError, TypeError, ValueError):
            raise autograde.AnswerError("the ranks' results were not in the expected form") from None

    def run_lab(self, lab: str, case: str = "try", **functions) -> list[RankResult]:
        return self._run(lab, self._case(lab, case), functions)

    def one_process(self, lab: str, case: str = "try"):
        """gradekit.one_process, computed here (the grading process), never in the jail."""
        from tutorials import gradekit
        return gradekit.one_process(lab, case)

    compare = staticmethod(compare)

    def grade(self, lab: str, part: str, **functions) -> dict[str, str]:
        """{check: "ok" or why not}, judged here on the jailed ranks' results (gradekit.run_checks' rule:
        once a case fails to run, later cases are not run)."""
        grader = importlib.import_module(f"tutorials.labs.source.{lab}.grader")
        checks = grader.PARTS[part]
        verdict, failed = {}, None
        for name in [n for n in grader.CASES if n in checks.values()]:
            mine = [c for c, n in checks.items() if n == name]
            if failed:
                verdict.update({c: f"not run: {failed}" for c in mine})
                continue
            case = self._case(lab, name)
            try:
                results = self._run(lab, case, functions)
            except RankFailure as e:
                verdict.update({c: str(e) for c in mine})
                failed = f"the {case['world_size']}-rank run failed first"
                continue
            for c in mine:
                try:
                    verdict[c] = grader._judge(c, results, case)
                except Exception as e:  # noqa: BLE001 - results of the wrong type or shape
                    verdict[c] = f"the results could not be checked ({type(e).__name__})"
        self.failed += [(c, feedback_lines.check_kind(c, v, grader.CASES[checks[c]].get("steps")))
                        for c, v in verdict.items() if v != "ok"]
        return verdict
