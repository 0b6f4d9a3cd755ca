"""The course kit's bookkeeping, without nbgrader runs (tests/tutorials/test_labs.py grades): a
term's folder is never a self-check's, `collect` keeps every earlier submission, `bundle` refuses
anything that holds a solution region or a hidden test and never overwrites, and the command
line answers bad input with exit status 2."""
import os
import zipfile

import pytest

from tutorials import course


def _term(tmp_path, labs=("lab7",)):
    term = course.open_course(tmp_path / "term", create=True)
    for lab in labs:
        (term / "release" / lab).mkdir(parents=True)
        (term / "release" / lab / f"{lab}.ipynb").write_text('{"cells": ["YOUR CODE HERE"]}')
    return term


def test_a_term_folder_is_made_once_and_only_where_it_is_kept(tmp_path):
    term = course.open_course(tmp_path / "term", create=True)
    assert (term / course.TERM_MARKER).is_file() and course.open_course(term) == term
    from traitlets.config import Config
    config = Config()  # what nbgrader's formgrader, started in the folder, reads
    exec((term / "nbgrader_config.py").read_text(), {"get_config": lambda: config})
    assert config.CourseDirectory.course_id == "stanza" and config.CourseDirectory.root == str(term)
    with pytest.raises(ValueError, match="not a course folder"):
        course.open_course(tmp_path / "elsewhere")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("a user's file")
    with pytest.raises(ValueError, match="not empty"):
        course.open_course(tmp_path / "mine", create=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "a user's file"
    with pytest.raises(ValueError, match="make clean"):
        course.open_course(course.CLEANED / "term", create=True)
    with pytest.raises(RuntimeError, match="term"):
        course.build_release(term, ["lab7"])
    assert (term / course.TERM_MARKER).is_file()


def test_collect_keeps_every_earlier_submission(tmp_path):
    term = _term(tmp_path)
    inbox = tmp_path / "inbox"
    (inbox / "ana" / "lab7").mkdir(parents=True)
    (inbox / "ben").mkdir(parents=True)
    (inbox / "ana" / "lab7" / "lab7.ipynb").write_text("first")
    (inbox / "ben" / "lab7.ipynb").write_text("ben's")
    (inbox / "ben" / "lab3.ipynb").write_text("not released")
    assert course.collect(term, inbox, ["lab3", "lab7"]) == [("ana", "lab7"), ("ben", "lab7")]
    assert not (term / "submitted" / "ben" / "lab3").exists()
    assert course.collect(term, inbox, ["lab7"]) == []
    (inbox / "ana" / "lab7" / "lab7.ipynb").write_text("second")
    assert course.collect(term, inbox, ["lab7"]) == [("ana", "lab7")]
    assert (term / "submitted" / "ana" / "lab7" / "lab7.ipynb").read_text() == "second"
    kept = list((term / "backup").glob("*/submitted/ana/lab7/lab7.ipynb"))
    assert [p.read_text() for p in kept] == ["first"]
    (inbox / "ana" / "lab7" / "lab7.ipynb").write_text("third")
    course.collect(term, inbox, ["lab7"])
    assert sorted(p.read_text() for p in (term / "backup").glob("*/submitted/ana/lab7/lab7.ipynb")) == ["first", "second"]


def test_bundle_refuses_a_leak_and_never_overwrites(tmp_path):
    term = _term(tmp_path, ("lab1", "lab7"))
    to = course.bundle(term, tmp_path / "students.zip")
    with zipfile.ZipFile(to) as z:
        assert sorted(z.namelist()) == ["stanza-labs/README.md", "stanza-labs/lab1/lab1.ipynb", "stanza-labs/lab7/lab7.ipynb"]
        assert "lab1, lab7" in z.read("stanza-labs/README.md").decode()
    with pytest.raises(ValueError, match="exists"):
        course.bundle(term, to)
    folder = course.bundle(term, tmp_path / "students")
    assert (folder / "stanza-labs" / "lab7" / "lab7.ipynb").is_file()
    for leak in course.LEAKS:
        (term / "release" / "lab7" / "lab7.ipynb").write_text(f'{{"cells": ["{leak}"]}}')
        with pytest.raises(RuntimeError, match="not bundled"):
            course.bundle(term, tmp_path / f"leak-{len(leak)}.zip")
        assert not (tmp_path / f"leak-{len(leak)}.zip").exists()


def test_the_command_line_rejects_bad_input(tmp_path, capsys):
    assert course.main(["--labs", "lab99"]) == 2  # no subcommand: the self-check
    assert "unknown labs" in capsys.readouterr().err
    assert course.main(["export", "--course", str(tmp_path / "none")]) == 2
    assert "not a course folder" in capsys.readouterr().err
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "x").write_text("x")
    assert course.main(["--out", str(tmp_path / "mine")]) == 2
    assert (tmp_path / "mine" / "x").read_text() == "x"
    term = _term(tmp_path)
    assert course.main(["collect", "--course", str(term), "--submissions", str(tmp_path / "no-inbox")]) == 2
    with pytest.raises(SystemExit):
        course.main(["bundle", "--course", str(term)])  # --to is required


def test_grading_kernels_talk_over_unix_sockets(tmp_path):
    """nbgrader's kernels use ipc transport at a short absolute socket path (over TCP each kernel
    warns of unencrypted traffic, once per graded notebook: 2 warnings for one lab's self-check)."""
    pytest.importorskip("nbgrader")
    km = course._api(tmp_path).config.AsyncKernelManager
    assert km.transport == "ipc" and os.path.isabs(km.ip) and len(km.ip) + len("-65535") < 100


def test_collect_records_each_submissions_own_time(tmp_path):
    import os
    term = _term(tmp_path)
    inbox = tmp_path / "inbox"
    (inbox / "ana" / "lab7").mkdir(parents=True)
    (inbox / "ana" / "lab7" / "lab7.ipynb").write_text("ana's")
    (inbox / "ana" / "lab7" / "timestamp.txt").write_text("2026-10-05 21:15:00.250000 UTC")  # nbgrader's exchange
    (inbox / "ben").mkdir()
    (inbox / "ben" / "lab7.ipynb").write_text("ben's")
    os.utime(inbox / "ben" / "lab7.ipynb", (1_790_000_000, 1_790_000_000))  # 2026-09-21 14:13:20 UTC
    course.collect(term, inbox, ["lab7"])
    stamp = lambda s: (term / "submitted" / s / "lab7" / "timestamp.txt").read_text()  # noqa: E731
    assert stamp("ana") == "2026-10-05 21:15:00.250000 UTC"
    assert stamp("ben") == "2026-09-21 14:13:20.000000 UTC"
    # the copy's own time is the collection's: newer than any earlier grading of this student
    assert (term / "submitted" / "ben" / "lab7" / "lab7.ipynb").stat().st_mtime > 1_790_000_000


def test_the_late_rule_takes_a_share_per_started_day(tmp_path):
    term = _term(tmp_path)
    cfg = course.term_config(term)
    assert cfg["due"] == {} and course.due_date(term, "lab7") is None
    (term / course.TERM_CONFIG).write_text('{"due": {"lab7": "2026-10-05 23:59 UTC"}, "late_penalty_per_day": 0.25}')
    cfg = course.term_config(term)
    assert str(course.due_date(term, "lab7")) == "2026-10-05 23:59:00" and course.due_date(term, "lab1") is None
    day = 86400
    assert [course.late_penalty(20.0, s, cfg) for s in (0, -5, 1, day, day + 1, 3 * day, 10 * day)] == \
        [0.0, 0.0, 5.0, 5.0, 10.0, 15.0, 20.0]  # at most all of it (late_penalty_max 1.0)
    assert course.late_penalty(20.0, 10 * day, {**cfg, "late_penalty_max": 0.5}) == 10.0
    (term / course.TERM_CONFIG).write_text('{"due": ["lab7"]}')
    import pytest
    with pytest.raises(ValueError, match="due"):
        course.term_config(term)
