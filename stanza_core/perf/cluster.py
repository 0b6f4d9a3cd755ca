"""The cluster the performance model runs on, and the two primitive communication costs.

Network model (alpha-beta, full duplex): every node has one link of B bytes/s to a
non-blocking switch, usable at B in each direction at once. A message of m bytes occupies the
link it crosses for `latency_s + m / B`; a link carries its messages one after another, so n
messages of m bytes on one link take `n * (latency_s + m / B)`. The switch itself never
congests; only the nodes' own links (ingress or egress) are bottlenecks.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Union

from .. import checks
from .devices import DEVICE_TABLE, DeviceProfile

if TYPE_CHECKING:
    from .devices import DeviceProfile

DEFAULT_LATENCY_S = 50e-6  # assumption: one-way per-message cost over TCP on 10-100 GbE, software included


def _positive_finite(name: str, value, *, allow_zero: bool = False) -> float:
    return float(checks.number(name, value, **({"at_least": 0} if allow_zero else {"above": 0})))


@dataclasses.dataclass(frozen=True)
class Cluster:
    """N identical nodes (one accelerator each) behind one switch.

    `device` is either a `DeviceProfile` (measured or hand-made) or the name of a row of the
    device table (`devices.DEVICE_TABLE`, e.g. "v100"), turned into per-sample times from the
    model's FLOPs when `predict` sees the profile."""

    nodes: int  # N, all ranks: data workers, FC workers and PS shards live on them
    bandwidth_gbps: float  # B per direction per node, in gigabits per second (1 Gb = 1e9 bits)
    latency_s: float = DEFAULT_LATENCY_S  # per-message cost (alpha), seconds
    device: Union[str, "DeviceProfile"] = "v100"

    def __post_init__(self):
        checks.positive_int("nodes", self.nodes)
        _positive_finite("bandwidth_gbps", self.bandwidth_gbps)
        _positive_finite("latency_s", self.latency_s, allow_zero=True)
        if isinstance(self.device, str):
            checks.one_of("device", self.device.lower(), [*DEVICE_TABLE, "a DeviceProfile"])
            object.__setattr__(self, "device", self.device.lower())
        elif not isinstance(self.device, DeviceProfile):
            raise ValueError(f"device must be a device-table name or a DeviceProfile, got {type(self.device).__name__}")

    @property
    def bytes_per_s(self) -> float:
        """B in bytes per second, per direction."""
        return self.bandwidth_gbps * 1e9 / 8

    def transfer_s(self, nbytes: float, messages: int = 1) -> float:
        """Time one link needs to carry `messages` messages totalling `nbytes`."""
        return messages * self.latency_s + nbytes / self.bytes_per_s

    def ring_allreduce_s(self, nbytes: float, n: int) -> float:
        """Bandwidth-optimal ring allreduce of `nbytes` among n ranks.

        Reduce-scatter then all-gather: 2(n-1) steps, each moving nbytes/n over every link in
        both directions at once, so `2(n-1)/n * S / B + 2(n-1) * latency`. Zero for n == 1."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        return 2 * (n - 1) / n * nbytes / self.bytes_per_s + 2 * (n - 1) * self.latency_s


def emulated_bandwidth(target_gbps: float, t_compute_target: float | None = None,
                       t_compute_here: float | None = None, *, dilation: float | None = None) -> float:
    """The link rate that gives a slow machine the communication/compute ratio of a fast one.

    A step computes in t_compute_target on the target accelerator and in t_compute_here on
    this machine; shaping links to `target_gbps * t_compute_target / t_compute_here` makes
    every transfer take the same fraction of a step here as at target_gbps there.
    Replayed compute (stanza_core/engine/replay.py) waits exactly D x the target's times, so with
    `dilation=D` the same rule reads `target_gbps / D` (t_compute_here = D t_compute_target)."""
    _positive_finite("target_gbps", target_gbps)
    if dilation is not None:
        if t_compute_target is not None or t_compute_here is not None:
            raise ValueError("give the two compute times or the dilation, not both")
        return target_gbps / _positive_finite("dilation", dilation)
    _positive_finite("t_compute_target", t_compute_target)
    _positive_finite("t_compute_here", t_compute_here)
    return target_gbps * (t_compute_target / t_compute_here)


def _links_need(target_gbps: float, nodes: int, max_link_mbit: float, max_aggregate_mbit: float,
                ps_servers: int) -> float:
    """The links' term of D at payload scale 1: max(1000 target / max_link, B 1000 target / aggregate)."""
    mbit = 1000 * target_gbps
    busy = min(nodes, 2 * ps_servers) if ps_servers else nodes
    return max(mbit / max_link_mbit, busy * mbit / max_aggregate_mbit)


def replay_payload_scale(target_gbps: float, nodes: int, *, max_link_mbit: float, max_aggregate_mbit: float,
                         ps_servers: int = 0, max_scale: int, message_bytes: float | None = None,
                         min_message_bytes: float | None = None) -> int:
    """The payload scale F of a replayed run (comm/process_group.py: every message carries 1/F of
    its elements on links shaped to 1/F): as large as lets the links' term of D (replay_dilation)
    fall to 1, floor(links' term), but at most `max_scale`, and, where the configuration's
    messages are known, at most `message_bytes` / `min_message_bytes` (the byte-weighted 10th
    percentile message of a step, engine.metrics.message_sizes, kept at or above the size below
    which per-message costs, not bytes, set a transfer's time: netem.facts.MIN_MESSAGE_BYTES)."""
    _positive_finite("target_gbps", target_gbps)
    checks.positive_int("max_scale", max_scale)
    f = min(max_scale, max(1, math.floor(_links_need(target_gbps, nodes, max_link_mbit, max_aggregate_mbit,
                                                     ps_servers) + 1e-9)))
    if message_bytes is not None and min_message_bytes is not None:
        f = min(f, max(1, math.floor(message_bytes / min_message_bytes)))
    return f


def replay_dilation(target_gbps: float, nodes: int, *, max_link_mbit: float, max_aggregate_mbit: float,
                    engine_s: float = 0.0, target_step_s: float | None = None, engine_share: float = 0.05,
                    ps_servers: int = 0, payload_scale: int = 1) -> int:
    """The dilation D of a replayed run at `target_gbps` on `nodes` emulated nodes: the smallest
    integer D >= 1 at which this machine keeps up with the emulated cluster:

      links      one link at target / D within `max_link_mbit`, and the B links that receive at
                 once within `max_aggregate_mbit`, the aggregate this machine sustains
                 (`python -m stanza_core.netem check --pattern ring`). B = N when every node
                 sends and receives (ring allreduce, colocated parameter servers); with S > 0
                 dedicated servers (`ps_servers`, counted in `nodes`) every byte crosses a
                 server's link, so the servers' downloads and the workers' downloads (fed by the
                 servers' uploads) carry at most 2 S links' worth: B = min(N, 2 S)
                 (`python -m stanza_core.netem check --pattern star`);
      engine     the engine's own CPU work per step that replay keeps (gloo's reductions and
                 copies, gradient buffers, Python), `engine_s` seconds measured here (e.g. a
                 replay run at D = 1 on unshaped links), at most `engine_share` of the dilated
                 step D x `target_step_s` (the model's step time on the target).

        D = ceil(max(1, 1000 target / (F max_link_mbit), B 1000 target / (F max_aggregate_mbit),
                     engine_s / (engine_share target_step_s)))

    F = `payload_scale` (replay_payload_scale): every message carries 1/F of its elements on links
    shaped to 1/F, so the links hold F times the emulated rate; `engine_s` is then the engine's
    seconds measured at the same F. Below that D the CPU, not the shaper and the replayed waits,
    would set the step time."""
    _positive_finite("target_gbps", target_gbps)
    _positive_finite("max_link_mbit", max_link_mbit)
    _positive_finite("max_aggregate_mbit", max_aggregate_mbit)
    _positive_finite("engine_s", engine_s, allow_zero=True)
    _positive_finite("engine_share", engine_share)
    checks.positive_int("nodes", nodes)
    checks.positive_int("ps_servers", ps_servers, 0)
    if ps_servers >= nodes:
        raise ValueError(f"ps_servers must be fewer than the {nodes} nodes that count them, got {ps_servers}")
    checks.positive_int("payload_scale", payload_scale)
    need = [1.0, _links_need(target_gbps, nodes, max_link_mbit, max_aggregate_mbit, ps_servers) / payload_scale]
    if engine_s > 0:
        need.append(engine_s / (engine_share * _positive_finite("target_step_s", target_step_s)))
    return max(1, math.ceil(max(need) - 1e-9))
