"""The report opens with the network off: headless Chromium (Selenium, the DevTools protocol's
network emulation set offline) opens index.html, the gallery, a notebook page with math and a
plotly figure, and a lecture deck of a tiny fixture report (one experiment and one deck: two
kernels, 30-70 s), and records every request: none may fail and none may leave the output
folder. MathJax must have typeset the page's math, reveal.js must have started the deck, plotly
must have drawn.

The same browser then opens the index of this repository's own experiments (no notebook run:
every experiment "not run", every claim row present) in a 1400 px wide window: nothing may be
wider than the window. Its screenshot goes to reproductions/out/report_index_1400.png.

Needs: apt-get install -y chromium chromium-driver; pip install selenium (skipped otherwise).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = REPO_ROOT / "reproductions" / "out" / "report_index_1400.png"
WIDTH = 1400

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]

CODE = """\
import plotly.graph_objects as go
import stanza_core.nbtools as nbt
nbt.write_results({"value": 2 * scale}, out_dir)
nbt.save_figures({"bars": go.Figure(go.Bar(x=["a", "b"], y=[1, scale]))}, out_dir, png=False)
go.Figure(go.Bar(x=["a", "b"], y=[1, scale]))
"""
MATH = "# fixture\n\nWith $N_c = N - k$ CONV workers, each trains $b = G / N_c$ samples:\n\n$$P = P_c + P_f$$"


def _notebook(path: Path, slides: bool = False):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell('scale: float = 1.0  # a number\nout_dir: str = "out"  # output folder')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell(MATH), params, nbformat.v4.new_code_cell(CODE)]
    if slides:
        for cell in nb.cells:
            cell.metadata["slideshow"] = {"slide_type": "slide"}
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A fixture project's report, built by `stanza-reproduce` (two kernels and their exports)."""
    import yaml

    from stanza_core.reproduce import main

    root = tmp_path_factory.mktemp("project")
    for folder in ("notebooks", "reproductions", "tutorials/lectures"):
        (root / folder).mkdir(parents=True)
    _notebook(root / "notebooks" / "good.ipynb")
    _notebook(root / "tutorials" / "lectures" / "l1_fixture.ipynb", slides=True)
    spec = {"title": "fixture", "notebook": "notebooks/good.ipynb", "paper": "Table 0", "quick": {"scale": 1.5},
            "full": {"scale": 10.0}, "claims": [{"claim": "twice", "kind": "counted", "paper": "3", "ours": "value"}]}
    (root / "reproductions" / "good.yaml").write_text(yaml.safe_dump(spec))
    out = root / "out"
    assert main(["--specs", str(root / "reproductions"), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    missing = (f"no {CHROMIUM}" if not os.access(CHROMIUM, os.X_OK) else
               "no chromedriver on PATH" if not shutil.which("chromedriver") else None)
    if missing is None:
        try:
            from selenium import webdriver
            from selenium.webdriver.chrome.service import Service
        except ImportError:
            missing = "selenium is not installed"
    if missing:
        pytest.skip(f"browser test needs Chromium, chromedriver and selenium ({missing})")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", f"--window-size={WIDTH},900",
                "--allow-file-access-from-files",  # reveal's notes plugin and MathJax load files by XHR
                f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                "downloadThroughput": -1, "uploadThroughput": -1})
    try:
        yield driver
    finally:
        driver.quit()


def _open(driver, page: Path, ready: str, timeout: float = 60) -> list[str]:
    """Open `page`, wait until the JavaScript `ready` is true, then a second more for late loads;
    return the URLs of every request the page made. Fails on any failed request."""
    driver.get_log("performance")  # drop what earlier pages logged
    driver.get(page.as_uri())
    deadline = time.monotonic() + timeout
    while not driver.execute_script(f"return Boolean({ready})"):
        assert time.monotonic() < deadline, f"{page.name}: timed out waiting for {ready}"
        time.sleep(0.25)
    time.sleep(1.0)
    urls, failed = {}, []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            urls[msg["params"]["requestId"]] = msg["params"]["request"]["url"]
        elif msg["method"] == "Network.loadingFailed":
            failed.append((msg["params"]["requestId"], msg["params"].get("errorText")))
    failed = [(urls.get(r, r), why) for r, why in failed]
    # about:blank is no resource: an empty frame some scripts open, which headless Chromium reports failed
    failed = [(u, why) for u, why in failed if u != "about:blank"]
    assert not failed, f"{page.name}: failed requests {failed}"
    return [u for u in urls.values() if u != "about:blank"]


def _within(urls: list[str], out: Path) -> None:
    outside = [u for u in urls if not (u.startswith(out.as_uri() + "/") or u.startswith("data:"))]
    assert not outside, f"requests outside the output folder: {outside}"


PLOTTED = "document.querySelectorAll('.js-plotly-plot .main-svg').length > 0"
TYPESET = "window.MathJax && document.querySelectorAll('.MathJax, .MathJax_Display, .MathJax_CHTML').length >= 3"


def test_index_and_gallery_open_offline(report, browser):
    _within(_open(browser, report / "index.html", PLOTTED), report)
    _within(_open(browser, report / "gallery.html", "document.readyState === 'complete'"), report)


def test_a_notebook_page_typesets_its_math_offline(report, browser):
    page = report / "good" / "good.html"
    urls = _open(browser, page, f"({TYPESET}) && ({PLOTTED})")
    _within(urls, report)
    assert any(u.endswith("/_static/require.js") for u in urls) and any("/_static/mathjax/" in u for u in urls)


def test_a_lecture_deck_starts_offline(report, browser):
    page = report / "tutorials" / "l1_fixture" / "l1_fixture.slides.html"
    urls = _open(browser, page, "document.querySelector('.reveal.ready') && window.MathJax && "
                               "document.querySelectorAll('.MathJax, .MathJax_Display').length >= 1")
    _within(urls, report)
    assert any(u.endswith("/_static/reveal.js/dist/reveal.js") for u in urls)


def test_long_paths_and_numbers_wrap_within_1400_px(report, browser):
    """The fixture's index again, its status planted with what widened the page: an error naming a
    long path and a claim value with no space to break at."""
    from stanza_core.reproduce.report import write_index
    from stanza_core.reproduce.spec import load_specs

    path = report / "good" / "status.json"
    st = json.loads(path.read_text())
    st["error"] = "FileNotFoundError: " + "/very/long/path" * 40 + "/results.json"
    st["claims"][0]["ours"] = "1234567890" * 30
    path.write_text(json.dumps(st))
    index = write_index(report, load_specs(report.parent / "reproductions"))
    _open(browser, Path(index), PLOTTED)
    inner, scroll = browser.execute_script("return [window.innerWidth, document.documentElement.scrollWidth]")
    assert inner == WIDTH and scroll <= inner, f"the index is {scroll} px wide in a {inner} px window"


def test_the_index_fits_a_1400_px_window(browser, tmp_path):
    from stanza_core.reproduce.report import write_index
    from stanza_core.reproduce.spec import load_specs

    index = write_index(tmp_path, load_specs(REPO_ROOT / "reproductions"))
    _open(browser, Path(index), "document.readyState === 'complete'")
    inner, scroll = browser.execute_script(
        "return [window.innerWidth, document.documentElement.scrollWidth]")
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOT))
    assert inner == WIDTH and scroll <= inner, f"the index is {scroll} px wide in a {inner} px window"
