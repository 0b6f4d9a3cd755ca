"""The simulated cluster, from the same description the emulated one is built from: one host per
node (dedicated parameter servers as hosts of their own), each with one full-duplex link into a
switch at the target rate, the links' delay and a per-message cost.

The emulated cluster shapes every link so that it carries `target / D` of TCP payload
(perf.emulated_bandwidth: the wire rate is raised by the MTU's framing), so the simulated link
carries the target rate of payload: a message of n bytes alone on its route takes
latency + n / rate. `per_message_s` is the simulator's one parameter: what a message costs beyond
its bytes (the engine's post, gloo's rendezvous, the kernel), fitted on the validation's fit half
only (sim/validation.py; its value and what it was fitted on: benchmarks/results/sim_validation.json).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .. import checks

RING_EXPANDED_UP_TO = 64  # ring allreduce as its 2(n-1) n messages up to this group size, merged per edge above
RINGS = ("auto", "expanded", "merged")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Platform:
    hosts: int  # nodes of the cluster (ranks: one per node)
    target_gbps: float  # every node's link, each direction, payload Gb/s
    delay_ms: float = 0.0  # one-way delay of every link (the emulation's delay_ms)
    per_message_s: float = 0.0  # what a message costs beyond its bytes (fitted: sim/validation.py)
    ring: str = "auto"  # ring allreduce: expanded, merged, or auto (by RING_EXPANDED_UP_TO)
    collective_threads: int = 2  # collectives of one process group in flight at once (gloo's worker threads)

    def __post_init__(self):
        checks.positive_int("hosts", self.hosts, 1)
        checks.number("target_gbps", self.target_gbps, above=0)
        checks.number("delay_ms", self.delay_ms, at_least=0)
        checks.number("per_message_s", self.per_message_s, at_least=0)
        checks.one_of("ring", self.ring, RINGS)
        checks.positive_int("collective_threads", self.collective_threads, 1)

    def ring_for(self, largest_group: int) -> str:
        if self.ring != "auto":
            return self.ring
        return "expanded" if largest_group <= RING_EXPANDED_UP_TO else "merged"

    def to_executor(self, largest_group: int) -> dict[str, Any]:
        """What sim/executor.py reads."""
        return {"hosts": self.hosts, "bandwidth_Bps": self.target_gbps * 1e9 / 8, "latency_s": self.delay_ms / 1e3,
                "per_message_s": self.per_message_s, "ring": self.ring_for(largest_group),
                "collective_threads": self.collective_threads, "target_gbps": self.target_gbps}
