"""`python -m stanza_core.perf`: the ranking table, the sweep JSON, and one-line errors (exit 2)."""
import json
import subprocess
import sys

import pytest

from stanza_core import get_model, profile_model
from stanza_core.perf.__main__ import main

TINY = ["--model", "tiny_cnn", "--image-size", "32", "--num-classes", "10"]


def test_ranking_table(capsys):
    assert main(TINY + ["--nodes", "4", "--gbps", "10", "--device", "v100"]) == 0
    out = capsys.readouterr().out
    assert "best:" in out and "cluster: 4 nodes, 10 Gb/s" in out
    rows = [line.split() for line in out.splitlines() if line.split() and line.split()[0] in ("ps", "ddp", "stanza")]
    assert sorted((r[0], r[1], r[-1]) for r in rows) == [
        ("ddp", "-", "-"), ("ps", "-", "S=1"), ("ps", "-", "S=1+overlap"), ("ps", "-", "S=2"), ("ps", "-", "S=2+overlap"),
        ("ps", "-", "colocated"), ("ps", "-", "colocated+overlap"), ("stanza", "1", "-"), ("stanza", "2", "-")]
    ddp = next(r for r in rows if r[0] == "ddp")
    assert ddp[5] == "1.00x"  # the vs-ddp column of ddp itself


def test_json_output_has_the_ranking(capsys):
    assert main(TINY + ["--nodes", "3", "--global-batch", "6", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert len(res["ranking"]) == 6 and res["speedup_vs_ddp"] >= 1.0  # ddp, 4 ps variants, stanza k=1
    assert res["speedup_vs_best_ps"] <= res["speedup_vs_ps"]
    assert len(res["best"]["ranks"]) == 3


def test_sweep_writes_json(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    assert main(TINY + ["--sweep", "--bandwidths", "1,100", "--sizes", "2,4", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert len(res["rows"]) == 4 and res["model"] == "tiny_cnn"
    assert f"wrote {out}" in capsys.readouterr().out


def test_measured_profile_file(tmp_path, capsys):
    prof = profile_model(get_model("tiny_cnn", 10), (3, 16, 16), 2, time=True, reps=2, name="tiny_cnn")
    path = tmp_path / "p.json"
    path.write_text(json.dumps(prof.to_dict()))
    assert main(["--profile", str(path), "--device", "measured", "--nodes", "2", "--gbps", "0.1"]) == 0
    assert "cpu (measured, batch 2)" in capsys.readouterr().out


@pytest.mark.parametrize("argv, fragment", [
    (TINY + ["--nodes", "0"], "--nodes must be >= 1"),
    (TINY + ["--gbps", "-1"], "--gbps and --bucket-mb must be > 0"),
    (TINY + ["--device", "tpu"], "unknown device 'tpu'; expected one of: v100"),
    (TINY + ["--device", "h200-measured"], "h200-measured has no measured record of tiny_cnn; it has: alexnet"),
    (["--model", "nope"], "unknown model 'nope'"),
    (["--model", "vgg16", "--image-size", "16"], "image_size for vgg16 must be an integer >= 32, got 16"),
    (TINY + ["--sweep"], "--sweep needs --out PATH"),
    (TINY + ["--global-batch", "8", "--batch-per-worker", "2"], "not allowed with argument"),
    (TINY + ["--nodes", "4", "--ps-shards", "5"], "ps_shards 5 exceeds the 4 nodes"),
    (TINY + ["--sizes", "2,x", "--sweep", "--out", "o.json"], "expected comma-separated integers"),
    (TINY + ["--device", "measured"], "has no timings"),
    (["--profile", "/nonexistent/p.json"], "does not exist"),
    (TINY + ["--nodes", "4", "--global-batch", "2"], "global_batch must be an integer >= 4"),
])
def test_bad_arguments_one_line_exit_2(argv, fragment, capsys):
    with pytest.raises(SystemExit) as e:
        code = main(argv)
        raise SystemExit(code)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1, err


def test_real_process_exit_code():
    r = subprocess.run([sys.executable, "-m", "stanza_core.perf", "--nodes", "-3"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().endswith("--nodes must be >= 1, got -3")
    assert r.stdout == ""


def test_ps_candidates_can_be_chosen(capsys):
    assert main(TINY + ["--nodes", "6", "--ps-servers", "3", "--ps-overlap", "on"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("ps ")]
    assert sorted(r[-1] for r in rows) == ["S=3+overlap", "colocated", "colocated+overlap"]  # colocated: baseline


def test_a_measured_device_end_to_end():
    """`perf --device h200-measured`, as a user runs it: the package's records at the batch per
    worker (global batch / N), named as a measured record in the output."""
    r = subprocess.run([sys.executable, "-m", "stanza_core.perf", "--model", "alexnet", "--device", "h200-measured",
                        "--nodes", "4", "--gbps", "100", "--global-batch", "128", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["best"]["device"].startswith("h200-measured (measured record: NVIDIA H200 alexnet 224px tf32 on")
    assert "at batch 32;" in res["best"]["device"] and "extrapolated" not in res["best"]["device"]


def test_table_and_measured_h200_name_their_source(capsys):
    """`--device h200` (the compute model's row) and `--device h200-measured` (the records) side
    by side: each prediction names where its compute comes from."""
    for dev, source in (("h200", "h200 (table)"), ("h200-measured", "h200-measured (measured record")):
        assert main(["--model", "alexnet", "--device", dev, "--nodes", "4", "--global-batch", "64", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["best"]["device"].startswith(source)
