"""Every command reads a bad argument the same way: one line, `error: MESSAGE`, exit status 2."""
import pytest

from stanza_core import train
from stanza_core.perf import __main__ as perf_main
from stanza_core.perf import calibrate
from stanza_core.reproduce import run as reproduce_run

COMMANDS = {"train": train.main, "perf": perf_main.main, "perf calibrate": calibrate.main,
            "reproduce": reproduce_run.main}


@pytest.mark.parametrize("argv", [["--bogus"], ["--bogus", "1", "--also-bogus"]])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_bad_argument_is_one_line_with_the_same_prefix(name, argv, capsys):
    try:
        rc = COMMANDS[name](argv)
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2, (name, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) > len("error: "), (name, err)
