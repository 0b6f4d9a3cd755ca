#!/usr/bin/env bash
# A venv at the lowest versions pyproject.toml allows, and the tests that show they work.
#
#     bash scripts/lowest_versions.sh [VENV_DIR]     (default: /tmp/stanza-lowest)
#
# uv resolves every direct dependency (base and dev extra) at its floor, their own dependencies
# at the newest that fits (`--resolution lowest-direct`), all from PyPI: torch at its floor is
# PyPI's Linux build, which carries CUDA libraries and runs on the CPU (PyTorch's own CPU index,
# download.pytorch.org, is not reachable from every machine this runs on). Then the fast unit
# tests and notebook 01 with its PNG export (needs a Chromium, scripts/install_chromium.sh) run
# in that venv.
# Cost: about 3.5 GB downloaded (torch 2.4 and its CUDA libraries, the Jupyter stack at its
# floors) and, on an idle
# 2-core machine, minutes to install plus the fast unit tests' time; that is why it is a script
# and not part of `make test` (whose suite must stay under 30 minutes).
# Exit status: non-zero when the install or a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-/tmp/stanza-lowest}
PY=${PYTHON:-python3}

"$PY" -m venv --clear "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check uv
"$VENV/bin/uv" pip compile -q --python "$VENV/bin/python" --resolution lowest-direct pyproject.toml --extra dev \
    -o "$VENV/lowest.txt"
echo "lowest-direct resolution: $VENV/lowest.txt"
grep -E '^(torch|torchvision|numpy|plotly|kaleido|choreographer|nbconvert|jupyter-client|papermill|ipykernel)==' \
    "$VENV/lowest.txt" | tr '\n' ' '; echo
"$VENV/bin/uv" pip install -q --python "$VENV/bin/python" -r "$VENV/lowest.txt" \
    --index-url https://pypi.org/simple
"$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --no-deps -e .
"$VENV/bin/python" -m pytest -q -m "not slow" tests/unit -p no:cacheprovider
"$VENV/bin/python" -m pytest -q tests/notebooks/test_01_anatomy.py -p no:cacheprovider
echo "lowest versions: the fast unit tests and notebook 01 pass"
