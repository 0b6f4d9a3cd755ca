"""Measured per-layer records as compute: each layer's own time, at any batch.

A per-layer record is what `perf calibrate` writes beside its DeviceProfile (OUT.layers.json),
or one of the package's GPU records (records/DEVICE/MODEL-bBATCH-MODE.json, with SOURCE.md):
per leaf module, forward and backward seconds PER SAMPLE at one batch, timed with a pair of
events around the layer (module hooks). Those hooks slow a launch-bound step (up to 2.7x on the
H200 records), so the per-layer times are used as shares of an UNHOOKED total of the same step:
  `unhooked` (perf calibrate records): each part and phase (conv/fc x fwd/bwd) is scaled to the
      unhooked run's time of that part (calibrate already did; repeated here, a no-op);
  `plain_fwd_bwd_s` (the package's H200 records): the whole fwd+bwd without hooks, one factor;
  neither (older calibrate output): the hooked times as they are, and the label says so.

Batches. The records of one model, device and math mode at several batches (b_1 < ... < b_n)
give each layer's per-call time T(b) = b x (its seconds per sample at b):
  b_i <= b <= b_i+1   linear in b between the two measured per-call times;
  b < b_1             T(b_1): the per-call time is held (small batches are launch-bound);
  b > b_n             T(b_n) x b / b_n: the per-sample time is held (throughput-bound).
The last two are extrapolations: every label made at such a batch says "extrapolated".

Named measured devices (MEASURED_DEVICES) pick the package's records by the model's name; a
model, image size or class count the records were not taken with is refused in one line.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

from ..anatomy import Profile
from .devices import DeviceProfile

RECORDS_DIR = Path(__file__).parent / "records"
PHASES = ("fwd", "bwd")
PARTS = ("conv", "fc")


@dataclasses.dataclass(frozen=True)
class MeasuredDevice:
    """A named set of the package's records: records/<folder>/MODEL-bBATCH-<mode>.json."""

    folder: str
    mode: str  # file suffix: "tf32" (cuDNN TF32 on, PyTorch's default) or "fp32" (TF32 off)
    num_classes: int  # the records' class count (SOURCE.md)
    note: str


MEASURED_DEVICES: dict[str, MeasuredDevice] = {
    "h200-measured": MeasuredDevice("h200", "tf32", 1000, "NVIDIA H200, TF32 convolutions (PyTorch's default)"),
    "h200-fp32-measured": MeasuredDevice("h200", "fp32", 1000, "NVIDIA H200, TF32 off"),
}


@dataclasses.dataclass(frozen=True)
class LayerRecord:
    """One per-layer record, normalised: per leaf, seconds of one step's calls at `batch`."""

    model: str
    device: str
    image_size: int
    batch: int
    tf32: bool | None
    num_classes: int | None  # None: not written in the record
    part: dict[str, str]  # leaf name -> "conv" | "fc" (as the record's split put it)
    fwd: dict[str, float]  # leaf name -> forward seconds at `batch` (all its calls in one step)
    bwd: dict[str, float]
    scaled_to: str  # what the per-layer times sum to: "unhooked part totals", "the plain step", ""
    update_s_per_param: float
    source: str  # where it came from (file name)


def _bad(source: str, why: str) -> ValueError:
    return ValueError(f"{source}: not a per-layer record ({why})")


def parse_record(d: Any, source: str) -> LayerRecord:
    """A per-layer record (dict loaded from JSON, old or new calibrate format) -> LayerRecord,
    scaled to its unhooked total when it has one (module docstring). ValueError, one line."""
    if not isinstance(d, dict) or not isinstance(d.get("layers"), list) or not d["layers"]:
        raise _bad(source, "no 'layers' list")
    try:
        batch, model, size = int(d["batch"]), str(d["model"]), int(d["image_size"])
        rows = [(str(r["name"]), str(r["part"]), float(r["fwd_s"]), float(r.get("bwd_s") or 0.0)) for r in d["layers"]]
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(source, f"missing or bad field {e}") from None
    if batch < 1 or any(not (f >= 0 and b >= 0) for _, _, f, b in rows) or any(p not in PARTS for _, p, _, _ in rows):
        raise _bad(source, "batch < 1, a negative time or a part other than conv/fc")
    part = {n: p for n, p, _, _ in rows}
    fwd = {n: f * batch for n, _, f, _ in rows}  # per sample -> per step at `batch`
    bwd = {n: b * batch for n, _, _, b in rows}
    scaled_to = ""
    if isinstance(d.get("unhooked"), dict):  # perf calibrate: each part and phase to its own total
        for p in PARTS:
            for phase, times in (("fwd", fwd), ("bwd", bwd)):
                names = [n for n in times if part[n] == p]
                _scale(times, names, float(d["unhooked"][f"{p}_{phase}"]))
        scaled_to = "unhooked part totals"
    elif d.get("plain_fwd_bwd_s"):  # the package's records: the whole step, one factor
        total = sum(fwd.values()) + sum(bwd.values())
        k = float(d["plain_fwd_bwd_s"]) / total if total > 0 else 0.0
        fwd, bwd = {n: t * k for n, t in fwd.items()}, {n: t * k for n, t in bwd.items()}
        scaled_to = "the plain step"
    prof = d.get("profile") or {}
    return LayerRecord(model=model, device=str(d.get("device", "?")), image_size=size, batch=batch,
                       tf32=d.get("tf32"), num_classes=d.get("num_classes"), part=part, fwd=fwd, bwd=bwd,
                       scaled_to=scaled_to, update_s_per_param=float(prof.get("update_s_per_param", 0.0) or 0.0),
                       source=source)


def _scale(times: dict[str, float], names: list[str], total: float) -> None:
    got = sum(times[n] for n in names)
    if got > 0:
        for n in names:
            times[n] *= total / got


def load_record(path: str) -> LayerRecord:
    """A per-layer record file (old or new format); ValueError, one line."""
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not JSON ({type(e).__name__})") from None
    return parse_record(d, p.name)


_package_record = functools.lru_cache(maxsize=64)(load_record)  # the package's files never change


@dataclasses.dataclass(frozen=True)
class MeasuredLayers:
    """Records of one model, device and math mode, at one or more batches (module docstring)."""

    name: str  # the device's name: "h200-measured", or the record's file name
    records: tuple[LayerRecord, ...]  # sorted by batch
    num_classes: int | None = None  # known class count (named devices), else the records'

    def __post_init__(self):
        if not self.records:
            raise ValueError(f"{self.name}: no records")
        first = self.records[0]
        for r in self.records[1:]:
            if (r.model, r.image_size, r.tf32, set(r.fwd)) != (first.model, first.image_size, first.tf32, set(first.fwd)):
                raise ValueError(f"{self.name}: records {first.source} and {r.source} are of different configurations")
        if len({r.batch for r in self.records}) != len(self.records):
            raise ValueError(f"{self.name}: two records at the same batch")

    @property
    def batches(self) -> list[int]:
        return [r.batch for r in self.records]

    def extrapolated(self, batch: float) -> bool:
        return not self.batches[0] <= batch <= self.batches[-1]

    def call_s(self, layer: str, phase: str, batch: float) -> float:
        """Seconds of `layer`'s `phase` ("fwd"/"bwd") over one step's calls on `batch` samples
        (0 for a layer the records do not hold); interpolated as the module docstring says."""
        rs, bs = self.records, self.batches
        t = [getattr(r, phase).get(layer, 0.0) for r in rs]
        if batch <= bs[0]:
            return t[0]  # at or below the smallest batch: the per-call time held
        if batch >= bs[-1]:
            return t[-1] * batch / bs[-1]  # at or above the largest: the per-sample time held
        i = bisect.bisect_right(bs, batch)
        w = (batch - bs[i - 1]) / (bs[i] - bs[i - 1])
        return t[i - 1] + w * (t[i] - t[i - 1])

    def check(self, profile: Profile) -> None:
        """ValueError (one line) unless the records were taken of `profile`'s model and input."""
        r = self.records[0]
        size = profile.input_shape[-1]
        if profile.model != r.model:
            raise ValueError(f"{self.name}: measured {r.model}, not {profile.model}")
        if size != r.image_size:
            raise ValueError(f"{self.name}: measured at {r.image_size}x{r.image_size}, not {size}x{size}")
        classes = self.num_classes or r.num_classes
        fc = [row for row in profile.layers if row.part == "fc" and row.params]
        if classes and fc and fc[-1].out_values != classes:
            raise ValueError(f"{self.name}: measured with {classes} classes, not {fc[-1].out_values}")
        missing = sorted(set(r.fwd) - {row.name for row in profile.layers})
        if missing:
            raise ValueError(f"{self.name}: layer {missing[0]} of the record is not in {profile.model}")

    def label(self, batch: float | None = None) -> str:
        """What these times are, e.g. "h200-measured (measured record: NVIDIA H200 alexnet 224px
        tf32 on, batches 16-128, at batch 32; per-layer times scaled to the plain step)"."""
        r = self.records[0]
        mode = {True: "tf32 on", False: "tf32 off"}.get(r.tf32, "fp32")
        bs = "batch " + str(self.batches[0]) if len(self.records) == 1 else \
            f"batches {', '.join(map(str, self.batches))}"
        at = ""
        if batch is not None:
            at = f", at batch {batch:g}" + (" (extrapolated)" if self.extrapolated(batch) else "")
        scaled = (f"per-layer times scaled to {r.scaled_to}" if r.scaled_to else
                  "hooked per-layer times: no unhooked total, may be inflated by the hooks")
        return f"{self.name} (measured record: {r.device} {r.model} {r.image_size}px {mode}, {bs}{at}; {scaled})"

    def profile_at(self, profile: Profile, batch: float) -> DeviceProfile:
        """The DeviceProfile the performance model uses at `batch` (seconds per sample of each
        part, floors 0): each layer's time at `batch`, summed by the part `profile` puts it in."""
        part_of = {row.name: row.part for row in profile.layers}
        per = {f"{p}_{ph}_s": 0.0 for p in PARTS for ph in PHASES}
        for layer in self.records[0].fwd:
            for ph in PHASES:
                per[f"{part_of.get(layer, self.records[0].part[layer])}_{ph}_s"] += self.call_s(layer, ph, batch) / batch
        upd = min(self.records, key=lambda r: abs(r.batch - batch)).update_s_per_param
        return DeviceProfile(name=self.label(batch), **per, update_s_per_param=upd)


def for_model(name: str, model: str) -> MeasuredLayers:
    """Named measured device `name`'s records of `model` (ValueError listing the models it has)."""
    dev = MEASURED_DEVICES[name]
    folder = RECORDS_DIR / dev.folder
    files = sorted(folder.glob(f"{model}-b*-{dev.mode}.json"))
    if not files:
        have = sorted({f.name.split("-b")[0] for f in folder.glob(f"*-{dev.mode}.json")})
        raise ValueError(f"{name} has no measured record of {model}; it has: {', '.join(have)}")
    records = sorted((_package_record(str(f)) for f in files), key=lambda r: r.batch)
    return MeasuredLayers(name, tuple(records), dev.num_classes)
