"""What a student reads of a failure (tutorials.feedback_lines): the check, its kind, the exception's
type and the student's own line, never what the student's process wrote (a hidden call's inputs)."""
from tutorials import feedback_lines as fl

SEEN = "seen=['resnet18', 'vgg16', (53, 16), (23, 8)]"


def test_an_exception_shows_its_builtin_type_and_the_students_line_only():
    cells = {"fc_param_share": 6, "setup": 3}
    assert fl.exception(f"RuntimeError: {SEEN} (cell fc_param_share, line 3)", cells) == \
        "RuntimeError raised in your code (cell fc_param_share, line 3)"
    for text in (f"Seen_53_16: {SEEN} (cell fc_param_share, line 3)",  # a class named after the data
                 f"ValueError: {SEEN} (cell resnet18_vgg16, line 3)",  # a cell the notebook does not have
                 f"ValueError: {SEEN} (cell fc_param_share, line 5316)"):  # a line outside the cell
        shown = fl.exception(text, cells)
        assert "53" not in shown and "resnet18" not in shown and "vgg16" not in shown, shown
    ref = "stanza_core.perf.traffic.expected_bytes"
    refused = f"PermissionError: {ref}{fl.GRADED_AGAINST} (cell fc_param_share, line 2)"
    assert fl.exception(refused, cells, {ref}) == f"PermissionError: {ref}{fl.GRADED_AGAINST} (cell fc_param_share, line 2)"
    assert ref not in fl.exception(refused.replace(ref, "resnet18.vgg16"), cells, {ref})


def test_a_rank_failure_shows_the_rank_the_type_and_the_line():
    assert fl.rank_failure(f"rank 1 raised KeyError: {SEEN} (in fc_worker, line 7); rank 0 raised ...",
                           {"fc_worker"}) == "rank 1 raised KeyError (in fc_worker, line 7)"
    assert fl.rank_failure(f"rank 1 raised KeyError: x (in vgg16_53, line 7)", {"fc_worker"}) == \
        "rank 1 raised KeyError (line 7 of your code)"
    assert fl.rank_failure("timed out: not finished 20 s after the ranks started: rank 0 blocked in recv(src=1)") \
        .startswith("deadlock or timeout")
    assert fl.rank_failure(SEEN) == "the ranks did not finish"


def test_a_failed_check_names_its_kind():
    assert fl.check_kind("3 ranks: equal to one process", "rank 0: after 5 steps ...", 5) == "parameters after 5 steps"
    assert fl.check_kind("fc_worker, 4 ranks: bytes", "rank 3 sent ...") == "bytes"
    assert fl.check_kind("3 ranks: overlap", "rank 0, step 1: ...") == "schedule"
    assert fl.check_kind("3 ranks: optimizer state sharded", "rank 0 kept ...") == "memory kept between steps"
    assert fl.check_kind("2 ranks", "deadlock or timeout: ...") == "deadlock / timeout"
