#!/usr/bin/env bash
# Install a headless Chromium (and its WebDriver) so plotly/kaleido can export PNG figures
# offline and the browser test can drive the explorer.
# Idempotent: does nothing when a Chrome/Chromium is already found. Debian/Ubuntu (apt) only;
# elsewhere it says so and exits 0, since PNG export is optional (figures are always HTML).
# Debian 12: 25 packages, ~113 MB download, ~414 MB on disk, about 10 s from a nearby mirror.
set -euo pipefail

for exe in chromium chromium-browser google-chrome google-chrome-stable chrome; do
    if path=$(command -v "$exe") && command -v chromedriver >/dev/null; then
        echo "chromium: found $path and $(command -v chromedriver)"
        exit 0
    fi
done
if [[ -n "${BROWSER_PATH:-}" && -x "$BROWSER_PATH" ]]; then
    echo "chromium: found BROWSER_PATH=$BROWSER_PATH"
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "chromium: no apt-get here; install Chrome or Chromium yourself (or set BROWSER_PATH) for PNG figures"
    exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "chromium: installing needs root: run 'sudo $0' (PNG figures are skipped until then)"
        exit 0
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=300 update -q
# Debian names the package `chromium`; Ubuntu's `chromium-browser` is a snap shim, hence the fallback.
$SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends chromium chromium-driver \
    || $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends chromium-browser chromium-chromedriver
echo "chromium: installed $(command -v chromium || command -v chromium-browser)"
