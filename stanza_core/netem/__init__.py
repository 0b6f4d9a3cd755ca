"""Emulated cluster: one Linux network namespace per node, a bridge as the switch, and every
node's link shaped with tc in both directions, so strategies can be compared on a real network
stack at a chosen bandwidth on one machine. Needs Linux and root.

Words used here:
  node        one namespace, standing for one machine of the cluster (one torchrun agent)
  link        a node's full-duplex connection to the switch: upload (node -> switch) and
              download (switch -> node) each shaped to ``rate_mbit``
  prefix      ``stz<6 hex>``, unique per cluster; every namespace and interface name carries it
  wire bytes  the kernel's interface counters: whole Ethernet frames, headers included

API: ``EmulatedCluster`` (context manager), ``run_training`` / ``train_on`` (torchrun the training CLI on
a new / a given cluster: metrics, kernel counters, the link check and host load back), ``check_link`` (measured throughput against the set rate),
``cleanup`` (remove leftovers); the emulator's own limits in ``facts``. Shell: ``python -m stanza_core.netem --help``.
"""
from .check import check_link, measure_flows
from .cluster import EmulatedCluster, Node, burst_bytes
from .facts import MAX_AGGREGATE_MBIT, MAX_LINK_MBIT, max_link_mbit, payload_gbps, payload_per_wire_byte
from .host import (NetemError, NetemUnavailable, check_host, cleanup, list_namespaces,
                   missing_requirements)
from .launch import NodeFailure, launch, run_training, train_on

__all__ = ["MAX_AGGREGATE_MBIT", "EmulatedCluster", "Node", "burst_bytes", "NetemError", "NetemUnavailable", "NodeFailure",
           "check_host", "missing_requirements", "cleanup", "list_namespaces", "launch",
           "run_training", "train_on", "check_link", "measure_flows", "MAX_LINK_MBIT", "max_link_mbit", "payload_gbps",
           "payload_per_wire_byte"]
