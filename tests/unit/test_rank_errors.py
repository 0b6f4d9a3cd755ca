"""The launcher's one-line summary of a failed job: the ranks' error files first (earliest
exception; torchrun's layout LOG_DIR/<run>/attempt_<n>/<rank>/error.json), the text of stderr
only when there are none."""
from __future__ import annotations

import json

from stanza_core.launch import job_failure
from stanza_core.engine.rank_errors import read

STDERR = "[rank1]: RuntimeError: boom\nerror: rank 0: communication failed: Connection closed by peer (step 2)\n"


def write_error(log_dir, rank: int, message: str, timestamp: int):
    folder = log_dir / "run_abc" / "attempt_0" / str(rank)
    folder.mkdir(parents=True)
    data = {"message": {"message": message, "extraInfo": {"py_callstack": "...", "timestamp": str(timestamp)}}}
    (folder / "error.json").write_text(json.dumps(data))


def test_the_earliest_exception_in_the_error_files_sums_up_the_job(tmp_path):
    write_error(tmp_path, 2, "ValueError: later", 1700000005)
    write_error(tmp_path, 1, "RuntimeError: boom\nsecond line", 1700000001)
    (tmp_path / "run_abc" / "attempt_0" / "0").mkdir()  # a rank that wrote no error file
    errors = read(str(tmp_path))
    assert errors == {1: "RuntimeError: boom", 2: "ValueError: later"}
    assert job_failure(STDERR, 1, errors) == "rank 1 raised RuntimeError: boom (exit 1)"


def test_without_error_files_the_text_of_stderr_is_read_as_before(tmp_path):
    (tmp_path / "run_abc" / "attempt_0" / "0").mkdir(parents=True)
    (tmp_path / "run_abc" / "attempt_0" / "0" / "error.json").write_text("{half wri")
    assert read(str(tmp_path)) == {} and read(str(tmp_path / "absent")) == {}
    assert job_failure(STDERR, 1, {}) == "rank 0: communication failed: Connection closed by peer (step 2)"
