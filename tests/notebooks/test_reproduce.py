"""stanza_core.reproduce on a tiny fixture project (two YAML files, two notebooks) in tmp_path:
the report, the claim table, failures, --only, and never writing into someone else's folder."""
import json

import pytest

for _pkg in ("plotly", "papermill", "nbformat", "jupytext", "ipykernel"):  # the notebook stack (not on every GPU VM)
    pytest.importorskip(_pkg, reason=f"the notebook tests need {_pkg}")

import nbformat
import yaml

from stanza_core.reproduce import MARKER, SpecError, evaluate_claims, load_spec, lookup, main

GOOD_CODE = """\
import plotly.graph_objects as go
import stanza_core.nbtools as nbt
from ipykernel.connect import get_connection_info
transport = get_connection_info(unpack=True)["transport"]
nbt.write_results({"value": 2 * scale, "nested": {"items": [1, 2, 3]}, "transport": transport}, out_dir)
nbt.save_figures({"bars": go.Figure(go.Bar(x=["a", "b"], y=[1, scale]))}, out_dir, png=False)
go.Figure(go.Bar(x=["a", "b"], y=[1, scale]))  # shown in the notebook: plotly's renderer inlines plotly.js
"""


def _notebook(path, code):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell('scale: float = 1.0  # a number\nout_dir: str = "out"  # output folder')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# fixture"), params, nbformat.v4.new_code_cell(code)]
    nbformat.write(nb, path)


def _spec(notebook, claims, **extra):
    return {"title": f"fixture {notebook}", "notebook": f"notebooks/{notebook}", "paper": "Table 0",
            "quick": {"scale": 1.5}, "full": {"scale": 10.0}, "claims": claims, **extra}


RULE = "fixture: the figure as stated"
COUNTED = {"evidence": ["good", "broken"], "ps": "fixture PS"}  # each of the paper's figures counted once
CLAIMS = [
    {"claim": "twice the scale", "kind": "measured", "paper": "3", "ours": "value", "format": "{:.2f}", "figure": 3.0, "expect": 3.0,
     "bound_rule": RULE, "paper_figure": "alexnet_100gbps", **COUNTED},
    {"claim": "last item", "kind": "counted", "paper": "about 3", "ours": "nested.items.-1", "figure": 3, "expect": [2.5, 3.5],
     "bound_rule": RULE, "deviation": "fixture", "paper_figure": "vgg16_100gbps", **COUNTED},
    {"claim": "scaled", "kind": "replayed (v100 profile)", "paper": "2000", "ours": "value", "scale": 1000, "figure": 2000, "expect": 2000,
     "tolerance": 1, "bound_rule": RULE, "paper_figure": "traffic_vgg16", **COUNTED},
    {"claim": "only in full runs", "kind": "modelled", "paper": "n/a", "ours": "full_only", "modes": ["full"]},
]


@pytest.fixture
def project(tmp_path):
    (tmp_path / "notebooks").mkdir()
    specs = tmp_path / "reproductions"
    specs.mkdir()
    _notebook(tmp_path / "notebooks" / "good.ipynb", GOOD_CODE)
    _notebook(tmp_path / "notebooks" / "broken.ipynb", 'raise ValueError("broken on purpose")')
    (specs / "good.yaml").write_text(yaml.safe_dump(_spec("good.ipynb", CLAIMS)))
    shown = {"claim": "twice the scale, shown", "kind": "measured", "paper": "3", "ours": "value",
             "paper_figure": "alexnet_100gbps"}  # evidence of a figure another claim counts
    (specs / "broken.yaml").write_text(yaml.safe_dump(_spec("broken.ipynb", [shown])))
    (tmp_path / "tutorials").mkdir()
    _notebook(tmp_path / "tutorials" / "t1_fixture.ipynb", GOOD_CODE)  # a course tutorial: into the gallery
    return tmp_path


@pytest.mark.slow  # two kernels and an nbconvert export: ~20 s
def test_runs_everything_reports_and_fails_at_the_end(project, capsys):
    out = project / "out"
    assert main(["--specs", str(project / "reproductions"), "--out", str(out)]) == 1
    printed = capsys.readouterr()
    err = printed.err
    assert "failed: broken (ValueError: broken on purpose (cell [3]))" in err
    index = json.loads((out / "index.json").read_text())
    status = {e["name"]: e for e in index["experiments"]}
    assert status["broken"]["status"] == "failed" and status["good"]["status"] == "ok"  # ran past the failure
    assert status["good"]["badge"] == "differs"  # it ran, and one of its paper claims differs
    claims = status["good"]["claims"]
    assert [c["status"] for c in claims] == ["agrees", "agrees", "differs", "not in quick run"]
    assert [c["ours"] for c in claims[:3]] == ["3.00", "3", "3000.0"]
    good = out / "good"
    results = json.loads((good / "results.json").read_text())
    assert results["value"] == 3.0  # quick parameters injected
    assert results["transport"] == "ipc"  # the kernel's channels are Unix sockets: no TCP port race
    assert (good / "good.ipynb").is_file() and (good / "good.html").stat().st_size > 10_000
    page = (out / "index.html").read_text()
    for text in ("<th>claim</th><th>kind</th><th>paper</th><th>ours</th>", "<td class='kind'>counted</td>",
                 "Status: <span class='differs'>differs</span>", "twice the scale", "3.00", "differs",
                 "broken on purpose", "href='good/good.ipynb'", "href='good/good.html'", "plotly-graph-div"):
        assert text in page, text
    assert (out / "plotly.min.js").is_file() and (out / MARKER).is_file()
    # claims compared with a paper figure: 2 agree, 1 differs; the tutorial is rendered into the gallery
    assert "paper figures: 2 of 4 agree, 0 explained under a stated assumption, 1 differ, 1 not judged\n" in printed.out
    assert "  1.55x over PS at 100 Gb/s (AlexNet): agrees (ours 3.00); PS: fixture PS\n" in printed.out
    assert "paper claims: 2 agree, 0 explained, 1 differ\ngoals: 0 of 0 met, 0 missed\nreported only: 0\n" in printed.out
    tut = out / "tutorials" / "t1_fixture"
    assert json.loads((tut / "status.json").read_text())["status"] == "ok" and (tut / "t1_fixture.html").is_file()
    gallery = (out / "gallery.html").read_text()
    for text in ("href='tutorials/t1_fixture/t1_fixture.html'", "href='good/good.html'", "bars (interactive)"):
        assert text in gallery, text
    assert "<th>2 / 0 / 3</th>" in page  # the summary table's total: agree / explained / compared
    # one plotly.js for the folder: the figures, notebooks and their HTML load it from the root
    assert [p.relative_to(out).as_posix() for p in out.rglob("plotly.min.js")] == ["plotly.min.js"]
    for path in (good / "good.ipynb", good / "good.html", good / "bars.html", tut / "t1_fixture.html"):
        assert path.stat().st_size < 1_000_000, path  # plotly.min.js alone is 4.8 MB
    assert 'src="../plotly.min.js"' in (good / "good.html").read_text()
    assert 'src="../../plotly.min.js"' in (tut / "t1_fixture.html").read_text()

    # --only reruns one experiment (full parameters here) and keeps the other's last status.
    assert main(["--specs", str(project / "reproductions"), "--out", str(out), "--only", "good", "--full",
                 "--no-html"]) == 1  # good's full run lacks the full-only claim key
    status = {e["name"]: e for e in json.loads((out / "index.json").read_text())["experiments"]}
    assert status["broken"]["status"] == "failed" and status["broken"]["mode"] == "quick"
    assert status["good"]["mode"] == "full" and "lacks claim keys ['full_only']" in status["good"]["error"]
    assert json.loads((good / "results.json").read_text())["value"] == 20.0
    assert not (good / "good.html").exists()  # the experiment's folder is replaced, not patched


def test_refuses_a_folder_it_did_not_make(project, capsys):
    mine = project / "my-results"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    assert main(["--specs", str(project / "reproductions"), "--out", str(mine), "--only", "good"]) == 2
    assert "refusing to write into" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"]


def test_unknown_only_name_is_bad_input(project, capsys):
    assert main(["--specs", str(project / "reproductions"), "--only", "nope"]) == 2
    assert "unknown experiments ['nope']" in capsys.readouterr().err


X = {"claim": "x", "kind": "measured", "paper": "y", "ours": "v"}  # a well-formed claim to break


@pytest.mark.parametrize("change, message", [
    ({"colour": "red"}, "top level: Additional properties are not allowed ('colour' was unexpected)"),
    ({"quick": {"scael": 2}}, "quick sets ['scael'], not parameters of notebooks/good.ipynb"),
    ({"tiny": {"out_dir": "/tmp"}}, "tiny sets out_dir: it is chosen by the runner"),
    ({"quick": [1]}, "quick: must be a mapping of notebook parameters"),
    ({"timeout_s": 0}, "timeout_s: must be a positive integer"),
    ({"claims": []}, "claims: must be a non-empty list of claims"),
    ({"claims": [{**X, "modes": ["slow"]}]}, "claim 0 modes 0: must be drawn from quick, full, tiny"),
    ({"notebook": "notebooks/missing.ipynb"}, "does not exist"),
    ({"claims": [{"claim": "x", "paper": "y"}]}, "claim 0: needs claim, kind, paper and ours"),
    ({"claims": [{"claim": "x", "paper": "y", "ours": "v"}]}, "claim 0: needs claim, kind, paper and ours"),
    ({"claims": [{**X, "kind": "replayed"}]}, "claim 0 (x): kind must be"),  # replayed from which profile?
    ({"claims": [{**X, "expect": "big"}]}, "claim 0 expect: must be a number or [low, high]"),
    ({"requires": ["gpu"]}, "requires 0: must be a list drawn from"),
    ({"claims": [{**X, "expect": {"fast": 1.0}}]}, "claim 0 expect: must be a number or [low, high], or a mapping of some of quick, full, tiny"),
    ({"claims": [{**X, "expect": {"quick": "big"}}]}, "claim 0 expect quick: must be a number"),
    ({"claims": [{**X, "paper": "1.5x", "figure": 1.5, "paper_figure": "alexnet_100gbps", "evidence": ["good"], "ps": "-"}]},
     "claim 0 (x): has the paper's figure"),
    ({"claims": [{**X, "paper": "-", "expect": 1.0}]}, "neither figure"),
])
def test_bad_spec_is_one_line(project, change, message):
    path = project / "reproductions" / "good.yaml"
    path.write_text(yaml.safe_dump({**_spec("good.ipynb", CLAIMS), **change}))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert message in str(e.value) and "\n" not in str(e.value) and str(path) in str(e.value)


def test_tiny_defaults_to_quick_and_claims_evaluate(project):
    spec = load_spec(project / "reproductions" / "good.yaml")
    assert spec.params["tiny"] == spec.params["quick"] == {"scale": 1.5}
    results = {"value": 3.0, "nested": {"items": [1, 2, 3]}}
    rows, missing = evaluate_claims(spec, results, "full")
    assert missing == ["full_only"] and rows[3]["ours"] == "not measured"
    assert evaluate_claims(spec, {}, "quick")[1] == ["value", "nested.items.-1", "value"]
    assert lookup(results, "nested.items.0") == 1
    # a key present but None (a figure the run could not compute) is missing, not formatted
    none_rows, none_missing = evaluate_claims(spec, {"value": None, "nested": {"items": [1]}}, "quick")
    assert none_missing == ["value", "value"] and none_rows[0]["status"] == "missing"
    with pytest.raises(KeyError, match="no '3'"):
        lookup(results, "nested.items.3")


def test_a_bound_per_mode_judges_each_mode_by_its_own(project):
    spec = load_spec(project / "reproductions" / "good.yaml")
    spec.claims.append({"claim": "per mode", "kind": "measured", "paper": "0.5", "ours": "value", "figure": 0.5, "bound_rule": RULE,
                        "expect": {"quick": [0.0, 1.0], "full": [0.0, 5.0]}})
    status = {mode: evaluate_claims(spec, {"value": 3.0, "nested": {"items": [3]}}, mode)[0][-1]["status"]
              for mode in ("quick", "full", "tiny")}
    assert status == {"quick": "differs", "full": "agrees", "tiny": "reported"}


def test_kernels_run_quietly_over_unix_sockets(tmp_path, capfd):
    """The runner's kernels print no transport warning (ipykernel warns about every TCP kernel:
    "Kernel is running over TCP without encryption"); a TCP kernel, the control, does."""
    import papermill as pm

    from stanza_core.reproduce.execute import VenvKernelManager, execute

    nb = tmp_path / "quiet.ipynb"
    _notebook(nb, "print('ran')")
    execute(nb, tmp_path / "ran.ipynb", {"out_dir": str(tmp_path)}, progress_bar=False)
    out, err = capfd.readouterr()
    assert "without encryption" not in out + err

    class TcpKernelManager(VenvKernelManager):
        transport = "tcp"

    pm.execute_notebook(str(nb), str(tmp_path / "tcp.ipynb"), parameters={"out_dir": str(tmp_path)},
                        kernel_name="python3", progress_bar=False, kernel_manager_class=TcpKernelManager)
    assert "without encryption" in capfd.readouterr().err  # the check above can see the warning
