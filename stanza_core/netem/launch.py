"""Multi-node torchrun on the emulated cluster: one torchrun agent per node namespace.

Each node i runs ``torchrun --nnodes N --node-rank i --nproc-per-node 1`` with static
rendezvous on node 0's address, the path a real multi-node job takes: the TCP store, gloo's
connections and every tensor cross the shaped links. GLOO_SOCKET_IFNAME (and NCCL's and
TensorPipe's counterparts) name the node's interface, so no library picks another address.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from .. import atomic, procgroup
from . import linkstats, tcpstats
from .cluster import EmulatedCluster
from .host import NetemError

MASTER_PORT = 29500          # free in node 0's fresh namespace whatever the host runs
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_ERROR_LINE = re.compile(r"^(\[rank\d+\]:\s*)?([\w.]+(Error|Exception|Interrupt)|error):\s*\S")


class NodeFailure(NetemError):
    """A node's torchrun exited non-zero (or the run timed out). ``tail``: its last stderr lines."""

    def __init__(self, message: str, *, node: int | None, returncode: int | None, tail: str,
                 prefix: str):
        super().__init__(message)
        self.node, self.returncode, self.tail, self.prefix = node, returncode, tail, prefix


_AGENT_FAILED = re.compile(r"elastic/multiprocessing/api\.py:\d+\] failed \(exitcode")


def _stderr_parts(path: Path) -> tuple[list[str], list[str]]:
    """A node's stderr split into what its rank wrote and torchrun's own failure report (the
    agent's traceback and summary, which only say that a child failed)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 512 * 1024))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return [], []
    cut = next((k for k, ln in enumerate(lines) if _AGENT_FAILED.search(ln)), len(lines))
    return lines[:cut], lines[cut:]


def _tail(path: Path, lines: int = 20) -> str:
    """The rank's last stderr lines, then the exit code / signal lines of torchrun's summary."""
    rank, agent = _stderr_parts(path)
    summary = [ln for ln in agent if re.match(r"\s*(rank|exitcode|traceback)\s*:", ln)]
    return "\n".join(rank[-lines:] + summary)


def _reason(path: Path) -> tuple[int, str]:
    """(rank, line): the one line a user needs, ranked for choosing among failed nodes.

    0: the signal that killed the rank (a killed rank is the cause; its peers then fail with
    connection errors), 1: the last error the rank printed (train's one-line errors, exception
    messages), 2: just the last line there is (a rank that exited without saying why).
    """
    rank, agent = _stderr_parts(path)
    rank = [ln.strip() for ln in rank if ln.strip()]
    signals = [f"rank killed by {m.group(0)}" for ln in agent
               if (m := re.search(r"Signal \d+ \(SIG\w+\) received by PID \d+", ln))]
    errors = [ln for ln in rank if _ERROR_LINE.match(ln)]
    last = [ln.strip() for ln in rank + agent if ln.strip()] or ["(no stderr output)"]
    for k, found in enumerate((signals, errors, last)):
        if found:
            return k, found[-1][:300]
    raise AssertionError("unreachable")


def _failure(cl: EmulatedCluster, procs: list, log_dir: Path, grace_s: float) -> NodeFailure:
    """After the first node fails, give the others ``grace_s`` to fail on their own (a config
    error is printed by rank 0 only; a killed rank takes its peers down), then blame the node
    with the most telling reason, earliest failure first on ties."""
    order, deadline = [], time.monotonic() + grace_s
    while True:
        order += [i for i, p in enumerate(procs) if p.poll() not in (None, 0) and i not in order]
        if time.monotonic() > deadline or all(p.poll() is not None for p in procs):
            break
        time.sleep(0.05)
    reasons = {i: _reason(log_dir / f"node{i}.err") for i in order}
    i = min(order, key=lambda j: (reasons[j][0], order.index(j)))
    others = [j for j in order if j != i]
    also = f" (also failed: nodes {others})" if others else ""
    return NodeFailure(f"node {i} ({cl.nodes[i].netns}) failed with exit code "
                       f"{procs[i].returncode}: {reasons[i][1]}{also}", node=i,
                       returncode=procs[i].returncode, tail=_tail(log_dir / f"node{i}.err"),
                       prefix=cl.prefix)


def gpu_plan(nodes: int, device: str = "auto", gpus: int | None = None) -> bool:
    """Whether the emulated nodes run on GPUs: one GPU per node (node i -> GPU i).

    device "cpu": never. "cuda": refuse (NetemError) when there are fewer GPUs than nodes.
    "auto": GPUs if there are enough of them, else CPU for every node (said on stderr when
    some GPUs are present). `gpus` defaults to torch.cuda.device_count()."""
    if device == "cpu":
        return False
    if gpus is None:
        import torch  # torch: the launcher itself needs none (see node_env)

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus >= nodes:
        return True
    if device == "cuda":
        raise NetemError(f"--device cuda: {nodes} emulated nodes need one GPU each, {gpus} visible; "
                         f"use at most {gpus} nodes or --device cpu")
    if gpus:
        print(f"netem: {nodes} nodes but {gpus} GPU(s): every node runs on CPU", file=sys.stderr)
    return False


def gpu_env(i: int, iface: str, node_id: str, visible: str | None = None) -> dict:
    """Environment of emulated node i on a GPU host: GPU i only, and NCCL forced onto its socket
    transport over the node's veth (so every byte crosses the shaped link): peer-to-peer,
    shared-memory, NVLink SHARP and InfiniBand transports off, and a host id of its own, so
    NCCL treats the nodes as separate machines. `visible`: the host's CUDA_VISIBLE_DEVICES."""
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else None
    return {"CUDA_VISIBLE_DEVICES": ids[i] if ids else str(i),
            "NCCL_SOCKET_IFNAME": iface, "NCCL_NET": "Socket", "NCCL_P2P_DISABLE": "1",
            "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_NVLS_ENABLE": "0",
            "NCCL_HOSTID": node_id}


def node_env(cl: EmulatedCluster, i: int, extra: dict | None = None, *, gpu: bool = False) -> dict:
    env = dict(os.environ)
    iface = cl.nodes[i].iface
    env.update(GLOO_SOCKET_IFNAME=iface, NCCL_SOCKET_IFNAME=iface, TP_SOCKET_IFNAME=iface,
               PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p))
    if gpu:
        env.update(gpu_env(i, iface, f"{cl.prefix}-node{i}", os.environ.get("CUDA_VISIBLE_DEVICES")))
    else:  # CPU nodes: hide GPUs, so --device auto means CPU on every node alike
        env["CUDA_VISIBLE_DEVICES"] = ""
    # All nodes share this host's cores: without a cap each rank would start one thread per
    # core and the ranks would fight over them.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // len(cl.nodes))))
    from ..comm.failures import HOST_RANKS_ENV  # here: the launcher itself needs no torch

    env[HOST_RANKS_ENV] = str(len(cl.nodes))  # one torchrun per node, all on this host: the join waits for all
    env.update(extra or {})
    return env


def launch(cl: EmulatedCluster, entry: list[str], *, timeout_s: float = 600.0,
           log_dir: str | Path, env: dict | None = None, master_port: int = MASTER_PORT,
           poll_s: float = 0.1, gpu: bool = False) -> float:
    """Run ``torchrun ... <entry>`` on every node; returns the wall time once all exit 0.

    ``entry`` is what follows torchrun's own options: ``["-m", "stanza_core.train", ...]`` or
    ``["script.py", ...]``. The first node to fail (or the timeout) stops every other node and
    raises NodeFailure naming it; stdout/stderr of node i are in ``log_dir/node<i>.{out,err}``.
    """
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    n, master = len(cl.nodes), cl.nodes[0].address
    procs, files = [], []
    start = time.monotonic()
    try:
        for i in range(n):
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(n),
                    "--node-rank", str(i), "--nproc-per-node", "1", "--master-addr", master,
                    "--master-port", str(master_port), *entry]
            out = open(log_dir / f"node{i}.out", "w")
            err = open(log_dir / f"node{i}.err", "w")
            files += [out, err]
            # Own session: a Ctrl-C in the terminal reaches only this launcher, which then
            # stops the nodes (procgroup.end below) and removes the cluster in order.
            procs.append(procgroup.start(cl.exec_argv(i, argv), stdout=out, stderr=err,
                                         env=node_env(cl, i, env, gpu=gpu)))
        while True:
            codes = [p.poll() for p in procs]
            if any(c not in (None, 0) for c in codes):
                raise _failure(cl, procs, log_dir, grace_s=2.0)
            if all(c == 0 for c in codes):
                return time.monotonic() - start
            if time.monotonic() - start > timeout_s:
                waiting = [i for i, c in enumerate(codes) if c is None]
                raise NodeFailure(f"timed out after {timeout_s:g} s waiting for nodes {waiting}",
                                  node=None, returncode=None, prefix=cl.prefix,
                                  tail=_tail(log_dir / f"node{waiting[0]}.err"))
            time.sleep(poll_s)
    finally:
        running = any(p.poll() is None for p in procs)
        procgroup.end(*procs)  # each node's torchrun and its ranks, also on a timeout or Ctrl-C
        if running:            # and whatever else was started inside the nodes' namespaces
            cl.kill_all()
        for f in files:
            f.close()


def _flag(train_args: list[str], name: str) -> str | None:
    for k, a in enumerate(train_args):
        if a == name and k + 1 < len(train_args):
            return train_args[k + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _metrics_path(train_args: list[str]) -> str | None:
    return _flag(train_args, "--metrics")


def run_training(nodes: int, rate_mbit: float, train_args: list[str], *, delay_ms: float = 0.0,
                 mtu: int = 1500, timeout_s: float = 900.0, log_dir: str | Path | None = None,
                 env: dict | None = None, quiet: bool = False) -> dict:
    """``torchrun -m stanza_core.train <train_args>`` on a fresh emulated cluster of ``nodes``
    (removed afterwards, also on failure): ``train_on`` on it. The links' token buckets follow
    the run's ``--payload-scale`` (cluster.scaled_burst_bytes)."""
    scale = _flag([str(a) for a in train_args], "--payload-scale")
    with EmulatedCluster(nodes, rate_mbit, delay_ms, mtu=mtu, payload_scale=int(scale) if scale and scale.isdigit() and int(scale) >= 1 else 1) as cl:
        return train_on(cl, train_args, timeout_s=timeout_s, log_dir=log_dir, env=env, quiet=quiet)


def train_on(cl: EmulatedCluster, train_args: list[str], *, timeout_s: float = 900.0,
             log_dir: str | Path | None = None, env: dict | None = None, quiet: bool = False) -> dict:
    """``torchrun -m stanza_core.train <train_args>`` on the cluster ``cl`` (left up).

    Returns rank 0's metrics JSON with these added (and written back into ``--metrics`` when the
    arguments name it):
      netem      the cluster (prefix, rate, delay, addresses), the wall time, and per node the
                 kernel interface bytes of the whole run (``tx_bytes`` sent, ``rx_bytes``
                 received; rendezvous, setup and the final gather included, headers included),
                 and ``losses``: TCP retransmissions, timeouts, loss probes and queue drops over
                 the run (tcpstats)
      link_check what the shaped links carried during the timed steps against their set rate,
                 and ``slipped`` (linkstats: the rule, the 5 % tolerance)
      host_load  the host's CPU busy share over the timed steps and its load average
    On failure raises NodeFailure (after printing the failing node's last stderr lines unless
    ``quiet``).
    """
    train_args = [str(a) for a in train_args]
    with tempfile.TemporaryDirectory(prefix="stanza-netem-") as tmp:
        log_dir = Path(log_dir or tmp)
        given = _metrics_path(train_args)
        metrics = given
        if metrics is None:
            metrics = str(Path(tmp) / "metrics.json")
            train_args += ["--metrics", metrics]
        metrics = os.path.abspath(metrics)
        gpu = gpu_plan(len(cl.nodes), _flag(train_args, "--device") or "auto")
        before = cl.counters()
        losses_before = tcpstats.read(cl)
        with linkstats.Sampler(cl.queues()) as sampler:
            try:
                wall = launch(cl, ["-m", "stanza_core.train", *train_args], timeout_s=timeout_s,
                              log_dir=log_dir, env=env, gpu=gpu)
            except NodeFailure as e:
                if not quiet and e.tail:
                    print(f"--- last stderr lines of node {e.node} ---\n{e.tail}",
                          file=sys.stderr)
                raise
        after = cl.counters()
        losses = tcpstats.difference(losses_before, tcpstats.read(cl))
        try:
            result = json.loads(Path(metrics).read_text())
        except (OSError, ValueError) as e:
            raise NetemError(f"rank 0 wrote no readable metrics at {metrics}: {e}") from None
    kernel = [{"node": a["node"], "tx_bytes": a["tx_bytes"] - b["tx_bytes"],
               "rx_bytes": a["rx_bytes"] - b["rx_bytes"]} for a, b in zip(after, before)]
    result["netem"] = {**cl.describe(), "wall_s": wall, "kernel": kernel,
                       "kernel_tx_bytes_total": sum(k["tx_bytes"] for k in kernel),
                       "losses": losses}
    result["link_check"], result["host_load"] = judge_run(cl, sampler, result)
    if given is not None:   # the user's metrics file carries what the launcher learned too
        atomic.write_text(metrics, json.dumps(result, indent=1))
    return result


def timed_window(result: dict) -> tuple[float, float] | None:
    """The timed steps on the host's monotonic clock (perf_counter): from the first timed step's
    start on the earliest rank to the last step's end on the latest (the warm-up steps left out,
    as the throughput leaves them out); None for metrics without step spans."""
    origin = result.get("step_clock_origin_s")
    spans = [(r.get("step_start_s") or [], r.get("step_end_s") or []) for r in result.get("ranks", [])]
    if origin is None or not spans or not all(s and e for s, e in spans):
        return None
    n = min(len(s) for s, _ in spans)
    first = result["config"].get("warmup", 0)
    first = first if first < n else 0
    return origin + min(s[first] for s, _ in spans), origin + max(e[-1] for _, e in spans)


def judge_run(cl: EmulatedCluster, sampler: "linkstats.Sampler", result: dict) -> tuple[dict, dict | None]:
    """(link_check, host_load) of a finished run, over its timed steps (linkstats.link_check)."""
    window = timed_window(result)
    if sampler.error or window is None:
        why = sampler.error or "the metrics carry no step times on the host clock"
        return {"set_mbit": cl.rate_mbit, "carried_mbit": None, "slipped": None, "reason": why}, None
    roles = {n.iface: f"node {n.index} upload" for n in cl.nodes}
    roles.update({n.switch_port: f"node {n.index} download" for n in cl.nodes})
    # under a netem delay an upload queue's backlog includes packets in the delay line: not judged
    judged = {n.switch_port for n in cl.nodes} | (set() if cl.delay_ms > 0 else {n.iface for n in cl.nodes})
    check = linkstats.link_check(sampler.rows, window, cl.rate_mbit, judged=judged, roles=roles)
    return check, linkstats.host_load(sampler.host, *window)
