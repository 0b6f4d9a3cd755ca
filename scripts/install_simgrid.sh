#!/usr/bin/env bash
# Install SimGrid's Python bindings for the simulated cluster (stanza_core/sim): Debian's
# python3-simgrid (SimGrid 3.32), whose one extension module is built for CPython 3.11 and is
# loaded from /usr/lib/python3/dist-packages by stanza_core.sim.executor.load_simgrid.
# Why Debian's: PyPI's simgrid (4.1) is a source distribution only, which builds SimGrid's C++
# core (cmake, Boost) at install; Debian's binary package installs in seconds.
# Idempotent; Debian/Ubuntu (apt) only; elsewhere it says so and exits 0 (the simulated figures
# then say in one line that SimGrid is missing, and everything else works).
set -euo pipefail

PY=${1:-python3}
if "$PY" -c "from stanza_core.sim.executor import load_simgrid; load_simgrid()" 2>/dev/null; then
    echo "simgrid: found"
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "simgrid: no apt-get here; install SimGrid's Python bindings (python3-simgrid) for simulated figures"
    exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "simgrid: installing needs root: run 'sudo apt-get install python3-simgrid' (simulated figures are skipped until then)"
        exit 0
    fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -q python3-simgrid >/dev/null 2>&1; then
    $SUDO apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null 2>&1 || true
    $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -q python3-simgrid >/dev/null
fi
"$PY" -c "from stanza_core.sim.executor import load_simgrid; load_simgrid()" && echo "simgrid: installed python3-simgrid"
