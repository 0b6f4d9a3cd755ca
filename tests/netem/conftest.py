"""Fixtures for the emulated-cluster tests: skip without Linux/root/iproute2, and fail a test
that leaves any namespace of its own behind."""
from __future__ import annotations

import json
import os
import secrets
import subprocess

import pytest

from stanza_core.netem.host import (PREFIX_RE, STATE_DIR, list_namespaces, missing_requirements,
                                    owner_alive)


@pytest.fixture(scope="session")
def netem_host():
    missing = missing_requirements()
    if missing:
        pytest.skip("emulated cluster needs " + ", ".join(missing))


def _prefixes() -> set[str]:
    return {m.group(1) for n in list_namespaces() if (m := PREFIX_RE.match(n))}


@pytest.fixture(autouse=True)
def no_leftovers():
    """After the test, no cluster created during it may remain unless a live process other
    than this one owns it (another run on the same host)."""
    if missing_requirements():
        yield
        return
    before = _prefixes()
    yield
    left = [p for p in _prefixes() - before if not owner_alive(p) or _owned_by_us(p)]
    assert not left, f"namespaces left behind: {left}"


def _owned_by_us(prefix: str) -> bool:
    try:
        return json.loads((STATE_DIR / f"{prefix}.json").read_text())["owner_pid"] == os.getpid()
    except (OSError, ValueError, KeyError):
        return False


@pytest.fixture(scope="session")
def kernel_has_netem(netem_host) -> bool:
    """Whether this kernel offers the netem qdisc (tried on a throwaway veth in a throwaway
    namespace, removed at once)."""
    ns = f"stzprobe{secrets.token_hex(3)}"  # outside PREFIX_RE: no cleanup takes it
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "name", "p0", "type", "veth", "peer",
                        "name", "p1"], check=True)
        proc = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", "p0", "root", "netem",
                               "delay", "1ms"], capture_output=True, text=True)
        return proc.returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True)
