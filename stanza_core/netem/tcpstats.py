"""Losses on the emulated links during a run: TCP's own counters in every node's namespace and
the drops of every shaped queue, read before and after the run (``launch.train_on`` puts the
difference into the metrics as ``netem.losses``).

Why: a shaped link holds its rate (``linkstats.link_check``) and still costs a run time when its
queue overflows: the sender retransmits, and a loss at a message's tail waits for a loss probe
or a retransmission timeout (at least 200 ms on Linux), a delay set by the kernel's clocks and
not by the bytes. Two runs that move the same bytes at the same rates (for instance a replayed
run and its payload-scaled twin) take the same time only if such stalls are as rare in both;
these counters say whether they were. Counted over the whole run (set-up and the final gather
included), like the kernel byte counters.
"""
from __future__ import annotations

import re

from .host import sh

# TCP counters (from /proc/net/snmp and /proc/net/netstat of a node's namespace) kept, by the
# name they are reported under
TCP_FIELDS = {
    ("Tcp", "RetransSegs"): "retrans_segs",           # segments sent again, for any reason
    ("TcpExt", "TCPTimeouts"): "timeouts",            # retransmission timeouts (RTO) that fired
    ("TcpExt", "TCPLossProbes"): "loss_probes",       # tail loss probes sent
    ("TcpExt", "TCPFastRetrans"): "fast_retrans",     # losses repaired by fast retransmit
}


def parse_proc_net(text: str) -> dict[tuple[str, str], int]:
    """{(section, field): value} from the header/value line pairs of /proc/net/snmp or netstat."""
    out: dict[tuple[str, str], int] = {}
    lines = [ln.split() for ln in text.splitlines() if ln.strip()]
    for head, vals in zip(lines, lines[1:]):
        if not head or not vals or head[0] != vals[0] or not head[0].endswith(":"):
            continue
        if any(not v.lstrip("-").isdigit() for v in vals[1:]):
            continue   # a header line followed by the next header
        sect = head[0][:-1]
        out.update({(sect, k): int(v) for k, v in zip(head[1:], vals[1:])})
    return out


_DROPPED = re.compile(r"^qdisc (\S+) (\S+) .*?\bdev (\S+)")
_STATS = re.compile(r"dropped (\d+)")


def parse_qdisc_drops(text: str) -> dict[str, int]:
    """Drops per device, summed over its qdiscs, from `tc -s qdisc show` output."""
    out: dict[str, int] = {}
    dev = None
    for ln in text.splitlines():
        m = _DROPPED.match(ln.strip())
        if m:
            dev = m.group(3)
            continue
        s = _STATS.search(ln)
        if s and dev is not None:
            out[dev] = out.get(dev, 0) + int(s.group(1))
    return out


def read(cl) -> dict:
    """The counters now: per node namespace its TCP fields, per shaped queue its drops."""
    tcp = []
    for i in range(len(cl.nodes)):
        proc = sh(cl.exec_argv(i, ["cat", "/proc/net/snmp", "/proc/net/netstat"]))
        parsed = parse_proc_net(proc.stdout)
        tcp.append({name: parsed.get(key, 0) for key, name in TCP_FIELDS.items()})
    drops: dict[str, int] = {}
    for ns, devs in cl.queues().items():
        got = parse_qdisc_drops(sh(["tc", "-s", "-n", ns, "qdisc", "show"]).stdout)
        drops.update({d: got.get(d, 0) for d in devs})
    return {"tcp": tcp, "drops": drops}


def difference(before: dict, after: dict) -> dict:
    """What happened between two ``read``s: totals over the nodes, and the queues that dropped."""
    total = {name: sum(a[name] - b[name] for a, b in zip(after["tcp"], before["tcp"]))
             for name in TCP_FIELDS.values()}
    dropped = {d: after["drops"][d] - before["drops"].get(d, 0) for d in after["drops"]}
    return {**total, "queue_drops": sum(dropped.values()),
            "queues_dropping": {d: n for d, n in sorted(dropped.items()) if n > 0}}
