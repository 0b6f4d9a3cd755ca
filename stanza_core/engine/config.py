"""The run configuration: one typed, validated dataclass written into every metrics JSON."""
from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Any

import torch

from .. import checks
from ..errors import ConfigError  # noqa: F401 (the engine's modules import it from here)
from .. import registry
from ..models import MIN_IMAGE_SIZE
from ..buckets import DEFAULT_BUCKET_MB  # --bucket-mb's default, the model's too
from ..batchnorm import BN_LOCAL, BN_STATS  # noqa: F401 (--bn-stats' values, the model's too)
from ..variant import HoldsVariant, Variant
from ..batchnorm import bn_layers

DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "gloo", "nccl")
COMPUTE = ("real", "replay")
REPLAY_WAITS = ("sleep", "spin", "cpu")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")

MAX_SEED = 2**23  # seeds are mixed with step and position into 64-bit generator keys
MAX_TIMEOUT_S = 7 * 86400.0
MAX_BUCKET_MB = 1e5




@dataclasses.dataclass(kw_only=True)
class TrainConfig(HoldsVariant):
    """The run's configuration. Its strategy and that strategy's options are one value,
    `variant` (variant.Variant); `TrainConfig(strategy="ps", ps_servers=1, ...)` builds it from
    keywords (the edge from the CLI's flags: Variant.parse), `cfg.strategy` reads it and
    `cfg.variant.options` holds its options. `to_dict()` lists every registered option flat
    (another strategy's at its default), as the training CLI's flags."""

    variant: Variant = dataclasses.field(default_factory=lambda: Variant("stanza"))  # the strategy and its options
    model: str = "tiny_cnn"  # a zoo name (stanza_core.MODEL_NAMES) or package.module:factory
    num_classes: int = 10  # classes of the classifier head
    image_size: int = 32  # square input side in pixels
    global_batch: int = 32  # samples per step over the whole cluster
    steps: int = 10  # optimizer steps (the total, also when resuming)
    warmup: int = 1  # first steps left out of the throughput
    log_every: int = 1  # read the losses and step times from the device every K steps (and before any save and at the end); a non-finite loss stops the run at the next read
    lr: float = 0.01  # SGD learning rate
    momentum: float = 0.9  # SGD momentum
    weight_decay: float = 0.0  # SGD L2 weight decay
    seed: int = 0  # model init, data order, dropout masks
    dataset: str = "synthetic"  # synthetic | digits | cifar10:PATH | imagefolder:PATH
    device: str = "auto"  # auto | cpu | cuda
    boundary: str | None = None  # force the CONV|FC cut before this module (None: automatic)
    save: str | None = None  # write the final full-model state_dict here (rank 0)
    save_every: int = 0  # with --save: also the full model after every K-th step, to PATH.stepK (before its suffix)
    metrics: str | None = None  # write the metrics JSON here (rank 0)
    checkpoint_dir: str | None = None  # checkpoints (torch.distributed.checkpoint, atomic) go here
    checkpoint_every: int = 0  # checkpoint every K steps (0: only at the end, if a dir is given)
    resume: bool = False  # continue from the checkpoints in checkpoint_dir
    timeout_s: float = 120.0  # collective / point-to-point timeout: a dead peer fails this fast
    bucket_mb: float = DEFAULT_BUCKET_MB  # gradient bucket size for overlapped allreduce (stanza, ddp)
    overwrite: bool = False  # allow --save/--metrics/--checkpoint-dir to replace existing files
    quiet: bool = False  # -q: no progress bar and no summary, warnings and errors only
    verbose: bool = False  # -v: also one log line per --log-every window (loss, samples/s, step time)
    tensorboard: str | None = None  # write loss, samples/s and step time as TensorBoard event files into this folder (rank 0; the "tensorboard" extra)
    log_csv: str | None = None  # write loss, samples/s and step time per --log-every window to this CSV file (rank 0)
    exact: bool = False  # GPU numerics equal to CPU within fp32 tolerance: TF32 off, deterministic cuDNN
    backend: str = "auto"  # auto (nccl on cuda, gloo on cpu) | gloo (also: several ranks share a GPU) | nccl
    timeline: bool = False  # record per-rank event timestamps (sends, receives, allreduces, compute) in the metrics JSON
    record_program: str | None = None  # replay: write every rank's program (each step's compute waits, messages, collectives and waits, in order: stanza_core/comm/record.py) to this JSON file (rank 0)
    compute: str = "real"  # real | replay (layer arithmetic replaced by waits: stanza_core/engine/replay.py)
    replay_device: str | None = None  # replay: a device (v100, h200-measured, ...: perf device names) or PATH.json
    dilation: float = 1.0  # replay: D, each replayed compute time is D x the device's
    replay_wait: str = "sleep"  # replay: sleep (release the CPU, as accelerator compute) | spin (hold it) | cpu (hold it for CPU time)
    replay_jitter: str | None = None  # replay: PATH.json of measured per-step compute factors per rank (replay.py: jitter)
    payload_scale: int = 1  # replay: F, every message carries 1/F of its elements (links shaped to 1/F by the run plan; bytes reported logical)
    compile: bool = False  # torch.compile the model pieces this rank runs (opt-in: first steps pay the compilation; not bitwise equal to eager)
    compile_mode: str = "default"  # with --compile: default | reduce-overhead (CUDA graphs: a piece's launches replayed as one graph; CUDA only) | max-autotune
    bn_stats: str = "global"  # batch-norm statistics: global (over the global batch, SyncBatchNorm semantics: equals local) | local (per data worker: not equal to local)

    def __post_init__(self):
        for f in dataclasses.fields(self):  # every number finite, before any range check
            if isinstance(getattr(self, f.name), float):
                checks.number(_flag(f.name), getattr(self, f.name))
        checks.one_of("--bn-stats", self.bn_stats, BN_STATS)
        checks.in_interval("--seed", self.seed, 0, MAX_SEED)
        if self.timeout_s > MAX_TIMEOUT_S:
            raise ConfigError(f"--timeout-s must be <= {MAX_TIMEOUT_S:.0f} (a week), got {self.timeout_s}")
        if self.bucket_mb > MAX_BUCKET_MB:
            raise ConfigError(f"--bucket-mb must be <= {MAX_BUCKET_MB:.0f}, got {self.bucket_mb}")
        if not isinstance(self.variant, Variant):
            raise ConfigError(f"variant must be a stanza_core.variant.Variant, got {type(self.variant).__name__}")
        checks.one_of("device", self.device, DEVICES)
        checks.one_of("backend", self.backend, BACKENDS)
        if self.backend == "nccl" and self.device == "cpu":
            raise ConfigError("--backend nccl needs CUDA tensors; use --device cuda (or --backend gloo on CPU)")
        for name in ("num_classes", "image_size", "global_batch", "steps", "log_every"):
            checks.number(_flag(name), getattr(self, name), at_least=1)
        for name in ("warmup", "checkpoint_every", "save_every", "weight_decay"):
            checks.number(_flag(name), getattr(self, name), at_least=0)
        for name in ("lr", "timeout_s", "bucket_mb", "dilation"):
            checks.number(_flag(name), getattr(self, name), above=0)
        checks.in_interval("--momentum", self.momentum, 0, 1)
        if self.warmup >= self.steps:
            raise ConfigError(f"--warmup {self.warmup} leaves no timed step of --steps {self.steps}, so there is no "
                              "throughput to report; expected --warmup < --steps (e.g. --warmup 0)")
        if self.resume and not self.checkpoint_dir:
            raise ConfigError("--resume needs --checkpoint-dir (where the checkpoints are)")
        if self.checkpoint_every and not self.checkpoint_dir:
            raise ConfigError("--checkpoint-every needs --checkpoint-dir")
        if self.save_every and not self.save:
            raise ConfigError("--save-every needs --save (the path the step files are named after)")
        self._check_paths()
        if self.quiet and self.verbose:
            raise ConfigError("--quiet and --verbose contradict each other; give one")
        for name in ("save", "metrics", "log_csv", "record_program"):
            path = getattr(self, name)
            if path and os.path.exists(path) and not self.overwrite and not self.resume:
                raise ConfigError(f"--{name.replace('_', '-')} {path} already exists; pass --overwrite to replace it")
        for step in self.save_steps():
            path = step_save_path(self.save, step)
            if os.path.exists(path) and not self.overwrite and not self.resume:
                raise ConfigError(f"--save-every: {path} already exists; pass --overwrite to replace it")
        if self.checkpoint_dir and not self.overwrite and not self.resume:
            from .checkpoint import existing  # late: it imports torch.distributed.checkpoint

            if (name := existing(self.checkpoint_dir)) is not None:
                raise ConfigError(f"--checkpoint-dir {self.checkpoint_dir} already holds checkpoint {name}; pass --resume "
                                  "to continue it or --overwrite to replace it")

        checks.one_of("--compile-mode", self.compile_mode, COMPILE_MODES)
        if self.compile_mode != "default" and not self.compile:
            raise ConfigError(f"--compile-mode {self.compile_mode} needs --compile")
        if self.compile and self.compile_mode == "reduce-overhead" and self.device == "cpu":
            raise ConfigError("--compile-mode reduce-overhead records CUDA graphs; use --device cuda "
                              "(or --compile-mode default on CPU)")
        if self.compile and self.compute == "replay":
            raise ConfigError("--compile is refused with --compute replay (replayed compute runs no arithmetic to compile)")
        checks.one_of("--compute", self.compute, COMPUTE)
        checks.one_of("--replay-wait", self.replay_wait, REPLAY_WAITS)
        if self.compute == "replay":
            if not self.replay_device:
                raise ConfigError("--compute replay needs --replay-device (a device-table row, a measured device or PATH.json)")
            for name in ("save", "checkpoint_dir"):
                if getattr(self, name):
                    raise ConfigError(f"--{name.replace('_', '-')} is refused with --compute replay "
                                      "(replayed compute does not train the parameters)")
        elif self.replay_device or self.dilation != 1.0 or self.replay_jitter or self.replay_wait != "sleep":
            raise ConfigError("--replay-device, --dilation, --replay-wait and --replay-jitter need --compute replay")
        if self.record_program:
            if self.compute != "replay":
                raise ConfigError("--record-program needs --compute replay (a program's compute is the device "
                                  "profile's waits); expected --compute replay --replay-device NAME")
            if self.replay_jitter:
                raise ConfigError("--record-program records the device profile's own times; expected no --replay-jitter")
            if self.variant.get("grad_compression") == "powersgd":
                raise ConfigError("--record-program does not record --grad-compression powersgd (its hook runs "
                                  "several allreduces per bucket outside the engine's handle); expected none, fp16 or bf16")
        if isinstance(self.payload_scale, bool) or not isinstance(self.payload_scale, int) or self.payload_scale < 1:
            raise ConfigError(f"--payload-scale must be an integer >= 1, got {self.payload_scale!r}")
        if self.payload_scale != 1:
            if self.compute != "replay":
                raise ConfigError(f"--payload-scale {self.payload_scale} needs --compute replay (real compute "
                                  "needs every value of every message); expected --payload-scale 1")
            if self.variant.get("grad_compression") == "powersgd":
                raise ConfigError(f"--payload-scale {self.payload_scale} does not apply to --grad-compression "
                                  "powersgd (its factors' sizes do not scale with the bucket); expected 1")
        if self.image_size < MIN_IMAGE_SIZE.get(self.model, 1):
            raise ConfigError(f"--image-size {self.image_size} is too small for {self.model}; "
                              f"expected >= {MIN_IMAGE_SIZE[self.model]}")

    def _check_paths(self):
        """Every output path can be written, checked now: a run never trains and then fails to save."""
        if self.save and self.metrics and os.path.abspath(self.save) == os.path.abspath(self.metrics):
            raise ConfigError(f"--save and --metrics name the same file {self.save}")
        for name in ("save", "metrics", "log_csv", "record_program"):
            path = getattr(self, name)
            if path:
                check_writable(f"--{name.replace('_', '-')}", path, folder=False)
        if self.tensorboard:
            check_writable("--tensorboard", self.tensorboard, folder=True)
        if self.checkpoint_dir:
            check_writable("--checkpoint-dir", self.checkpoint_dir, folder=True)

    def save_steps(self) -> list[int]:
        """The steps after which --save-every writes the full model (the last step: --save itself)."""
        if not (self.save and self.save_every):
            return []
        return list(range(self.save_every, self.steps, self.save_every))

    def to_dict(self) -> dict[str, Any]:
        """The configuration as plain data (the metrics JSON's `config`, a checkpoint's): the
        strategy and every registered option flat, then the other fields."""
        rest = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "variant"}
        return {"strategy": self.strategy, **self.variant.flat(), **rest}


def check_on_device(cfg: TrainConfig, device) -> None:
    """The rules that need this rank's device (`--device auto` resolved): one-line ConfigError."""
    if cfg.compile and cfg.compile_mode == "reduce-overhead" and device.type != "cuda":
        raise ConfigError("--compile-mode reduce-overhead records CUDA graphs: no CUDA GPU here; use "
                          "--compile-mode default", scope="host")
    if cfg.backend == "nccl" and device.type != "cuda":
        raise ConfigError("--backend nccl: no CUDA GPU here; use --backend gloo or auto", scope="host")


def check_model_layout(cfg: TrainConfig, topo, model, split, bn_fewest: tuple[str, int] | None) -> bool:
    """The layout rules that need the built model (its batch-norm layers, its split), checked
    before any process group forms: one-line ConfigError. `bn_fewest`: the batch-norm layer with
    the fewest values per channel per sample (models.check_model), which a training batch must
    give more than one value per channel. Returns whether batch-norm
    statistics are taken over the global batch (a process group "bn" of the data workers)."""

    if cfg.boundary is not None and split is None and cfg.boundary not in dict(model.named_modules()):
        raise ConfigError(f"--boundary {cfg.boundary}: {cfg.model} has no module of that name (and with "
                          f"{cfg.strategy} a boundary has no effect: only stanza splits the model)")
    bn_sync = cfg.bn_stats == "global" and topo.data_workers > 1 and bool(bn_layers(model))
    cfg.variant.options.check_model(model, cfg.model, bn_sync=bn_sync, spell=_flag)  # the strategy's own rules
    if bn_sync and split is not None and bn_layers(split.fc):
        raise ConfigError(f"{cfg.model}: batch norm on the FC side ({bn_layers(split.fc)[0][0]}) cannot use global "
                          f"batch statistics under {cfg.strategy} (an FC worker sees one CONV worker's samples at a "
                          "time); pass --bn-stats local or a --boundary after it")
    if bn_fewest is not None and cfg.compute == "real":  # replayed compute runs no batch norm
        layer, per_sample = bn_fewest
        samples = cfg.global_batch if bn_sync or topo.data_workers == 1 else min(
            topo.batch_slice(r, cfg.global_batch).stop - topo.batch_slice(r, cfg.global_batch).start
            for r in topo.conv_ranks)
        if samples * per_sample <= 1:
            where = "per step" if bn_sync or topo.data_workers == 1 else "on a data worker"
            raise ConfigError(f"--global-batch {cfg.global_batch}: {cfg.model}'s batch norm layer {layer} sees "
                              f"{samples * per_sample} value per channel ({samples} sample {where}, {per_sample} "
                              f"value each at --image-size {cfg.image_size}), and batch norm needs more than one "
                              "in training; expected a larger --global-batch or --image-size")
    return bn_sync


def check_layout(cfg: TrainConfig, topo) -> list[str]:
    """What `cfg` means on the layout `topo` (topology.make_topology: its world size and data
    workers), checked before any work: one warning line per flag given that has no effect on this
    strategy or world size but changes nothing about the run (the training CLI prints them, rank
    0 only).

    Flags that choose what runs (the strategy's own options: --fc-workers, --ps-*, stanza's
    options) are refused under another strategy by TrainConfig itself (a one-line ConfigError),
    and the layout they ask for by topology.make_topology; here are the knobs that tune something
    the chosen strategy or world size does not do."""
    world_size, data_workers = topo.world_size, topo.data_workers
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    given = lambda name: getattr(cfg, name) != defaults[name]  # noqa: E731
    out = []
    if world_size == 1:
        for name, why in (("timeout_s", "there is no peer to wait for"),
                          ("backend", "there is no process group to choose it for")):
            if given(name):
                out.append(f"--{name.replace('_', '-')} has no effect on one process: {why}")
    bucketed = registry.get(cfg.strategy).bucketed
    buckets = bool(cfg.variant.get(bucketed)) if isinstance(bucketed, str) else bucketed
    if given("bucket_mb") and not (buckets and world_size > 1):
        where = "on one process" if buckets else (
            f"with {cfg.strategy} without --{bucketed.replace('_', '-')}" if isinstance(bucketed, str)
            else f"with {cfg.strategy}")
        out.append(f"--bucket-mb has no effect {where}: no gradient buckets are exchanged")
    if cfg.boundary is not None and not registry.get(cfg.strategy).split:
        out.append(f"--boundary has no effect with {cfg.strategy}: it does not split the model")
    if cfg.bn_stats == BN_LOCAL and data_workers <= 1:
        out.append("--bn-stats local has no effect with one data worker: its statistics are the global ones")
    if cfg.exact and cfg.device == "cpu":
        out.append("--exact has no effect with --device cpu: CPU numerics are already fp32 and deterministic")
    if cfg.checkpoint_every and cfg.checkpoint_every >= cfg.steps:
        out.append(f"--checkpoint-every {cfg.checkpoint_every} >= --steps {cfg.steps}: only the final checkpoint "
                   "is written")
    if cfg.save_every and cfg.save_every >= cfg.steps:
        out.append(f"--save-every {cfg.save_every} >= --steps {cfg.steps}: only the final --save is written")
    if cfg.overwrite and not (cfg.save or cfg.metrics or cfg.checkpoint_dir):
        out.append("--overwrite has no effect without --save, --metrics or --checkpoint-dir")
    if cfg.compute == "replay":
        unused = [f"--{n.replace('_', '-')}" for n in ("lr", "momentum", "weight_decay") if given(n)]
        if cfg.dataset != defaults["dataset"]:
            unused.append("--dataset")
        if unused:
            out.append(f"{', '.join(unused)} {'has' if len(unused) == 1 else 'have'} no effect with --compute replay: "
                       "replayed compute ignores the samples' values and does not train the parameters")
    return out


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def step_save_path(path: str, step: int) -> str:
    """Where --save-every writes the full model after `step` steps: model.pt -> model.step20.pt."""
    root, ext = os.path.splitext(path)
    return f"{root}.step{step}{ext}"


def check_writable(flag: str, path: str, folder: bool) -> None:
    """ConfigError (one line) unless `path` can be written as a file (folder=False) or used as a
    folder (folder=True; created if missing). Missing parent folders are fine if they can be created."""
    if path.strip() == "":
        raise ConfigError(f"{flag}: empty path")
    full = os.path.abspath(path)
    if os.path.exists(full):
        if folder and not os.path.isdir(full):
            raise ConfigError(f"{flag} {path} is a file; expected a folder")
        if not folder and os.path.isdir(full):
            raise ConfigError(f"{flag} {path} is a folder; expected a file path")
        if not os.access(full, os.W_OK):
            raise ConfigError(f"{flag} {path} is not writable")
        if folder:
            return
    parent = full if folder and os.path.isdir(full) else os.path.dirname(full)
    while not os.path.exists(parent):  # the nearest existing ancestor must be a writable folder
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"{flag} {path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: folder {parent} is not writable")
    _try_create(flag, path, parent, make_folder=parent != (full if folder else os.path.dirname(full)))


def _try_create(flag: str, path: str, parent: str, make_folder: bool) -> None:
    """Create and remove what writing `path` will create in `parent` (its first missing folder, or
    a file beside it): permission bits do not stop root, but /proc, /sys, read-only mounts and
    full disks do, and only trying tells."""
    try:
        if make_folder:
            os.rmdir(tempfile.mkdtemp(prefix=".stanza-probe-", dir=parent))
        else:
            fd, probe = tempfile.mkstemp(prefix=".stanza-probe-", dir=parent)
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        what = "a folder" if make_folder else "a file"
        raise ConfigError(f"{flag} {path}: cannot create {what} in {parent} ({e.strerror})") from None


_dataclass_init = TrainConfig.__init__


def _init(self, *, strategy: str | None = None, variant: Variant | None = None, **kw: Any) -> None:
    """TrainConfig(strategy=..., <its options>=..., <other fields>=...) or TrainConfig(variant=...,
    ...): options as keywords go into the Variant (checked there: one-line ConfigError naming the flag)."""
    owners = registry.option_names()
    options = {k: kw.pop(k) for k in list(kw) if k in owners}
    name = strategy or (variant.strategy if isinstance(variant, Variant) else "stanza")
    defaults = {k: registry.get(o).options_type().defaults()[k] for k, o in owners.items()}
    # an option at its flag's default is not given (the CLI passes every flag): only the others count
    options = {k: v for k, v in options.items() if owners[k] == name or v != defaults[k]}
    if variant is not None and not isinstance(variant, Variant):
        raise ConfigError(f"variant must be a stanza_core.variant.Variant, got {type(variant).__name__}")
    if variant is not None and strategy in (None, variant.strategy):
        variant = variant.replace(spell=_flag, **options) if options else variant
    else:
        variant = Variant.parse(strategy or "stanza", options, spell=_flag)
    _dataclass_init(self, variant=variant, **kw)


_init.__doc__ = TrainConfig.__doc__
TrainConfig.__init__ = _init
