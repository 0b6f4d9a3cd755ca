"""One resolver for every place a compute device is named: `perf --device`, `train --compute
replay --replay-device`, the explorer and the experiments.

    device_profile("v100", profile).profile            a row of DEVICE_TABLE        source "table"
    device_profile("h200-measured", profile, 32)       the package's H200 records   "measured record"
    device_profile("gpu.layers.json", profile, 32)     a per-layer record           "measured record"
    device_profile("gpu.json", profile)                a DeviceProfile JSON         "profile file"
    device_profile("measured", timed_profile)          a timed Profile's own times  "measured profile"

Table rows are costed by the compute model (compute.py, fitted to published figures); measured
records give each layer its own time (records.py), which replay waits layer by layer. `batch`:
the samples per call the DeviceProfile is made for (a measured record's per-sample times depend
on it); default: the profile's own batch. Every error is a one-line ValueError naming `what`
(e.g. "--replay-device") and, for an unknown name, every known one.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..anatomy import Profile
from ..errors import ConfigError
from .devices import DEVICE_TABLE, DeviceProfile
from .records import MEASURED_DEVICES, MeasuredLayers, for_model, parse_record

SOURCES = ("table", "measured record", "profile file", "measured profile", "given")


@dataclasses.dataclass(frozen=True)
class Device:
    """A resolved device: the DeviceProfile the model uses, where it came from, and (measured
    records) the per-layer times replay waits."""

    profile: DeviceProfile
    source: str  # one of SOURCES
    measured: MeasuredLayers | None = None

    @property
    def caption(self) -> str:
        """The device as a figure names it, its source included, e.g. "v100 (table)"."""
        name = self.profile.name
        return name if self.source.split()[0] in name else f"{name} ({self.source})"


def device_names() -> list[str]:
    """Every device name the resolver knows (besides PATH.json and "measured")."""
    return [*DEVICE_TABLE, *MEASURED_DEVICES]


def device_source(spec: str) -> str:
    """The source word of a device name without resolving it (a caption before any profile)."""
    key = spec.lower()
    if key in DEVICE_TABLE:
        return "table"
    if key in MEASURED_DEVICES:
        return "measured record"
    return "profile file" if spec.endswith(".json") else "unknown"


def known_device(spec: str) -> bool:
    """A table row, a measured device, or a path ending in .json (read when resolved)."""
    return isinstance(spec, str) and (spec.lower() in DEVICE_TABLE or spec.lower() in MEASURED_DEVICES
                                      or spec.endswith(".json"))


def unknown_message(spec: str, what: str = "device") -> str:
    return (f"unknown {what} {spec!r}; expected one of: {', '.join(device_names())} "
            "or PATH.json (a DeviceProfile, a per-layer record of `perf calibrate`, or a timed Profile)")


def check_device(spec: str, what: str = "device") -> str:
    """`spec` names a device the resolver knows (known_device), else a one-line ConfigError."""
    if not known_device(spec):
        raise ConfigError(unknown_message(spec, what))
    return spec


def device_profile(spec: str | DeviceProfile, profile: Profile, batch: float | None = None, *,
                   what: str = "device") -> Device:
    """The Device that `spec` names, for `profile`'s model at `batch` samples per call."""
    if isinstance(spec, DeviceProfile):
        return Device(spec, "given")
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"{what} must be a device name or PATH.json, got {spec!r}")
    batch = profile.batch_size if batch is None else batch
    if not batch > 0:
        raise ValueError(f"{what} {spec}: batch must be > 0, got {batch!r}")
    key = spec.lower()
    if key in DEVICE_TABLE:
        return Device(DeviceProfile.from_table(key, profile), "table")
    if key in MEASURED_DEVICES:
        try:
            layers = for_model(key, profile.model)
        except ValueError as e:
            raise ValueError(f"{what} {e}") from None
        return _measured(layers, profile, batch, what)
    if key == "measured":
        return Device(DeviceProfile.from_profile(profile), "measured profile")
    if not spec.endswith(".json"):
        raise ValueError(unknown_message(spec, what))
    return _from_file(spec, profile, batch, what)


def _measured(layers: MeasuredLayers, profile: Profile, batch: float, what: str) -> Device:
    try:
        layers.check(profile)
    except ValueError as e:
        raise ValueError(f"{what} {e}") from None
    return Device(layers.profile_at(profile, batch), "measured record", layers)


def _from_file(spec: str, profile: Profile, batch: float, what: str) -> Device:
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"{what} {spec}: no such file")
    try:
        d = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{what} {spec}: not JSON ({type(e).__name__})") from None
    layers = None
    try:
        if isinstance(d, dict) and "conv_fwd_s" in d:
            return Device(DeviceProfile(**d), "profile file")
        if isinstance(d, dict) and "layers" in d and "conv" in d:
            return Device(DeviceProfile.from_profile(Profile.from_dict(d), name=f"{path.name} (measured profile)"),
                          "measured profile")
        if isinstance(d, dict) and "layers" in d and "batch" in d:
            layers = MeasuredLayers(path.name, (parse_record(d, path.name),))
    except (TypeError, KeyError, ValueError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{what} {spec}: malformed profile ({msg})") from None
    if layers is None:
        raise ValueError(f"{what} {spec}: neither a DeviceProfile (conv_fwd_s, ...), a per-layer record "
                         "(model, batch, layers) nor a Profile (layers, conv, fc) JSON")
    return _measured(layers, profile, batch, what)
