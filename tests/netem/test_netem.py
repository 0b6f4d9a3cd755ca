"""The emulated cluster: real namespaces, real tc shaping, real multi-node torchrun.

Tolerances: shaping within 10 % of the set rate (the stated contract; measured error is under
1 %). Byte counters of a transfer: TCP puts at most one MSS (1448 payload bytes at MTU 1500
with timestamps) in a 1514-byte frame, so wire bytes >= payload * 1514/1448; the margin above
covers ACKs, the handshake and ARP. Parameters against `local`: rtol=1e-5, atol=1e-6, as in
tests/dist (same per-sample gradients summed in a different order).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from stanza_core.netem import (EmulatedCluster, NetemUnavailable, NodeFailure, cleanup,
                               launch, list_namespaces, measure_flows, run_training)
from stanza_core.netem.__main__ import main as netem_main
from stanza_core.netem.check import flows_for
from stanza_core.netem.host import namespace_pids
from stanza_core.variant import Variant

ROOT = Path(__file__).resolve().parents[2]
FRAME_OVER_PAYLOAD = 1514 / 1448
needs_netem = pytest.mark.usefixtures("netem_host")
pytestmark = pytest.mark.netem


def ours(prefix: str) -> list[str]:
    return [n for n in list_namespaces() if n.startswith(prefix + "-")]


def host_network() -> tuple[str, str, str]:
    run = lambda *a: subprocess.run(["ip", "-o", *a], capture_output=True, text=True).stdout
    strip = lambda s: "\n".join(ln.split(" link/")[0] for ln in s.splitlines())  # not counters
    return strip(run("link", "show")), run("addr", "show"), run("route", "show")


def _default_sigint() -> None:
    # A shell starts background jobs with SIGINT ignored, and Python keeps an ignored SIGINT:
    # the CLI is started as from a terminal, where Ctrl-C reaches it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "stanza_core.netem", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint, **kw)


# --- host requirements and bad input ---------------------------------------------------------

def test_without_root_one_line_exit_2():
    argv = [sys.executable, "-m", "stanza_core.netem", "check", "--rate-mbit", "100"]
    if os.geteuid() == 0:
        if not Path("/usr/bin/setpriv").exists():
            pytest.skip("needs setpriv to drop root")
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "root" in lines[0] and "missing" in lines[0], proc.stderr


@needs_netem
@pytest.mark.parametrize("argv", [["check", "--rate-mbit", "0"], ["up", "--nodes", "0",
                                  "--rate-mbit", "10"], ["run", "--rate-mbit", "10"]])
def test_bad_input_one_line_exit_2(argv, capsys):
    assert netem_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("netem: "), err


@needs_netem
def test_delay_without_kernel_netem_is_one_clear_error(kernel_has_netem):
    if kernel_has_netem:
        pytest.skip("this kernel has netem; see test_delay_adds_latency")
    cl = EmulatedCluster(2, 100, delay_ms=5)
    with pytest.raises(NetemUnavailable, match="netem qdisc"):
        with cl:
            pass
    assert ours(cl.prefix) == []


CONNECT_TIMES = ("import socket,sys,time;a=(sys.argv[1],int(sys.argv[2]));r=[]\n"
                 "for _ in range(5):\n t=time.monotonic();socket.create_connection(a).close();"
                 "r.append(time.monotonic()-t)\nprint(min(r))")


@needs_netem
def test_delay_adds_latency(kernel_has_netem):
    """delay_ms is one way, node to node: a TCP connect (SYN there, SYN-ACK back) takes 2x."""
    if not kernel_has_netem:
        pytest.skip("this kernel has no netem qdisc")
    delay = 10.0
    with EmulatedCluster(2, 100, delay_ms=delay) as cl:
        srv = cl.exec(1, [sys.executable, "-I", "-c", "import socket,sys,time;s=socket."
                          "create_server((sys.argv[1],7001),backlog=16);time.sleep(60)",
                          cl.nodes[1].address])
        time.sleep(0.5)
        out = subprocess.run(cl.exec_argv(0, [sys.executable, "-I", "-c", CONNECT_TIMES,
                                              cl.nodes[1].address, "7001"]),
                             capture_output=True, text=True, timeout=30, check=True).stdout
        srv.kill()
        srv.wait()
    rtt_ms = 1e3 * float(out)
    assert 2 * delay <= rtt_ms <= 2 * delay + 5, rtt_ms


# --- topology, names, counters ----------------------------------------------------------------

@needs_netem
def test_up_builds_shaped_namespaces_and_down_removes_them():
    host_before = host_network()
    with EmulatedCluster(3, 123) as cl:
        assert sorted(ours(cl.prefix)) == sorted([f"{cl.prefix}-n{i}" for i in range(3)]
                                                 + [f"{cl.prefix}-sw"])
        assert all(len(n.iface) <= 15 and len(n.switch_port) <= 15 for n in cl.nodes)
        assert len({n.address for n in cl.nodes}) == 3
        assert cl.prefix not in subprocess.run(["ip", "link"], capture_output=True,
                                               text=True).stdout
        for n in cl.nodes:
            for ns, dev in ((n.netns, n.iface), (cl.switch_netns, n.switch_port)):
                cls = subprocess.run(["tc", "-n", ns, "class", "show", "dev", dev],
                                     capture_output=True, text=True, check=True).stdout
                assert "rate 123Mbit ceil 123Mbit" in cls, cls
            addr = subprocess.run(["ip", "-n", n.netns, "-o", "-4", "addr"], capture_output=True,
                                  text=True, check=True).stdout
            assert f"{n.address}/24" in addr and "127.0.0.1" in addr
        assert host_network() == host_before
    assert ours(cl.prefix) == []
    assert host_network() == host_before


RECV = ("import socket,sys;s=socket.create_server((sys.argv[1],7000));print('ready',flush=True)\n"
        "c,_=s.accept();n=0\nwhile d:=c.recv(1<<20): n+=len(d)\nprint(n)")
SEND = "import socket,sys;s=socket.create_connection((sys.argv[1],7000));s.sendall(bytes(int(sys.argv[2])));s.close()"


@needs_netem
def test_exec_and_kernel_counters_see_every_frame():
    payload = 2_000_000
    with EmulatedCluster(2, 200) as cl:
        before = cl.counters()
        rx = cl.exec(1, [sys.executable, "-I", "-c", RECV, cl.nodes[1].address],
                     stdout=subprocess.PIPE, text=True)
        assert rx.stdout.readline().strip() == "ready"
        subprocess.run(cl.exec_argv(0, [sys.executable, "-I", "-c", SEND, cl.nodes[1].address,
                                        str(payload)]), check=True, timeout=30)
        assert int(rx.communicate(timeout=30)[0]) == payload
        after = cl.counters()
    tx0 = after[0]["tx_bytes"] - before[0]["tx_bytes"]
    rx1 = after[1]["rx_bytes"] - before[1]["rx_bytes"]
    low = payload * FRAME_OVER_PAYLOAD
    assert low <= tx0 <= 1.01 * low + 20_000, tx0
    assert low <= rx1 <= 1.01 * low + 20_000, rx1


# --- shaping accuracy -------------------------------------------------------------------------

def test_star_is_a_dedicated_servers_push_and_pull_at_once():
    assert flows_for("star", 4) == [(1, 0), (2, 0), (3, 0), (0, 1), (0, 2), (0, 3)]
    with pytest.raises(ValueError, match="needs at least 3 nodes"):
        flows_for("star", 2)


def test_mesh_is_a_colocated_servers_push_and_pull_at_once():
    """Every node sends to and receives from every other: n - 1 flows each way on each link."""
    flows = flows_for("mesh", 4)
    assert len(flows) == len(set(flows)) == 12
    assert all(s != d for s, d in flows)
    assert sorted(flows) == sorted((s, d) for s in range(4) for d in range(4) if s != d)
    with pytest.raises(ValueError, match="needs at least 3 nodes"):
        flows_for("mesh", 2)


@needs_netem
@pytest.mark.slow
@pytest.mark.parametrize("rate", [50, 200])
def test_shaping_holds_the_set_rate(rate):
    with EmulatedCluster(2, rate) as cl:
        res = measure_flows(cl, flows_for("pair", 2), seconds=2.5)
    rx = next(e for e in res["nodes"] if e["node"] == 1)
    print(f"\nset {rate} Mbit/s: wire {rx['wire_rx_mbit']:.2f}, payload "
          f"{rx['payload_rx_mbit']:.2f} Mbit/s")
    assert abs(rx["wire_rx_mbit"] - rate) <= 0.10 * rate
    assert abs(rx["payload_rx_mbit"] - rate) <= 0.10 * rate


@needs_netem
@pytest.mark.slow
def test_each_direction_of_a_link_is_shaped():
    """Two senders into node 0 get node 0's download rate in total (2x were it unshaped); node
    0 sending to two receivers gets its upload rate; both directions at once each get it."""
    rate = 80
    with EmulatedCluster(3, rate) as cl:
        fan_in = measure_flows(cl, flows_for("fan-in", 3), seconds=2.5)
        fan_out = measure_flows(cl, flows_for("fan-out", 3), seconds=2.5)
        duplex = measure_flows(cl, flows_for("duplex", 3), seconds=2.5)
    node = lambda res, i: next(e for e in res["nodes"] if e["node"] == i)
    got = [node(fan_in, 0)["wire_rx_mbit"], node(fan_out, 0)["wire_tx_mbit"],
           node(duplex, 0)["wire_rx_mbit"], node(duplex, 1)["wire_rx_mbit"]]
    print(f"\nset {rate} Mbit/s: fan-in, fan-out, duplex 1->0, 0->1 wire Mbit/s: "
          + ", ".join(f"{g:.2f}" for g in got))
    for g in got:
        assert abs(g - rate) <= 0.10 * rate


# --- multi-node torchrun, failures, signals ---------------------------------------------------

WORKER = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
out, iters, numel, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
open(f"{out}/pid{r}", "w").write(str(os.getpid()))
dist.barrier()
t = time.monotonic()
for k in range(iters):
    x = torch.full((numel,), float(r + k))
    dist.all_reduce(x)
    assert torch.all(x == sum(range(n)) + n * k)
    time.sleep(pause)
open(f"{out}/time{r}", "w").write(str(time.monotonic() - t))
dist.destroy_process_group()
"""


@needs_netem
@pytest.mark.slow
def test_torchrun_across_namespaces_moves_ring_bytes_at_link_rate(tmp_path):
    """3 torchrun nodes rendezvous on node 0's address; allreduce of 4 MiB x 3 moves the ring's
    2(n-1)/n * S per node per call through the kernel, and takes at least wire bytes / rate."""
    (tmp_path / "w.py").write_text(WORKER)
    n, iters, numel, rate = 3, 3, 1 << 20, 200
    with EmulatedCluster(n, rate) as cl:
        before = cl.counters()
        launch(cl, [str(tmp_path / "w.py"), str(tmp_path), str(iters), str(numel), "0"],
               log_dir=tmp_path / "logs", timeout_s=120, env={"OMP_NUM_THREADS": "1"})
        after = cl.counters()
    ring = iters * 2 * (n - 1) / n * 4 * numel * FRAME_OVER_PAYLOAD
    for a, b in zip(after, before):
        tx = a["tx_bytes"] - b["tx_bytes"]
        print(f"\nnode {a['node']}: kernel tx {tx} B, ring payload in frames {ring:.0f} B")
        assert ring <= tx <= 1.06 * ring + 500_000
    elapsed = float((tmp_path / "time0").read_text())
    assert elapsed >= 0.95 * ring * 8 / (rate * 1e6), elapsed


@needs_netem
@pytest.mark.slow
def test_killed_rank_fails_fast_and_leaves_nothing(tmp_path):
    (tmp_path / "w.py").write_text(WORKER)
    pid1 = tmp_path / "pid1"
    killed = {}

    def kill_rank_1():
        deadline = time.monotonic() + 90
        while not pid1.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        os.kill(int(pid1.read_text()), signal.SIGKILL)
        killed["t"] = time.monotonic()

    cl = EmulatedCluster(3, 100)
    threading.Thread(target=kill_rank_1, daemon=True).start()
    with pytest.raises(NodeFailure) as exc:
        with cl:
            launch(cl, [str(tmp_path / "w.py"), str(tmp_path), "1000", "1000", "0.05"],
                   log_dir=tmp_path / "logs", timeout_s=120, env={"OMP_NUM_THREADS": "1"})
    assert time.monotonic() - killed["t"] < 30
    assert len(str(exc.value).splitlines()) == 1
    assert exc.value.node is not None and "failed with exit code" in str(exc.value)
    if exc.value.node == 1:
        assert "SIGKILL" in str(exc.value)
    assert ours(cl.prefix) == []


@needs_netem
@pytest.mark.slow
def test_cli_up_removes_cluster_on_sigterm():
    proc = cli("up", "--nodes", "2", "--rate-mbit", "10")
    desc = json.loads(proc.stdout.readline())
    assert len(ours(desc["prefix"])) == 3
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "removed" in err.strip().splitlines()[-1]
    assert ours(desc["prefix"]) == []


@needs_netem
@pytest.mark.slow
def test_ctrl_c_during_training_run_stops_ranks_and_removes_cluster():
    if not (ROOT / "stanza_core" / "train.py").exists():
        pytest.skip("stanza_core/train.py is not there yet")
    before = {n for n in list_namespaces()}
    proc = cli("run", "--nodes", "2", "--rate-mbit", "50", "--", "--strategy", "ddp",
               "--model", "tiny_cnn", "--steps", "1000000", "--device", "cpu", "--quiet")
    try:
        deadline, pids = time.monotonic() + 90, []
        while time.monotonic() < deadline and len(pids) < 4:   # 2 agents + 2 ranks
            new = [n for n in list_namespaces() if n not in before and n.endswith(("-n0", "-n1"))]
            pids = [p for n in new for p in namespace_pids(n)]
            time.sleep(0.2)
        assert len(pids) >= 4, proc.stderr.read() if proc.poll() is not None else "ranks not up"
        prefix = new[0].rsplit("-", 1)[0]
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:  # a failed check leaves no million-step job behind: SIGTERM removes the cluster too
        if proc.poll() is None:
            proc.terminate()
            proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "netem: interrupted; the cluster was removed"
    assert ours(prefix) == []
    deadline = time.monotonic() + 10   # killed ranks are reaped by init, not instantly
    while time.monotonic() < deadline and [p for p in pids if still_running(p)]:
        time.sleep(0.1)
    assert not [p for p in pids if still_running(p)]


def still_running(pid: int) -> bool:
    """A live (not zombie) process that is still one of ours (pids are reused)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z" and b"torch" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return False


@needs_netem
@pytest.mark.slow
def test_cleanup_removes_leftovers_of_a_killed_owner_but_not_live_clusters():
    proc = cli("up", "--nodes", "2", "--rate-mbit", "10")
    dead = json.loads(proc.stdout.readline())["prefix"]
    proc.kill()                                    # SIGKILL: no chance to clean up
    proc.wait(timeout=30)
    assert len(ours(dead)) == 3
    with EmulatedCluster(2, 10) as live:
        removed = cleanup()
        assert dead in removed and live.prefix not in removed
        assert ours(dead) == [] and len(ours(live.prefix)) == 3


# --- the training CLI on the emulated cluster -------------------------------------------------

TRAIN = ["--model", "tiny_cnn", "--global-batch", "12", "--steps", "3", "--image-size", "32",
         "--device", "cpu", "--quiet", "--seed", "3"]
RANK_ENV = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore"}
STRATEGIES = {"ddp": ["--strategy", "ddp"], "ps": ["--strategy", "ps"],
              "stanza": ["--strategy", "stanza", "--fc-workers", "1"]}


def plain_run(tmp_path: Path, name: str, argv: list[str]) -> tuple[dict, dict]:
    metrics, save = tmp_path / f"{name}.json", tmp_path / f"{name}.pt"
    env = {**os.environ, **RANK_ENV, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([*argv, *TRAIN, "--metrics", str(metrics), "--save", str(save)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(metrics.read_text()), torch.load(save, weights_only=True)


@pytest.fixture(scope="module")
def local_params(tmp_path_factory):
    if not (ROOT / "stanza_core" / "train.py").exists():
        pytest.skip("stanza_core/train.py is not there yet")
    return plain_run(tmp_path_factory.mktemp("local"), "local",
                     [sys.executable, "-m", "stanza_core.train", "--strategy", "local"])[1]


def byte_fields(rank: dict) -> dict:
    return {k: v for k, v in rank.items() if "byte" in k or k in ("rank", "role", "sent", "recv")}


@needs_netem
@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_training_on_emulated_cluster_matches_plain_torchrun_and_local(strategy, tmp_path,
                                                                       local_params):
    ref, _ = plain_run(tmp_path, "plain", [sys.executable, "-m", "torch.distributed.run",
                                           "--standalone", "--nproc-per-node", "3", "-m",
                                           "stanza_core.train", *STRATEGIES[strategy]])
    save = tmp_path / "netem.pt"
    res = run_training(3, 200, [*STRATEGIES[strategy], *TRAIN, "--save", str(save)],
                       timeout_s=240, env=RANK_ENV)
    assert [byte_fields(r) for r in res["ranks"]] == [byte_fields(r) for r in ref["ranks"]]
    assert res["bytes_per_step"] == ref["bytes_per_step"]
    got = torch.load(save, weights_only=True)
    assert got.keys() == local_params.keys()
    for k in got:
        torch.testing.assert_close(got[k], local_params[k], rtol=1e-5, atol=1e-6,
                                   msg=lambda m, k=k: f"{k}: {m}")
    # The engine's payload bytes really crossed node i's link (rank i runs on node i).
    for r, k in zip(res["ranks"], res["netem"]["kernel"]):
        assert k["tx_bytes"] >= r["bytes_sent"] * res["config"]["steps"], (r, k)
    assert ours(res["netem"]["prefix"]) == []


@needs_netem
@pytest.mark.slow
def test_failing_training_run_exits_1_with_the_node_and_reason(capsys):
    if not (ROOT / "stanza_core" / "train.py").exists():
        pytest.skip("stanza_core/train.py is not there yet")
    code = netem_main(["run", "--nodes", "2", "--rate-mbit", "100", "--", "--model", "nosuch",
                       "--device", "cpu"])
    assert code == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("netem: node ") and "unknown model 'nosuch'" in last, last


@needs_netem
@pytest.mark.slow
def test_dedicated_ps_server_on_its_own_node_matches_local_and_expected_bytes(tmp_path, local_params):
    """2 data workers + 1 dedicated server (3 namespaces), overlapped push in several buckets:
    the parameters equal local's, every rank's counted bytes equal perf.expected_bytes, and the
    server's own link carried what it counted."""
    from stanza_core.perf import expected_bytes, named_profile

    save = tmp_path / "ps.pt"
    res = run_training(3, 200, ["--strategy", "ps", "--ps-servers", "1", "--ps-overlap", "--bucket-mb", "0.005",
                                *TRAIN, "--save", str(save)], timeout_s=240, env=RANK_ENV)
    want = expected_bytes(named_profile("tiny_cnn", 32, 10, 6), Variant("ps", ps_servers=1), 3, global_batch=12)
    assert [(r["role"], r["sent"], r["recv"]) for r in res["ranks"]] == \
        [(w["role"], w["sent"], w["recv"]) for w in want]
    assert res["ranks"][2]["role"] == "ps_server"
    got = torch.load(save, weights_only=True)
    for k in got:
        torch.testing.assert_close(got[k], local_params[k], rtol=1e-5, atol=1e-6,
                                   msg=lambda m, k=k: f"{k}: {m}")
    server = res["netem"]["kernel"][2]
    assert server["tx_bytes"] >= res["ranks"][2]["bytes_sent"] * 3 and \
        server["rx_bytes"] >= res["ranks"][2]["bytes_recv"] * 3
    assert ours(res["netem"]["prefix"]) == []
