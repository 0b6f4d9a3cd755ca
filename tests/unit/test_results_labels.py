"""The labels docs/results.md gives replayed and modelled figures come from the data (the stored
runs' device row and measurement version; the device table's row), the notebooks' markdown cites
only files that exist (benchmarks/results_page.py --check), and the front door stays one: README
<= 120 lines with its picture, no dated measurement outside lab/LOG.md and benchmarks/results/.
Each check is shown failing on a planted case. About 10 s (torch import, the device table)."""
import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("results_page", ROOT / "benchmarks" / "results_page.py")
rp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rp)

CELL = ("alexnet", 16, 100.0)  # AlexNet at the paper's scale, 100 Gb/s: ps and stanza k = 1, 2 stored
KS = [1, 2]


@pytest.fixture(scope="module")
def entries():
    return rp.grid()


def test_a_replayed_label_is_read_from_its_runs(entries):
    used = rp.cell_runs(entries, *CELL, {"ps", "stanza k=1", "stanza k=2"})
    assert len(used) == 3 and {e["version"] for e in used} <= {1, 2}  # replayed with the V100 row v2
    base = rp.replayed_cell(entries, *CELL, KS)
    assert base["value"] is not None and base["label"].startswith("v100 row v2, measurement version")
    # planted: the same runs as if measured at version 4 (row v3). A label written in the code
    # ("V100 row v2", as results_page.py once wrote it for every replayed cell) would not follow.
    moved = [dict(e, version=4) if e in used else e for e in entries]
    cell = rp.replayed_cell(moved, *CELL, KS)
    assert cell["label"] == "v100 row v3, measurement version 4 (3 timed steps)"
    assert cell["value"] == base["value"] and not cell["mixed"]
    # planted: only ps moved to row v3: the runs replayed different rows, so no ratio is shown
    mixed = [dict(e, version=4) if e in used and e["summary"]["label"] == "ps" else e for e in entries]
    cell = rp.replayed_cell(mixed, *CELL, KS)
    assert cell["mixed"] and cell["value"] is None and "v100 row v2" in cell["label"] and "v100 row v3" in cell["label"]
    # planted: ps measured at version 1, the stanza runs at version 2 (both replayed row v2): a ratio
    # of runs of two measurement versions is not shown either
    older = [dict(e, version=1) if e in used and e["summary"]["label"] == "ps" else e for e in entries]
    cell = rp.replayed_cell(older, *CELL, KS)
    assert cell["mixed"] and cell["value"] is None and "measurement version 1" in cell["label"]


def test_no_ratio_on_the_page_divides_runs_of_two_measurement_versions():
    """A replayed ratio the page shows rests on runs of one measurement version (its label, read
    from the runs, names them); a figure whose runs are of two versions shows MIXED, not a number."""
    page = rp.PAGE.read_text()
    rows = [ln for ln in page.splitlines() if ln.startswith("|") and "replayed (" in ln]
    assert rows
    for ln in rows:  # the paper tables: one label per row, "measurement version N (...)"
        if len(set(re.findall(r"measurement version (\d+) \(", ln))) > 1:
            assert rp.MIXED in ln, ln
    cells = [c.strip() for ln in page.splitlines() if ln.startswith("|") for c in ln.split("|")]
    short = [c for c in cells if re.fullmatch(r"[\d.]+x \(v100 row v\d+, version [\d, ]+\)", c)]
    assert short, "the replayed table's cells"
    assert [c for c in short if "," in c.split("version")[1]] == []


def test_the_row_map_names_real_rows_and_is_read_at_the_current_version():
    from stanza_core.perf.devices import DEVICE_TABLE
    from stanza_core.perf.rows import row_version
    from stanza_core.runs.store import MEASUREMENT_VERSION

    assert rp.ROWS_READ_AT == MEASUREMENT_VERSION, "a new measurement version: read RENAMED_ROWS against it"
    for renames in rp.RENAMED_ROWS.values():
        for old, now in renames.items():
            assert old in DEVICE_TABLE and now in DEVICE_TABLE and row_version(old) != row_version(now)
    assert rp.row_name("v100") == row_version("v100").split(" (")[0]  # the modelled label is the table's
    assert rp.modelled_how() == f"modelled ({rp.row_name('v100')})"
    assert rp.row_name("h200-measured") == "h200-measured record"


def test_a_hard_coded_label_on_the_page_is_stale():
    page = rp.PAGE.read_text()
    row = next(line for line in page.splitlines() if line.startswith("| 1.55x over PS at 100 Gb/s (AlexNet) |"))
    label = re.search(r"replayed \((v100 row v\d[^:]*)\): ", row)
    assert label, row
    planted = page.replace(row, row.replace(label.group(1), "V100 row v2"))
    assert planted != page and rp.render(planted) != planted
    generated = "\n".join(re.findall(r"<!-- results:\w+:begin -->\n(.*?)<!-- results:\w+:end -->", page, re.S))
    assert "replayed (v100 row" in generated and "V100 row v2" not in generated  # each label the data's


def test_v100_kernel_goals_are_the_tests():
    spec = importlib.util.spec_from_file_location("deepbench_test", ROOT / "tests" / "unit" / "test_v100_deepbench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert rp.V100_KERNEL_GOALS == mod.GOALS


def test_notebook_citations_resolve_and_a_missing_one_fails(tmp_path, monkeypatch):
    assert rp.notebook_citations() == []
    cited = [p for nb in rp.NOTEBOOKS.glob("*.ipynb") for t in rp.markdown_cells(nb) for p in rp.CITED.findall(t)]
    assert len(cited) >= 9  # not vacuous: every notebook cites its YAML
    text = ("committed in `benchmarks/results/paper_ps_replay.json`; see ../reproductions/bandwidth_sweep.yaml, "
            "../reproductions/nosuch.yaml and `benchmarks/paper_regime_replay.py --configs ps_sN`")
    assert rp.missing_citations(text) == ["benchmarks/results/paper_ps_replay.json", "../reproductions/nosuch.yaml"]
    nb = {"cells": [{"cell_type": "markdown", "source": ["`benchmarks/results/paper_ps_replay.json`, `reproductions/traffic.yaml`"]},
                    {"cell_type": "code", "source": ["x = 'lab/NO.md'"]}]}
    (tmp_path / "99_planted.ipynb").write_text(json.dumps(nb))
    assert rp.notebook_citations(tmp_path) == ["99_planted.ipynb: benchmarks/results/paper_ps_replay.json"]
    monkeypatch.setattr(rp, "render", lambda page: page)  # the tables are test_results_page.py's
    assert rp.main(["--check"]) == 0
    monkeypatch.setattr(rp, "notebook_citations", lambda: ["99_planted.ipynb: benchmarks/results/paper_ps_replay.json"])
    assert rp.main(["--check"]) == 1


@pytest.mark.parametrize("stem", ["03_throughput", "05_bandwidth_sweep"])
def test_the_edited_notebooks_markdown_equals_its_py_pair(stem):
    jupytext = pytest.importorskip("jupytext")
    py = [c.source for c in jupytext.read(ROOT / "notebooks" / f"{stem}.py").cells if c.cell_type == "markdown"]
    assert py == rp.markdown_cells(ROOT / "notebooks" / f"{stem}.ipynb")


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 120
    pictures = re.findall(r"!\[[^]]*\]\(([^)]+\.png)\)", text)
    assert pictures and all((ROOT / p).is_file() and (ROOT / p).stat().st_size < 150_000 for p in pictures)
    for command in ("make reproduce", "make test", "make course", "torchrun --nnodes"):
        assert command in text


DATE = re.compile(r"(?<![\w/.-])20\d\d-\d\d-\d\d(?![\w/])")  # a day, not a path under benchmarks/results/


def test_no_dated_measurement_outside_the_log():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *(ROOT / "stanza_core" / p for p in ("netem/facts.py", "runs/store.py", "runs/dilation_rule.py"))]
    dated = {f.name: DATE.findall(f.read_text()) for f in files}
    assert {k: v for k, v in dated.items() if v} == {}
    assert DATE.findall("measured 2026-12-05, `benchmarks/results/gpu/h100-2026-12-05/results.json`") == ["2026-12-05"]
