"""netem.tcpstats: the loss counters of a run, parsed from the kernel's text and differenced."""
from stanza_core.netem import tcpstats

SNMP = """Ip: Forwarding DefaultTTL
Ip: 1 64
Tcp: RtoAlgorithm RtoMin RetransSegs InErrs
Tcp: 1 200 17 0
TcpExt: TCPTimeouts TCPLossProbes TCPFastRetrans
TcpExt: 3 5 9
"""

TC = """qdisc htb 1: dev stze1-e0 root refcnt 2 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 1000
 Sent 123 bytes 4 pkt (dropped 0, overlimits 7 requeues 0)
 backlog 0b 0p requeues 0
qdisc pfifo 10: dev stze1-e0 parent 1:1 limit 84p
 Sent 120 bytes 3 pkt (dropped 11, overlimits 0 requeues 0)
qdisc htb 1: dev stze1-s0 root refcnt 2 r2q 10 default 0x1
 Sent 9 bytes 1 pkt (dropped 2, overlimits 0 requeues 0)
"""


def test_proc_net_fields_are_read_by_section_and_name():
    got = tcpstats.parse_proc_net(SNMP)
    assert got[("Tcp", "RetransSegs")] == 17
    assert got[("Tcp", "RtoMin")] == 200
    assert got[("TcpExt", "TCPLossProbes")] == 5
    assert ("Ip", "Forwarding") in got and ("Tcp", "TCPTimeouts") not in got


def test_qdisc_drops_are_summed_per_device_over_its_qdiscs():
    assert tcpstats.parse_qdisc_drops(TC) == {"stze1-e0": 11, "stze1-s0": 2}


def test_difference_totals_nodes_and_names_only_queues_that_dropped():
    zero = {name: 0 for name in tcpstats.TCP_FIELDS.values()}
    before = {"tcp": [zero, zero], "drops": {"a": 1, "b": 0}}
    after = {"tcp": [{**zero, "retrans_segs": 4, "timeouts": 1}, {**zero, "retrans_segs": 2}],
             "drops": {"a": 1, "b": 6}}
    d = tcpstats.difference(before, after)
    assert d["retrans_segs"] == 6 and d["timeouts"] == 1 and d["loss_probes"] == 0
    assert d["queue_drops"] == 6 and d["queues_dropping"] == {"b": 6}
