"""The node-assignment explorer in a real browser: JupyterLab (from this venv) on 127.0.0.1 with a
token and a free port, Debian's Chromium driven headless by Selenium through chromedriver. The
test opens notebook 08 (tiny parameters), runs all cells from the Run menu, moves the nodes
slider with the keyboard and checks that the plot was redrawn for the new cluster. A screenshot
goes to reproductions/out/explorer_browser.png.

Needs: apt-get install -y chromium chromium-driver; pip install selenium (skipped otherwise).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = REPO_ROOT / "reproductions" / "out" / "explorer_browser.png"
INSTALL = "apt-get install -y chromium chromium-driver && .venv/bin/pip install selenium"

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(150)]


def _missing() -> str | None:
    if not os.access(CHROMIUM, os.X_OK):
        return f"no {CHROMIUM}"
    if not shutil.which("chromedriver"):
        return "no chromedriver on PATH"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab serving tmp_path, with notebook 08 parameterised for the tiny run."""
    reason = _missing()
    if reason:
        pytest.skip(f"browser test needs Chromium, chromedriver and selenium ({reason}); install: {INSTALL}")
    import papermill
    import yaml

    tiny = yaml.safe_load((REPO_ROOT / "reproductions" / "explorer.yaml").read_text())["tiny"]
    nb = tmp_path / "08_explorer.ipynb"
    papermill.execute_notebook(str(REPO_ROOT / "notebooks" / "08_explorer.ipynb"), str(nb),
                               parameters={**tiny, "out_dir": str(tmp_path / "out")}, prepare_only=True,
                               progress_bar=False)
    port, token = _free_port(), uuid.uuid4().hex
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"), IPYTHONDIR=str(tmp_path / "ipython"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter-runtime"), PYTHONPATH=str(REPO_ROOT))
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}",
           f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}", "--ServerApp.port_retries=0"]
    if os.geteuid() == 0:  # CI runs as root; JupyterLab refuses root without this
        cmd.append("--allow-root")
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 40
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                    json.load(r)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("JupyterLab did not start: " + (tmp_path / "lab.log").read_text()[-2000:])
                time.sleep(0.5)
        yield f"{url}/lab/tree/08_explorer.ipynb?token={token}"
    finally:
        proc.terminate()  # the server shuts its kernels down on SIGTERM
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        log.close()


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1800",
                f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


def _wait(what, fn, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = fn()
        except Exception:  # the DOM changes under our feet while JupyterLab renders
            value = None
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _titles(driver) -> list[str]:
    return [e.text for e in driver.find_elements("css selector", ".js-plotly-plot .gtitle")]


def test_moving_the_nodes_slider_redraws_the_plot(lab, browser):
    try:
        _drive(lab, browser)
    except AssertionError:  # keep what the browser showed, for whoever reads the failure
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SCREENSHOT.with_name("explorer_browser_failed.png")))
        raise


def _drive(lab, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(lab)
    _wait("the notebook", lambda: browser.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell"), 40)

    def no_kernel_dialog() -> bool:
        # JupyterLab asks for a kernel when its kernel list was not loaded in time: take the default
        buttons = browser.find_elements(By.CSS_SELECTOR, ".jp-Dialog .jp-mod-accept")
        for button in buttons:
            button.click()
        return not buttons

    _wait("an idle kernel", lambda: no_kernel_dialog() and "| Idle" in browser.find_element(
        By.CSS_SELECTOR, ".jp-StatusBar-Widget, .jp-StatusBar").text, 40)
    run_menu = _wait("the Run menu", lambda: next(e for e in browser.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-itemLabel")
                                                if e.text == "Run"), 10)
    run_menu.click()
    _wait("Run All Cells", lambda: next(e for e in browser.find_elements(By.CSS_SELECTOR, ".lm-Menu-itemLabel")
                                        if e.text == "Run All Cells"), 10).click()
    first = "Predicted throughput against k (8 nodes, 10 Gb/s)"
    _wait("the explorer's plots", lambda: no_kernel_dialog() and first in _titles(browser), 90)  # kernel start, torch import, AlexNet profile
    handle = _wait("the nodes slider", lambda: next(
        w.find_element(By.CSS_SELECTOR, ".noUi-handle") for w in browser.find_elements(By.CSS_SELECTOR, ".widget-slider")
        if w.find_element(By.CSS_SELECTOR, ".widget-label").text == "nodes N"), 10)
    handle.click()
    handle.send_keys(Keys.ARROW_RIGHT)  # one step: N = 9
    second = "Predicted throughput against k (9 nodes, 10 Gb/s)"
    _wait("the redrawn plot", lambda: second in _titles(browser) and first not in _titles(browser), 30)
    status = browser.find_element(By.XPATH, "//*[contains(text(), 'Recommended:')]/ancestor::div[1]").text
    assert "N = 9" in status
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOT))
