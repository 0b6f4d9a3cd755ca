"""What a student may read of a failure: enough to learn from, nothing of the hidden tests.

Whatever the student's process says is the student's to control, so it may carry a hidden call's
arguments (an answer that logs them and raises them later). The grader shows of it only what it
can check against what it already knows, never the text:

    exception("ValueError: [('resnet18', 64), ...] (cell fc_param_share, line 3)", cells)
        -> "ValueError raised in your code (cell fc_param_share, line 3)"
    rank_failure("rank 1 raised KeyError: 'x' (in fc_worker, line 7)", names)
        -> "rank 1 raised KeyError (in fc_worker, line 7)"
    check_kind("3 ranks: bucket sizes", "rank 0 allreduced ...")  -> "bytes"

An exception's type is shown by name if it is one of Python's built-in exceptions (a class the
answer made itself could be named after anything); a cell by name if it is one of the
notebook's and a line if it is inside that cell; the grader's own refusal of a reference
("... is a reference this answer is graded against") names the reference only if the cell
forbids it.
"""
from __future__ import annotations

import builtins
import re

GRADED_AGAINST = " is a reference this answer is graded against"
_WHERE = re.compile(r"\(cell ([A-Za-z_][\w-]*), line (\d+)\)\s*$")
_RANK_WHERE = re.compile(r"\(in ([A-Za-z_]\w*), line (\d+)\)")


def type_name(name: str) -> str:
    obj = getattr(builtins, name, None)
    if isinstance(obj, type) and issubclass(obj, BaseException):
        return name
    return "an exception of the answer's own class"


def exception(text: str, cells: dict[str, int], forbid=()) -> str:
    """The line shown for an exception the student's code raised ({cell name: its number of lines})."""
    m = re.match(r"([A-Za-z_]\w*)", text or "")
    kind = type_name(m.group(1)) if m else "an error"
    where = _WHERE.search(text or "")
    place = ""
    if where and where.group(1) in cells and 0 < int(where.group(2)) <= cells[where.group(1)]:
        place = f" (cell {where.group(1)}, line {where.group(2)})"
    if kind == "PermissionError":
        ref = re.match(r"PermissionError: ([\w.]+)" + re.escape(GRADED_AGAINST), text)
        if ref and ref.group(1) in forbid:
            return f"PermissionError: {ref.group(1)}{GRADED_AGAINST}{place}"
    return f"{kind} raised in your code{place}"


def rank_failure(text: str, functions=()) -> str:
    """The line shown for a run of the ranks that did not finish (gradekit's one line, first part)."""
    text = (text or "").split("; ")[0]
    if m := re.match(r"rank (\d+) raised ([A-Za-z_]\w*)", text):
        where = _RANK_WHERE.search(text)
        place = ""
        if where:
            place = (f" (in {where.group(1)}, line {where.group(2)})" if where.group(1) in functions
                     else f" (line {where.group(2)} of your code)")
        return f"rank {m.group(1)} raised {type_name(m.group(2))}{place}"
    if m := re.match(r"rank (\d+) (was killed by SIG\w+|exited with status \d+) before it returned", text):
        return f"rank {m.group(1)} {m.group(2)} before it returned"
    if text.startswith("timed out"):
        return "deadlock or timeout: a rank had not returned within the case's budget"
    if "did not join the" in text:
        return "deadlock: a rank did not join a collective the others called (a group= missing?)"
    if re.match(r"the \d+ ranks did not start", text):
        return text[:80]
    if text.startswith("rank ") and "returned something other than" in text:
        return "a rank returned something other than tensors, numbers, strings, lists and dicts"
    return "the ranks did not finish"


def check_kind(check: str, outcome: str, steps: int | None = None) -> str:
    """The kind of a failed check of a coding lab: what was wrong, in one or two words."""
    if outcome.startswith(("deadlock", "timed out")):
        return "deadlock / timeout"
    if outcome.startswith("rank ") and " raised " in outcome or " before it returned" in outcome:
        return "the run failed: " + outcome
    if outcome.startswith("the results could not be checked"):
        return "type or shape of what the ranks returned"
    if outcome.startswith("not run"):
        return "not run (an earlier case failed)"
    c = check.lower()
    if "parameters" in c or "equal to one process" in c:
        return f"parameters after {steps} steps" if steps else "parameters"
    if any(w in c for w in ("bytes", "bucket sizes", "per gradient", "reduce-scatter", "broadcast")):
        return "bytes"
    if any(w in c for w in ("overlap", "bubble", "in flight")):
        return "schedule"
    if "sharded" in c:
        return "memory kept between steps"
    return "value"
