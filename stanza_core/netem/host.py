"""Host side of the emulated cluster: requirements, iproute2 calls, namespaces of a run
(listing, killing what runs inside, removal), owner records, signal handling.

Every run's names start with its prefix ``stz<6 hex>``; `/run/stanza-netem/<prefix>.json`
records the process that owns it, so `cleanup` removes leftovers of dead runs and never the
cluster of a run still in progress.
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

PREFIX_RE = re.compile(r"^(stz[0-9a-f]{6})-")
STATE_DIR = Path("/run/stanza-netem")  # tmpfs: owner records vanish with a reboot, like netns
_SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")
# SIGHUP does not exist everywhere; off Linux nothing here runs past check_host() anyway.
_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


class NetemError(RuntimeError):
    """A cluster operation failed; the message is one line a user can act on."""


class NetemUnavailable(NetemError):
    """This host cannot build the emulated cluster (not Linux, not root, no ip/tc, no qdisc)."""


def tool(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(_SBIN))


def missing_requirements() -> list[str]:
    """What this host lacks for an emulated cluster (empty list: everything is there)."""
    missing = []
    if platform.system() != "Linux":
        missing.append(f"Linux (this is {platform.system()})")
    elif os.geteuid() != 0:
        missing.append(f"root (running as uid {os.geteuid()})")
    missing += [f"the '{t}' command (iproute2)" for t in ("ip", "tc") if tool(t) is None]
    return missing


def check_host() -> None:
    missing = missing_requirements()
    if missing:
        raise NetemUnavailable("the emulated cluster needs Linux, root and iproute2; missing: "
                               + ", ".join(missing))


def sh(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
    argv = [tool(argv[0]) or argv[0], *argv[1:]]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if check and proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise NetemError(f"'{' '.join(argv[1:])}' failed: {err}")
    return proc


def list_namespaces() -> list[str]:
    """Names of all named network namespaces (``ip netns list``, first word of each line)."""
    out = sh(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def namespace_pids(netns: str) -> list[int]:
    proc = sh(["ip", "netns", "pids", netns], check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def kill_namespace_processes(netns_names: list[str], grace_s: float = 2.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``, every process living in these namespaces.

    Only processes inside the run's own namespaces are touched: those are the ranks, probes and
    anything a user started with ``exec``. A netns lives on while a process holds it, so this
    must come before ``ip netns del``.
    """
    def signal_all(sig):
        alive = []
        for ns in netns_names:
            for pid in namespace_pids(ns):
                try:
                    os.kill(pid, sig)
                    alive.append(pid)
                except ProcessLookupError:
                    pass
        return alive

    if not signal_all(signal.SIGTERM):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not any(namespace_pids(ns) for ns in netns_names):
            return
        time.sleep(0.05)
    signal_all(signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(namespace_pids(ns) for ns in netns_names):
        time.sleep(0.05)


def proc_starttime(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22: start time in clock ticks


def owner_alive(prefix: str) -> bool:
    try:
        rec = json.loads((STATE_DIR / f"{prefix}.json").read_text())
    except (OSError, ValueError):
        return False
    pid = int(rec.get("owner_pid", 0))
    return pid > 0 and proc_starttime(pid) == rec.get("owner_starttime")


def remove_prefix(prefix: str) -> list[str]:
    """Remove every namespace of one run (killing what runs inside); returns what was removed."""
    names = [n for n in list_namespaces() if n.startswith(prefix + "-")]
    kill_namespace_processes(names)
    for ns in names:
        sh(["ip", "netns", "del", ns], check=False)
    (STATE_DIR / f"{prefix}.json").unlink(missing_ok=True)
    left = [n for n in list_namespaces() if n.startswith(prefix + "-")]
    if left:
        raise NetemError(f"could not remove namespaces {left}")
    return names


def cleanup(*, include_live: bool = False) -> list[str]:
    """Remove leftovers of earlier runs: every ``stz<6 hex>-*`` namespace whose owner process is
    gone (killed with SIGKILL, crashed host process, ``up --detach``). Clusters of runs still in
    progress are kept unless ``include_live``. Returns the prefixes removed."""
    check_host()
    prefixes = sorted({m.group(1) for n in list_namespaces() if (m := PREFIX_RE.match(n))})
    removed = [p for p in prefixes if include_live or not owner_alive(p)]
    for p in removed:
        remove_prefix(p)
    return removed


@contextmanager
def signals_raise():
    """While building/using a cluster, turn SIGTERM/SIGHUP into SystemExit so `finally` runs.

    (SIGINT already raises KeyboardInterrupt.) Only the main thread may install handlers; in
    other threads the `finally` clauses still clean up on any exception.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        raise SystemExit(128 + signum)

    old = {s: signal.getsignal(s) for s in _SIGNALS if s != signal.SIGINT}
    for s in old:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def signals_deferred():
    """Hold INT/TERM/HUP while tearing down, so a second Ctrl-C cannot leave half a cluster.

    Signals that arrive meanwhile are recorded and raised again once teardown is done, under
    the handlers that were in force before. (Handlers, not a signal mask: a mask is per thread
    and any other thread would still take the signal.)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    old = {s: signal.signal(s, lambda signum, _f: pending.append(signum)) for s in _SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            if h is not None:   # None: a handler installed outside Python, left as it is
                signal.signal(s, h)
        for s in dict.fromkeys(pending):
            signal.raise_signal(s)
