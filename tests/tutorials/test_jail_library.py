"""The workbench a grading jail gets (tutorials.jail_library): a copy of stanza_core without the
references a graded cell forbids. A student who restores the poisoned references' code, or imports
the package afresh, beats the in-process poison but not the copy: the reference is not in the jail."""
import sys

import pytest

import battery
from tutorials import autograde, jail_library, sandbox

FORBID = ("stanza_core.perf.traffic.expected_bytes", "stanza_core.perf.traffic.rank_bytes",
          "stanza_core.perf.traffic.summary_bytes", "stanza_core.perf.traffic.totals",
          "stanza_core.perf.profiles.named_profile")


def test_the_copy_strips_functions_methods_and_classes_and_nothing_else():
    from stanza_core import perf  # noqa: F401 - the names resolve in this process
    names = ("stanza_core.perf.traffic.expected_bytes", "stanza_core.anatomy.Profile.fc_param_share",
             "stanza_core.strategies.stanza.engine.GradBuckets")
    path = jail_library.build(names)
    assert path.name == "stanza_core" and path != jail_library.PACKAGE
    changed = {str(p.relative_to(path)) for p in path.rglob("*.py")
               if p.read_text() != (jail_library.PACKAGE / p.relative_to(path)).read_text()}
    assert changed == {"perf/traffic.py", "anatomy.py", "strategies/stanza/engine.py"}
    text = (path / "perf" / "traffic.py").read_text()
    body = text.split("def expected_bytes(")[1].split("\ndef ")[0]
    assert "raise PermissionError('stanza_core.perf.traffic.expected_bytes'" in body and "rank_bytes(counts" not in body
    engine = (path / "strategies" / "stanza" / "engine.py").read_text().split("class GradBuckets")[1].split("\nclass ")[0]
    assert engine.count("raise PermissionError") == engine.count("    def ")  # every method, __init__ included
    assert jail_library.build(names) == path  # built once per set
    with pytest.raises(ValueError, match="not defined in stanza_core"):
        jail_library.build(("tutorials.course.freeze",))


def _session(body):
    cells = [("setup", "from stanza_core import get_model, perf, split_model\nimport torch"),
             ("answer", body.removeprefix(battery.CELL))]
    return autograde.Session(cells, {})


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_restoring_or_reimporting_a_reference_finds_it_absent():
    if why := sandbox.available():
        (pytest.skip if sys.platform != "linux" else pytest.fail)(why)
    from pathlib import Path
    students = battery.formula_students(Path("/nonexistent"))["unpoisons"]
    for lab, grade_id, args in (("lab1", "boundary_bytes_per_step", ("tiny_cnn", 16, 3)),
                                ("lab2", "stanza_bytes_per_step", (1000, 100, 7, 4, 1, 6)),
                                ("lab2", "samples_per_fc_worker", (4, 2, 8))):
        body = students[lab][grade_id]
        if not body.startswith(battery.CELL):
            body = f"def {grade_id}(N, k, G):\n" + "\n".join("    " + ln for ln in body.split("\n"))
        session = _session(body)
        try:
            # the in-process poison alone: the student undoes it and gets the reference's answer
            poisoned_only = session._use((), lambda jail: jail.call(grade_id, args, {}, list(FORBID)))
            assert poisoned_only is not None, (lab, grade_id)
            # the jail's workbench without the references: nothing to restore
            with pytest.raises(autograde.AnswerError, match="a reference this answer is graded against"):
                session.call(grade_id, args, {}, list(FORBID), FORBID)
        finally:
            session.close()
