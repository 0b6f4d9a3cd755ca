"""What the emulator itself can hold on this machine, and what its links carry.

The facts other modules need about the emulated cluster (and nothing else states):

  payload_per_wire_byte(mtu)  TCP payload bytes per byte the shaper paces: the emulated rate is
                              in wire bytes, the performance model's bandwidth in payload bytes
  max_link_mbit(mtu)          the fastest link rate one emulated node holds on 2 cores: above
                              it, per-frame work (not the shaper) sets the rate, so targets that
                              map higher are modelled only
  MAX_AGGREGATE_MBIT          the most all links together hold at once (every node sending and
                              receiving): perf.replay_dilation keeps replayed runs within it
  MIN_MESSAGE_BYTES           the smallest message a shaped link moves at its rate (payload
                              scaling keeps a step's messages above it: perf.replay_payload_scale)
  MAX_PAYLOAD_SCALE           the largest payload scale F chosen without knowing the messages
  MAX_PAYLOAD_SCALE_FAN_IN    the largest F where many ranks send to one at once
  MIN_LINK_MBIT               the slowest link rate the shaper is known to hold (F keeps above it)

Mapping a *target* bandwidth to an emulated rate is the performance model's business
(`stanza_core.perf.emulated_bandwidth`), not the emulator's.
"""
from __future__ import annotations

# Per-frame work caps the rate one emulated link holds on 2 cores: about 300 Mbit/s at MTU 1500
# (cluster.py: one frame per packet, no GSO), about 1 Gbit/s with jumbo frames (bench --mtu 9000).
MAX_LINK_MBIT = {1500: 300.0, 9000: 1000.0}

# The largest aggregate rate (sum over nodes of wire Mbit/s received, every link busy both ways)
# this 2-core machine holds with every link within ~1 % of its set rate, MTU 9000, with nothing
# else running: `python -m stanza_core.netem check --pattern ring --mtu 9000 --seconds 4
# --nodes N --rate-mbit R`: N=4 at 250 Mbit/s -> 1000 aggregate (every link within 0.1 %), N=8
# at 125 -> 1000 (0.1 %), N=5 at 200 -> 998 (-0.9 %), N=5 at 100 -> 500 (0.0 %). Other jobs on the cores lower it: at load average 12-19, N=4 at 150 ->
# 570 (worst link -10.5 %), N=4 at 200 -> 713 (-12.5 %), N=8 at 125 -> 867 (-21 %). On a loaded
# machine give replayed runs a larger D (--dilation is a floor). perf.replay_dilation keeps
# replayed runs within it. A dedicated parameter server's links (`--pattern star`: every node
# into node 0 and node 0 into every node at once, the received aggregate 2 x the rate) hold the
# same 1000: N=17 at 500 -> 996 and 1000 (both directions within 0.5 %, two runs), N=9 at 500 ->
# 999 (both -0.1 %), N=5 at 500 -> 1000 (both -0.0 %); at 62.5 node 0's upload -4.3 % (download
# +0.0 %). (Runs of this check before its window spanned only the time in which every sender
# runs read node 0's upload 3-11 % low at N=17: its 16 senders start last.) A colocated
# parameter server's links (`--pattern mesh`: every node into every other at once, n - 1 flows
# each way per link) hold it too: N=16 at 62.5 -> 999 (mean download and
# upload within 0.1 %, the slowest node within 0.8 %; the 240 senders take 17 s to start: --seconds
# 32), N=8 at 62.5 -> 500 (within 0.1 %).
MAX_AGGREGATE_MBIT = 1000.0

# Payload scaling (replayed runs: 1/F of every message on links shaped to 1/F; the token bucket
# scaled too, cluster.scaled_burst_bytes). Below MIN_MESSAGE_BYTES per-message costs (gloo's and
# TCP's work per message, the bucket's burst after an idle spell), not bytes, set a message's time
# on a shaped link: a stream of 8 messages of 256 KiB or more each moves within 2 % of bytes / rate
# at 20, 62.5 and 250 Mbit/s (ratios 0.983-0.999), 128 KiB ones do not (0.958 at 62.5, 0.964 at 250).
# Measured alone on the machine, MTU 9000, buckets for F = 16 (when: lab/LOG.md):
# `python benchmarks/message_floor.py --rates 20 62.5 250 --reps 3 --payload-scale 16
# --out benchmarks/results/message_floor.json` (the table is in that file).
MIN_MESSAGE_BYTES = 262144
# The slowest link rate the shaper is known to hold (Mbit/s): `check` measured every link within
# 1 % of its set rate from 20 to 300 Mbit/s (cluster.burst_bytes). Below it a 20 ms sample of the
# link check holds a few frames, and the check cannot judge the link; the run plan keeps a scaled
# link at or above it (runs.plan.replayed_plan lowers F).
MIN_LINK_MBIT = 20.0
# The largest F the run plan chooses where it does not know a configuration's messages yet
# (perf.replay_payload_scale; the grid listing): where it knows them (the engine-seconds run
# records them), F also keeps the step's byte-weighted 10th-percentile message at or above
# MIN_MESSAGE_BYTES.
MAX_PAYLOAD_SCALE = 32
# The largest F where many ranks send to one at once (registry.StrategySpec.fan_in: a PS's
# pushes, a Stanza FC worker's gather). Converging TCP flows keep a standing queue at the
# receiver's download link that does not shrink with the payload: its size is set in packets
# (the congestion control's minimum window and pacing quantum, BBR here), not bytes, so at F its
# line time grows where the payload's does not. Three senders into one link of 252 / F Mbit/s,
# 15 MB / F each, median backlog over 3 repetitions, measured alone on the machine (when: lab/LOG.md):
# MTU 9000 (the grid's) 8.0 ms at F = 1, 16.6-18.3 at 2, 38.9-48.1 at 4, 108-112
# at 8; MTU 1500 3.4-4.0 ms at F = 1, 3.6-3.7 at 2, 5.6-5.8 at 4, 8.7-10.4 at 8, 16-19 at 12,
# with queue drops from F = 4 (`python benchmarks/incast_queue.py [--mtu 9000 --scales 1 2 4 8]`,
# benchmarks/results/incast_queue.json, incast_queue_mtu9000.json). A message that arrives
# behind the backlog (a PS pull behind pushes) waits that much longer: AlexNet N=4 ps @ 100 Gb/s
# at F = 12 ran +4.4 % / +5.0 % slower than at F = 1, and, checked after this bound was set,
# AlexNet N=4 stanza k=2 @ 100 Gb/s at F = 12 +5.4 % (122 queue drops against none unscaled;
# benchmarks/payload_scaling.py, benchmarks/results/payload_scaling_fan_in.json).
# Until a queue that keeps its line time under scaling exists, such runs move whole messages.
MAX_PAYLOAD_SCALE_FAN_IN = 1


def max_link_mbit(mtu: int) -> float:
    """The fastest emulated link this machine holds at `mtu` (the MTU 1500 figure when unknown)."""
    return MAX_LINK_MBIT.get(mtu, MAX_LINK_MBIT[1500])


def payload_per_wire_byte(mtu: int) -> float:
    """TCP/IPv4 payload per byte htb paces: a full frame carries mtu - 20 (IP) - 32 (TCP with
    timestamps) payload bytes in mtu + 14 bytes (Ethernet header, no FCS). The model's
    bandwidth is in payload bytes, the emulated rate in wire bytes (1500: 0.956, 9000: 0.993)."""
    return (mtu - 52) / (mtu + 14)


def payload_gbps(link_mbit: float, mtu: int) -> float:
    """The payload bandwidth (Gb/s, the performance model's unit) of an emulated link of
    `link_mbit` wire Mbit/s at `mtu`."""
    return link_mbit * payload_per_wire_byte(mtu) / 1000
