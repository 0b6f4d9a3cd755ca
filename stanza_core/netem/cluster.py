"""One network namespace per node, a Linux bridge between them, tc shaping on every link.

Topology (N nodes, run prefix P such as ``stz1a2b3c``):

    netns P-n0            netns P-sw (the switch)                netns P-n1
    [P-e0 10.213.x.1] ==veth== [P-s0]--+                    +--[P-s1] ==veth== [P-e1 10.213.x.2]
                                       +------ bridge P-br -+ ...

Every node's link is full duplex and shaped in both directions: the qdisc on the node end of the
veth (``P-e<i>``) paces what the node sends (upload), the qdisc on the switch end (``P-s<i>``)
paces what the switch hands to the node (download). The optional delay sits on the upload side
only, so ``delay_ms`` is the one-way latency between any two nodes (round trip ``2 * delay_ms``).
Veth pairs are created directly inside the namespaces and addresses exist only there: nothing of
the host's interfaces, routes or addresses is touched.
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
from dataclasses import dataclass

from .host import (PREFIX_RE, STATE_DIR, NetemError, NetemUnavailable, kill_namespace_processes,
                   proc_starttime, sh, signals_deferred, signals_raise, tool, check_host,
                   remove_prefix)

MAX_NODES = 250   # host numbers .1 .. .250 of the /24


def burst_bytes(rate_mbit: float, mtu: int = 1500) -> int:
    """Token-bucket depth (bytes) for a link of ``rate_mbit``: max(10 frames, 1 ms at the rate).

    Why: the bucket must refill faster than the qdisc's watchdog timer can be late on a busy
    host, or the link runs below its rate; 1 ms of traffic covers that wake-up latency, and 10
    full frames keep a slow link from pacing frame by frame off the timer. It is not larger
    because whatever the bucket holds leaves at memory speed after an idle spell, a burst a
    real link cannot do: here it is at most max(10 frames, 1 ms) of line time (2.4 ms at
    50 Mbit/s, 1 ms from 121 Mbit/s up), small beside transfers of whole gradients. Measured
    with `check`: within 1 % of the set rate at 20..300 Mbit/s.
    """
    return max(10 * (mtu + 14), int(rate_mbit * 1e6 / 8 * 1e-3))


TXQUEUELEN = 1000  # a veth's default queue length (packets): htb's default leaf pfifo holds this many


def scaled_queue_packets(payload_scale: int) -> int:
    """The packet limit of a scaled link's queue (payload scaling): the unscaled link's TXQUEUELEN
    over F, so a full queue stands for the same line time; at least 4 packets."""
    return max(4, -(-TXQUEUELEN // payload_scale))


def scaled_burst_bytes(rate_mbit: float, mtu: int, payload_scale: int) -> int:
    """The token-bucket depth of a link that carries 1/F of every message at 1/F of the rate
    (payload scaling, comm/process_group.py): the bucket of the unscaled link (rate x F), scaled
    by 1/F, so that what leaves at memory speed after an idle spell stands for the same line
    time as on the unscaled link (otherwise the 10 frames of a slow link would let a scaled
    message through F times sooner); at least 2 frames, so a frame always fits. F = 1:
    burst_bytes."""
    if payload_scale == 1:
        return burst_bytes(rate_mbit, mtu)
    return max(2 * (mtu + 14), burst_bytes(rate_mbit * payload_scale, mtu) // payload_scale)


@dataclass(frozen=True)
class Node:
    index: int
    netns: str        # namespace of the node
    iface: str        # the node's end of its veth (set GLOO_SOCKET_IFNAME to this)
    address: str      # IPv4 address of iface, in the run's private /24
    switch_port: str  # the switch's end of the veth, inside the switch namespace


class EmulatedCluster:
    """``with EmulatedCluster(nodes=3, rate_mbit=200) as cl:`` builds the cluster, removes it on exit.

    Inside: ``cl.nodes[i]`` (netns, iface, address), ``cl.exec(i, argv, **popen_kwargs)`` runs a
    command inside node i, ``cl.counters()`` reads each node's kernel interface byte counters.
    """

    def __init__(self, nodes: int, rate_mbit: float, delay_ms: float = 0.0, *,
                 mtu: int = 1500, prefix: str | None = None, payload_scale: int = 1):
        if not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
            raise ValueError(f"nodes must be an int in 1..{MAX_NODES}, got {nodes!r}")
        if not rate_mbit > 0:
            raise ValueError(f"rate_mbit must be > 0, got {rate_mbit!r}")
        if not delay_ms >= 0:
            raise ValueError(f"delay_ms must be >= 0, got {delay_ms!r}")
        if not isinstance(mtu, int) or not 576 <= mtu <= 65535:
            raise ValueError(f"mtu must be an int in 576..65535, got {mtu!r}")
        self.mtu = mtu
        if not isinstance(payload_scale, int) or payload_scale < 1:
            raise ValueError(f"payload_scale must be an int >= 1, got {payload_scale!r}")
        self.payload_scale = payload_scale  # F of the runs it carries: the token bucket scales with it
        self.prefix = prefix or "stz" + secrets.token_hex(3)
        if not PREFIX_RE.match(self.prefix + "-"):
            raise ValueError(f"prefix must look like stz<6 hex digits>, got {self.prefix!r}")
        self.rate_mbit, self.delay_ms = float(rate_mbit), float(delay_ms)
        # Third octet from the prefix: two clusters up at once are isolated anyway (separate
        # namespaces), distinct subnets only make their addresses easy to tell apart.
        self.subnet = f"10.213.{int(self.prefix[3:5], 16)}.0/24"
        base = self.subnet.rsplit(".", 1)[0]
        p = self.prefix
        self.switch_netns, self.bridge = f"{p}-sw", f"{p}-br"
        self.nodes = [Node(i, f"{p}-n{i}", f"{p}-e{i}", f"{base}.{i + 1}", f"{p}-s{i}")
                      for i in range(nodes)]
        self._up = False
        self._signal_ctx = None

    # --- lifecycle -------------------------------------------------------------------------
    def up(self, *, detached: bool = False) -> "EmulatedCluster":
        check_host()
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        owner = 0 if detached else os.getpid()
        (STATE_DIR / f"{self.prefix}.json").write_text(json.dumps(
            {"owner_pid": owner, "owner_starttime": proc_starttime(owner) if owner else None,
             **self.describe()}))
        self._up = True  # from here on, down() has something to remove
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        with signals_deferred():
            if self._up:
                remove_prefix(self.prefix)
                self._up = False

    def __enter__(self) -> "EmulatedCluster":
        self._signal_ctx = signals_raise()
        self._signal_ctx.__enter__()
        try:
            return self.up()
        except BaseException:
            self._signal_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, *exc) -> None:
        try:
            self.down()
        finally:
            self._signal_ctx.__exit__(None, None, None)

    # --- building --------------------------------------------------------------------------
    def _netns_setup(self, ns: str) -> None:
        sh(["ip", "netns", "add", ns])
        sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        # No IPv6 inside: link-local autoconfiguration, router solicitations and MLD reports
        # would add traffic to the counters that no rank sent.
        self._exec_quiet(ns, "for c in all default; do f=/proc/sys/net/ipv6/conf/$c/disable_ipv6;"
                             " [ -w $f ] && echo 1 > $f; done; true")

    def _exec_quiet(self, ns: str, script: str) -> None:
        sh(["ip", "netns", "exec", ns, "sh", "-c", script])

    def _shape(self, ns: str, dev: str, delay_ms: float) -> None:
        bits = int(round(self.rate_mbit * 1e6))
        burst = scaled_burst_bytes(self.rate_mbit, self.mtu, self.payload_scale)
        tc = ["tc", "-n", ns]
        sh(tc + ["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"])
        # One class, rate == ceil: the link never borrows. quantum only matters between sibling
        # classes; it is set so htb does not warn about the value it would derive from the rate.
        sh(tc + ["class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
                  "rate", f"{bits}bit", "ceil", f"{bits}bit", "burst", f"{burst}b",
                  "cburst", f"{burst}b", "quantum", "60000"])
        if delay_ms == 0 and self.payload_scale > 1:
            # The queue in front of the shaper, scaled like the bucket: unscaled, htb's leaf is a
            # pfifo of the device's txqueuelen packets (1000 on a veth), which holds 1000 frames'
            # line time at the rate x F; at the rate that is F times longer, and a reply queued
            # behind another flow's data (a PS pull behind pushes) waits F times too long.
            sh(tc + ["qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "pfifo", "limit",
                     str(scaled_queue_packets(self.payload_scale))])
        if delay_ms > 0:
            # The delay line must hold a full bandwidth-delay product or it drops at full rate.
            limit = max(1000, int(2 * bits / 8 * delay_ms / 1e3 / self.mtu))
            proc = sh(tc + ["qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:",
                             "netem", "delay", f"{delay_ms}ms", "limit", str(limit)], check=False)
            if proc.returncode != 0:
                if "unknown" in proc.stderr.lower():
                    raise NetemUnavailable("delay_ms > 0 needs the kernel's netem qdisc "
                                           "(CONFIG_NET_SCH_NETEM), which this kernel lacks; "
                                           "use delay_ms=0")
                raise NetemError(f"adding netem delay failed: {proc.stderr.strip()}")

    def _build(self) -> None:
        sw = self.switch_netns
        self._netns_setup(sw)
        sh(["ip", "-n", sw, "link", "add", self.bridge, "type", "bridge", "stp_state", "0",
             "forward_delay", "0"])
        sh(["ip", "-n", sw, "link", "set", self.bridge, "up"])
        for n in self.nodes:
            self._netns_setup(n.netns)
            # Both ends are born inside the namespaces: no interface ever exists on the host.
            sh(["ip", "-n", sw, "link", "add", "name", n.switch_port, "type", "veth",
                 "peer", "name", n.iface, "netns", n.netns])
            # One MTU frame per packet (no 64 KiB GSO super-packets across the veth): the
            # interface counters then count real Ethernet frames, headers of every segment
            # included, exactly the bytes htb paces and a NIC would put on a wire. The price
            # is per-frame work, which caps the rate a host can emulate (about 340 Mbit/s per
            # link at MTU 1500 on 2 cores); mtu=9000 (jumbo frames) goes well past 1 Gbit/s.
            for ns, dev in ((sw, n.switch_port), (n.netns, n.iface)):
                sh(["ip", "-n", ns, "link", "set", "dev", dev, "gso_max_segs", "1",
                     "mtu", str(self.mtu)])
            sh(["ip", "-n", sw, "link", "set", n.switch_port, "master", self.bridge, "up"])
            sh(["ip", "-n", n.netns, "addr", "add", f"{n.address}/24", "dev", n.iface])
            sh(["ip", "-n", n.netns, "link", "set", n.iface, "up"])
            self._shape(n.netns, n.iface, self.delay_ms)   # upload
            self._shape(sw, n.switch_port, 0.0)            # download

    # --- use -------------------------------------------------------------------------------
    def _check_node(self, i: int) -> Node:
        if not self._up:
            raise NetemError("the cluster is not up")
        if not 0 <= i < len(self.nodes):
            raise IndexError(f"node index {i} out of range 0..{len(self.nodes) - 1}")
        return self.nodes[i]

    def exec_argv(self, i: int, argv: list[str]) -> list[str]:
        return [tool("ip") or "ip", "netns", "exec", self._check_node(i).netns, *argv]

    def exec(self, i: int, argv: list[str], **popen_kwargs) -> subprocess.Popen:
        """Start ``argv`` inside node i's namespace (``ip netns exec``); returns the Popen."""
        return subprocess.Popen(self.exec_argv(i, argv), **popen_kwargs)

    def counters(self) -> list[dict]:
        """Per node: kernel byte counters of its interface, read inside its namespace.

        ``tx_bytes`` is what the node put on its link (upload), ``rx_bytes`` what it received;
        both count whole Ethernet frames (headers included), i.e. the bytes on the wire.
        """
        out = []
        for i, n in enumerate(self.nodes):
            stats = f"/sys/class/net/{n.iface}/statistics"
            proc = sh(self.exec_argv(i, ["cat", f"{stats}/tx_bytes", f"{stats}/rx_bytes"]))
            tx, rx = (int(v) for v in proc.stdout.split())
            out.append({"node": i, "tx_bytes": tx, "rx_bytes": rx})
        return out

    def queues(self) -> dict[str, list[str]]:
        """The shaped queues, by namespace: each node's upload (its end of the veth) and the
        switch's port towards it (the node's download)."""
        return {self.switch_netns: [n.switch_port for n in self.nodes],
                **{n.netns: [n.iface] for n in self.nodes}}

    def kill_all(self) -> None:
        """Stop every process running inside the cluster's namespaces (the cluster stays up)."""
        kill_namespace_processes([n.netns for n in self.nodes] + [self.switch_netns])

    def describe(self) -> dict:
        return {"prefix": self.prefix, "rate_mbit": self.rate_mbit, "delay_ms": self.delay_ms,
                "mtu": self.mtu, "payload_scale": self.payload_scale,
                "burst_bytes": scaled_burst_bytes(self.rate_mbit, self.mtu, self.payload_scale),
                "queue_packets": scaled_queue_packets(self.payload_scale) if self.payload_scale > 1 else TXQUEUELEN,
                "subnet": self.subnet, "switch_netns": self.switch_netns, "bridge": self.bridge,
                "nodes": [{"index": n.index, "netns": n.netns, "iface": n.iface,
                           "address": n.address} for n in self.nodes]}
