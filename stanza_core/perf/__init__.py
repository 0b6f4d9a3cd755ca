"""Analytic performance model of ps, ddp and stanza; node-assignment optimiser; sweeps.

  Cluster, emulated_bandwidth   the nodes, their links, and the CPU-emulation bandwidth mapping
  replay_dilation               the dilation D of a replayed run (the emulator must hold target / D)
  replay_payload_scale          its payload scale F (1/F of every message on links shaped to 1/F)
  DeviceProfile, DEVICE_TABLE   per-sample compute times, measured or derived from FLOPs
  device_profile -> Device      the one resolver of a device name (table row, measured record,
                                PATH.json) into a DeviceProfile with its source; MEASURED_DEVICES
  expected_bytes                per-rank, per-category bytes per step (equal to the engine's counters)
  predict -> Prediction         step time, breakdown, throughput and traffic of one configuration
  best_assignment               the fastest of ddp, ps and stanza k = 1..N//2, with the ranking
  sweep                         best_assignment over bandwidths x cluster sizes

The equations and assumptions are written out in docs/performance-model.md.
"""
from .cluster import DEFAULT_LATENCY_S, Cluster, emulated_bandwidth, replay_dilation, replay_payload_scale
from .devices import DEVICE_TABLE, DeviceProfile, DeviceSpec, measure_update_s_per_param
from .model import Prediction, predict
from .records import MEASURED_DEVICES, MeasuredLayers
from .resolve import Device, check_device, device_names, device_profile, device_source, known_device
from .optimize import Assignment, best_assignment
from .profiles import load_profile, named_profile
from .sweep import sweep
from .traffic import ModelCounts, expected_bytes, ps_shard_sizes, totals

__all__ = ["Cluster", "emulated_bandwidth", "replay_dilation", "replay_payload_scale", "DEFAULT_LATENCY_S", "DeviceProfile", "DeviceSpec", "DEVICE_TABLE",
           "measure_update_s_per_param",
           "check_device", "device_profile", "Device", "device_names", "device_source", "known_device", "MEASURED_DEVICES",
           "MeasuredLayers", "predict", "Prediction", "best_assignment", "Assignment",
           "named_profile", "load_profile", "sweep", "expected_bytes", "ModelCounts", "ps_shard_sizes", "totals"]
