"""The command lines list what they accept: every enumerated flag of `train` shows its choices
in --help and refuses anything else in one line (exit 2, the config check's words); `perf
--help` lists its calibrate command."""
import subprocess
import sys

import pytest

from stanza_core import registry, train

from stanza_core.engine import config
from stanza_core.strategies.stanza.options import Options as STANZA
from stanza_core.perf.__main__ import build_parser as perf_parser
from stanza_core.perf.__main__ import main as perf_main

ENUMS = {  # flag: (its choices, the words of TrainConfig's own check)
    "--strategy": (registry.names(), "unknown strategy"),
    "--device": (config.DEVICES, "unknown device"),
    "--backend": (config.BACKENDS, "unknown backend"),
    "--compute": (config.COMPUTE, "unknown --compute"),
    "--replay-wait": (config.REPLAY_WAITS, "unknown --replay-wait"),
    "--bn-stats": (config.BN_STATS, "unknown --bn-stats"),
    "--boundary-dtype": (STANZA.CHOICES["boundary_dtype"], "unknown --boundary-dtype"),
    "--grad-compression": (STANZA.CHOICES["grad_compression"], "unknown --grad-compression"),
    "--compile-mode": (config.COMPILE_MODES, "unknown --compile-mode"),
}


def test_train_help_shows_every_enumerated_flags_choices():
    parser = train.build_parser()
    actions = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    text = parser.format_help()
    for flag, (choices, _) in ENUMS.items():
        assert tuple(actions[flag].choices) == tuple(choices), flag
        assert actions[flag].default in choices, flag
        assert f"{flag} {{{','.join(choices)}}}" in text, flag


@pytest.mark.parametrize("flag", list(ENUMS))
def test_train_refuses_a_bad_choice_in_one_line(flag, as_rank0_of, capsys):
    as_rank0_of(1)
    choices, words = ENUMS[flag]
    argv = [flag, "bogus"] + ([] if flag == "--device" else ["--device", "cpu"])  # no GPU probed
    assert train.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert f"{words} 'bogus'; expected one of {', '.join(choices)}" in err, err


def test_perf_help_lists_calibrate():
    text = perf_parser().format_help()
    assert "calibrate" in text.split("commands:")[1]


def test_perf_calibrate_help_is_calibrates_own():
    r = subprocess.run([sys.executable, "-m", "stanza_core.perf", "calibrate", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--warmup" in r.stdout and "--reps" in r.stdout, r.stderr


@pytest.mark.parametrize("argv, fragment", [
    (["--nodes", "3", "calibrate", "--out", "x.json"], "calibrate takes no ranking options"),
    (["--model", "tiny_cnn", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_perf_misplaced_or_unknown_options_one_line_exit_2(argv, fragment, capsys):
    with pytest.raises(SystemExit) as e:
        perf_main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1, err
