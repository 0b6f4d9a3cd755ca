"""docs/results.md's tables equal what benchmarks/results_page.py recomputes from the committed data
(the claims' YAML, the full grid's stored runs, benchmarks/results/*.json, the library's counts and
model), and its links into the other docs resolve. Measures nothing: about 10 s (torch import, the
model's profiles)."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("results_page", ROOT / "benchmarks" / "results_page.py")
results_page = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(results_page)


@pytest.fixture(scope="module")
def page_and_render():
    page = results_page.PAGE.read_text()
    return page, results_page.render(page)


def test_every_table_on_the_page_equals_the_committed_data(page_and_render):
    page, rendered = page_and_render
    assert rendered == page, "docs/results.md is stale: run python benchmarks/results_page.py --write"


def test_the_page_shows_every_paper_figure_and_the_grid_count(page_and_render):
    page, _ = page_and_render
    import yaml

    from stanza_core.reproduce.tally import PAPER_FIGURES

    rows = results_page.paper_table()[2:]
    assert [r.split(" | ")[0].lstrip("| ") for r in rows] == list(PAPER_FIGURES.values())  # one row each, in order
    shown = sum("paper_figure" in c and "evidence" not in c for p in (ROOT / "reproductions").glob("*.yaml")
                for c in yaml.safe_load(p.read_text())["claims"])
    assert len(results_page.evidence_table()[2:]) == shown  # every other claim showing a figure, none dropped
    assert "**differs**" in page and "**not judged**" in page  # not vacuous: verdicts occur
    from stanza_core.runs.store import configuration_id

    keys = {configuration_id(json.loads(f.read_text())["key"])
            for f in (ROOT / "benchmarks" / "results" / "full").glob("*.json")}  # versions of one count once
    assert f"- {len(keys)} of 125 configurations stored" in page


def test_a_planted_wrong_number_makes_the_page_stale(page_and_render):
    page, _ = page_and_render
    for start in ("| 1.55x over PS at 100 Gb/s (AlexNet) |",):  # the counted row (evidence rows: the same render)
        row = next(line for line in page.splitlines() if line.startswith(start))
        ours = row.split(" | ")[2]  # figure | PS or claim | ours | ...
        planted = page.replace(row, row.replace(f" | {ours} | ", " | 1.55x | " if ours != "1.55x" else " | 1.56x | ", 1))
        assert planted != page
        assert results_page.render(planted) != planted


def test_links_into_the_docs_resolve(page_and_render):
    page, _ = page_and_render
    assert results_page.broken_links(page) == []
    assert results_page.broken_links("[x](benchmarks.md#no-such-heading)") == ["benchmarks.md#no-such-heading"]
    assert results_page.broken_links("[x](../lab/LOG.md#no-such-heading)") == ["../lab/LOG.md#no-such-heading"]
    assert results_page.broken_links("[x](../lab/NOSUCH.md) [y](nosuch.md#a)") == ["../lab/NOSUCH.md", "nosuch.md#a"]
    assert results_page.broken_links("[x](../lab/LOG.md#fidelity-replay-against-real-compute)") == []


@pytest.mark.parametrize("doc", ["README.md", "docs", "lab"])
def test_links_between_the_repositorys_markdown_files_resolve(doc):
    """Every relative link of README.md, docs/*.md and lab/*.md to a markdown file, and its
    #anchor, resolves (the rule above, from each file's own folder)."""
    paths = [ROOT / doc] if doc.endswith(".md") else sorted((ROOT / doc).glob("*.md"))
    assert paths
    bad = {p.name: b for p in paths if (b := results_page.broken_links(p.read_text(), p.parent))}
    assert bad == {}
