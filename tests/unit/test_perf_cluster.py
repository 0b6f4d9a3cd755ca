"""Cluster validation, the two primitive costs (ring allreduce, a link's messages), the
emulated-bandwidth mapping, and the device table's derivation of per-sample times."""
import dataclasses
import math

import pytest

from stanza_core.anatomy import PartTotals, Profile
from stanza_core.perf import DEVICE_TABLE, Cluster, DeviceProfile, emulated_bandwidth


def hand_profile(pc=200_000, pf=1_000_000, a=10_000, conv_flops=1e9, fc_flops=2e6):
    return Profile("hand", (3, 8, 8), 1, "fc", a, PartTotals(pc, conv_flops), PartTotals(pf, fc_flops), [])


@pytest.mark.parametrize("kwargs, fragment", [
    ({"nodes": 0, "bandwidth_gbps": 10}, "nodes must be a positive integer"),
    ({"nodes": 2.5, "bandwidth_gbps": 10}, "nodes must be a positive integer"),
    ({"nodes": True, "bandwidth_gbps": 10}, "nodes must be a positive integer"),
    ({"nodes": 4, "bandwidth_gbps": 0}, "bandwidth_gbps must be > 0"),
    ({"nodes": 4, "bandwidth_gbps": float("nan")}, "bandwidth_gbps must be a finite number"),
    ({"nodes": 4, "bandwidth_gbps": float("inf")}, "bandwidth_gbps must be a finite number"),
    ({"nodes": 4, "bandwidth_gbps": 10, "latency_s": -1e-6}, "latency_s must be >= 0"),
    ({"nodes": 4, "bandwidth_gbps": 10, "device": "tpu"}, "unknown device 'tpu'"),
    ({"nodes": 4, "bandwidth_gbps": 10, "device": 3}, "device must be a device-table name or a DeviceProfile"),
])
def test_cluster_rejects_bad_input_in_one_line(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment) as e:
        Cluster(**kwargs)
    assert "\n" not in str(e.value)


def test_cluster_is_frozen_and_normalises_device_name():
    c = Cluster(4, 10, 0.0, "V100")
    assert c.device == "v100"
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.nodes = 8


def test_bandwidth_units():
    assert Cluster(2, 10).bytes_per_s == 1.25e9  # 10 Gb/s = 1.25 GB/s each way


def test_two_node_ring():
    # S = 1e9 bytes, B = 1e9 B/s, L = 1 ms: 2(n-1)/n * S/B = 1 s, 2(n-1) L = 2 ms
    c = Cluster(2, 8.0, 1e-3)
    assert c.ring_allreduce_s(1e9, 2) == pytest.approx(1.002, rel=1e-12)


def test_four_node_ring_and_degenerate_cases():
    c = Cluster(4, 8.0, 1e-4)
    assert c.ring_allreduce_s(4e8, 4) == pytest.approx(2 * 3 / 4 * 0.4 + 6 * 1e-4, rel=1e-12)
    assert c.ring_allreduce_s(4e8, 1) == 0.0  # nothing to reduce alone
    assert c.ring_allreduce_s(0, 4) == 0.0


def test_link_carries_messages_one_after_another():
    c = Cluster(2, 8.0, 1e-3)  # 1e9 B/s
    assert c.transfer_s(5e6, 3) == pytest.approx(3e-3 + 5e-3, rel=1e-12)


def test_emulated_bandwidth_preserves_the_ratio():
    # a step takes 0.1 s on the target and 10 s here: 10 Gb/s there behaves like 0.1 Gb/s here
    assert emulated_bandwidth(10, 0.1, 10) == pytest.approx(0.1, rel=1e-12)
    # the comm/compute ratio is the same on both sides for any message size
    s = 3e8
    there, here = Cluster(2, 10), Cluster(2, emulated_bandwidth(10, 0.1, 10))
    assert (s / there.bytes_per_s) / 0.1 == pytest.approx((s / here.bytes_per_s) / 10, rel=1e-12)
    for bad in [(0, 1, 1), (10, -1, 1), (10, 1, 0), (10, float("nan"), 1)]:
        with pytest.raises(ValueError):
            emulated_bandwidth(*bad)


def test_table_device_follows_the_stated_rules():
    p = hand_profile(conv_flops=3.0e10, fc_flops=2.5e8, pc=1.5e7, pf=1.2e8)
    d = DeviceProfile.from_table("v100", p)
    s = DEVICE_TABLE["v100"]
    assert s.conv_peak_flops == 15.7e12 and s.mem_bytes_per_s == 900e9  # vendor figures
    conv_rate = 15.7e12 * s.conv_efficiency
    assert d.conv_fwd_s == pytest.approx(3.0e10 / conv_rate, rel=1e-12)
    assert d.conv_bwd_s == pytest.approx(2 * d.conv_fwd_s, rel=1e-12)  # fwd+bwd = 3x fwd
    mem = 900e9 * s.mem_efficiency
    assert d.fc_fwd_call_s == pytest.approx(4 * 1.2e8 / mem, rel=1e-12)  # weights streamed once
    assert d.fc_bwd_call_s == pytest.approx(12 * 1.2e8 / mem, rel=1e-12)  # read W, read+write dW
    assert d.update_s_per_param == pytest.approx(32 / mem, rel=1e-12)  # foreach SGD(momentum): 32 bytes/param
    # roofline: at batch 1 the FC head is bound by its weights, at a huge batch by its FLOPs
    assert d.time_s("fc", "fwd", 1) == d.fc_fwd_call_s
    assert d.time_s("fc", "fwd", 10_000) == pytest.approx(10_000 * d.fc_fwd_s, rel=1e-12)


def test_a100_and_h100_convs_use_tf32_peak_fc_uses_fp32():
    assert DEVICE_TABLE["a100"].conv_peak_flops == 156e12 and DEVICE_TABLE["a100"].fc_peak_flops == 19.5e12
    assert DEVICE_TABLE["h100"].fc_peak_flops == 67e12


def test_device_profile_validation_and_measured_profile_errors():
    with pytest.raises(ValueError, match="conv_fwd_s must be >= 0"):
        DeviceProfile(name="x", conv_fwd_s=-1, conv_bwd_s=0, fc_fwd_s=0, fc_bwd_s=0)
    with pytest.raises(ValueError, match="no timings"):
        DeviceProfile.from_profile(hand_profile())
    with pytest.raises(ValueError, match="unknown device"):
        DeviceProfile.from_table("k80", hand_profile())
    p = hand_profile()
    p.conv.fwd_s, p.conv.bwd_s, p.fc.fwd_s, p.fc.bwd_s = 1e-3, 2e-3, 1e-4, 2e-4
    d = DeviceProfile.from_profile(p)
    assert (d.conv_fwd_s, d.fc_bwd_s, d.fc_fwd_call_s) == (1e-3, 2e-4, 0.0)
    assert d.step_compute_s(10) == pytest.approx(10 * 3.3e-3, rel=1e-12)
    assert math.isclose(emulated_bandwidth(10, DeviceProfile.from_table("v100", p).step_compute_s(32),
                                           d.step_compute_s(32)),
                        10 * DeviceProfile.from_table("v100", p).step_compute_s(32) / d.step_compute_s(32))
