"""Replayed compute: every layer's arithmetic replaced by a wait of D x its time on a target device.

    torchrun ... -m stanza_core.train --compute replay --replay-device v100 --dilation 40

Every rank still builds the real model (real parameter and gradient tensors) and every tensor
still crosses the network for real; only the arithmetic goes. Each leaf module's forward becomes
`_ReplayFn`: it waits D x (the layer's share of its part's time on the target device) and
returns an uninitialised tensor of the true output shape (no memory is touched, so VGG-16's
huge activations at 224x224 cost neither CPU nor RSS). Its backward waits D x the layer's
backward time and delivers parameter gradients *through autograd*, so the post-accumulate-grad
hooks, DDP's buckets and stanza's GradBuckets fire at the moments they would on that device;
activation gradients are expanded zeros of the true shape. The optimizer step is replayed the
same way (DeviceProfile.update_s_per_param x parameters stepped).

Per-layer times. With a device-table row or a DeviceProfile file, they come from where the
performance model takes them (`perf.model.layer_shares` and `DeviceProfile.time_s`), so model and
replay agree on compute by construction and differ only by what the real network and engine
do; parameterless layers (ReLU, pooling, dropout) are replayed with no wait: their time is folded
into the parameterised layers' FLOP shares, as in the model. With a measured per-layer record
(`--replay-device h200-measured`, or a `perf calibrate` OUT.layers.json) every layer waits its
own measured time instead, at the batch of each call (perf/records.py: interpolated between
measured batches; a module called c times per forward waits 1/c of its record time per call).
Values are meaningless (losses are not reported as losses; --save is refused).
Batch-norm layers with global statistics (--bn-stats global) still make their four allreduces of
C values per step (of zeros), so the bn_stats bytes are those of a real step.

Measured jitter (`--replay-jitter PATH.json`). A device profile gives each step the same compute
time, while real ranks that share cores (the emulated cluster's CPU runs) compute each step a
little faster or slower, and when ranks post their messages decides how they queue on the
links. The file holds measured factors, one set per step of a real run of the same
configuration and per rank: {"source": str, "steps": [[{"fwd": f, "bwd": f, "update": f} per
rank] per step]}, each a phase's time in that step over its mean over the run (so they keep the
profile's mean and bring only the spread; benchmarks/replay_fidelity.py --jitter writes them).
Step t of every rank takes the factors of the same measured step (a permutation of the steps by
--seed, the same on every rank), so ranks that were slow together stay slow together.

How a wait waits (`--replay-wait`). `sleep` (the default) releases the CPU: the compute it
stands for runs on an accelerator, and the host is free for the network stack meanwhile. `spin`
busy-waits instead, holding a core as CPU compute does: for replaying a profile of this machine's
own CPU against real CPU compute (the fidelity anchor, benchmarks/replay_fidelity.py), where the
cores the compute takes are the ones the emulated cluster's network stack (the transport threads,
TCP, the shaper) also needs. `cpu` busy-waits until the waiting thread has had the wait's time
of CPU (time.thread_time), so, like CPU arithmetic, it lasts longer on the wall clock whenever
other processes or the network stack take its core: the profile then gives each piece's CPU
time, alone on a core, and the contention of the run decides the wall time.

Glossary: D = dilation, the factor by which replayed compute (and, to keep the ratio, the
emulated link rate: perf.emulated_bandwidth) is slowed down; target time = measured time / D.
"""
from __future__ import annotations

import contextvars
import copy
import json
import math
import random
import time

import torch
import torch.nn as nn

from .config import ConfigError, TrainConfig
from ..split import SplitError

_ATTR = "_stanza_replay"


def load_device(spec: str, profile, batch: float | None = None):
    """The device named by --replay-device, resolved once (perf.device_profile -> perf.Device:
    its DeviceProfile, its source, and a measured record's per-layer times): a device-table
    row, a measured device (h200-measured, ...), or a PATH.json holding a DeviceProfile, a
    per-layer record or a timed Profile. `batch`: samples per data worker. Bad input:
    ConfigError, one line."""
    from ..perf import device_profile  # perf: ~125 more modules (tabulate, torch's flop counter); only a replayed run needs it

    try:
        return device_profile(spec, profile, batch, what="--replay-device")
    except ValueError as e:
        raise ConfigError(str(e).splitlines()[0]) from None


JITTER_PHASES = ("fwd", "bwd", "update")


def load_jitter(path: str, world: int) -> list[list[dict[str, float]]]:
    """The measured per-step factors of --replay-jitter (module docstring), checked: a list of
    steps, each with one {"fwd", "bwd", "update"} of positive numbers per rank of `world`. Bad
    input: ConfigError, one line."""

    what = f"--replay-jitter {path}"
    try:
        with open(path) as fh:
            steps = json.load(fh)["steps"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{what}: expected a JSON object with a list of steps ({type(e).__name__}: {e})") from None
    if not isinstance(steps, list) or not steps:
        raise ConfigError(f"{what}: expected a non-empty list of steps")
    for i, step in enumerate(steps):
        if not isinstance(step, list) or len(step) != world:
            raise ConfigError(f"{what}: step {i} holds {len(step) if isinstance(step, list) else 'no list of'} "
                              f"ranks' factors; expected {world} (the run's world size)")
        for r, f in enumerate(step):
            ok = isinstance(f, dict) and all(isinstance(f.get(k), (int, float)) and not isinstance(f[k], bool)
                                             and math.isfinite(f[k]) and f[k] > 0 for k in JITTER_PHASES)
            if not ok:
                raise ConfigError(f"{what}: step {i}, rank {r}: expected positive finite numbers "
                                  f"{', '.join(JITTER_PHASES)}, got {f!r}")
    return steps


def prepare(cfg: TrainConfig, model: nn.Module, batch: int, rank: int = 0, world: int = 1) -> "Replayer | None":
    """Install replay on `model` when cfg.compute == "replay" (before any process group: every
    error here is one line). `batch`: samples per data worker (the profile's split point)."""
    if cfg.compute != "replay":
        return None
    from ..anatomy import profile_model  # anatomy: torch's flop counter (~80 modules); only a replayed run needs it
    try:  # FLOPs per layer (the shares) and the CONV|FC parts, as perf.predict sees them
        profile = profile_model(model, (3, cfg.image_size, cfg.image_size), batch, name=cfg.model,
                                boundary=cfg.boundary)
    except SplitError as e:
        raise ConfigError(f"--compute replay: {e}") from None
    dev = load_device(cfg.replay_device, profile, batch)
    rep = Replayer(model, profile, dev.profile, cfg.dilation, measured=dev.measured, source=dev.source)
    rep.mode = cfg.replay_wait
    if cfg.replay_jitter:
        rep.set_jitter(load_jitter(cfg.replay_jitter, world), rank, cfg.seed, cfg.replay_jitter)
    setattr(model, _ATTR, rep)
    return rep


def replayer_of(model: nn.Module) -> "Replayer | None":
    return getattr(model, _ATTR, None)


class _Layer:
    """One replayed leaf module: its part, its share of the part's time, its parameters."""

    def __init__(self, rep: "Replayer", name: str, module: nn.Module, meta: nn.Module):
        self.rep, self.name, self.meta = rep, name, meta
        self.part, self.share = rep.shares.get(name, (None, 0.0))
        self.calls = rep.calls.get(name, 1)  # forward calls per model forward (a reused ReLU: 3)
        self.module = module
        self.shapes: dict[tuple, tuple] = {}  # input shape per sample -> output shape per sample
        self.order: list[str] | None = None  # parameter names in the real backward's order (probe)

    @property
    def params(self) -> tuple[nn.Parameter, ...]:
        """The module's parameters as they are now (a stanza rank releases the part it does not
        train after replay is installed: no reference to the released tensors is kept here), in
        the order the real layer's backward delivers their gradients (see `probe`)."""
        own = dict(self.module.named_parameters(recurse=False))
        return tuple(own[n] for n in self.order if n in own) if self.order else tuple(own.values())

    def probe(self, x: torch.Tensor) -> tuple:
        """The output shape for input x, and (once) the order in which the real layer's backward
        hands its parameters their gradients: both from the module's own forward and backward on
        meta tensors (no arithmetic, no memory). A Linear's bias gradient comes first (its weight's
        goes through a transpose); a convolution's weight comes first. Replayed backward hands them
        over in that order, so the hooks that follow (DDP's buckets, GradBuckets) fire in the
        real order when a bucket boundary falls between a layer's parameters."""
        key = tuple(x.shape[1:])
        if key not in self.shapes:
            def probe():  # in an empty context: no sample keys, so dropout draws no CPU masks
                params = list(self.meta.named_parameters(recurse=False))
                learn = self.order is None and any(p.requires_grad for _, p in params)
                with torch.enable_grad() if learn else torch.no_grad():
                    xm = torch.empty(x.shape, device="meta", dtype=x.dtype, requires_grad=learn and x.is_floating_point())
                    out = self.meta(xm)
                    if learn:
                        order = []
                        hooks = [p.register_post_accumulate_grad_hook(lambda _p, n=n: order.append(n))
                                 for n, p in params if p.requires_grad]
                        try:
                            out.sum().backward()
                        except RuntimeError:  # a layer meta cannot differentiate: declaration order
                            order = []
                        finally:
                            for h in hooks:
                                h.remove()
                            for _, p in params:
                                p.grad = None
                        rest = [n for n, _ in params if n not in order]
                        self.order = order + rest
                    return tuple(out.shape[1:])
            self.shapes[key] = contextvars.Context().run(probe)
        return (x.shape[0], *self.shapes[key])

    def out_shape(self, x: torch.Tensor) -> tuple:
        return self.probe(x)

    @staticmethod
    def param_grad(p: nn.Parameter) -> torch.Tensor:
        """What backward returns for p: the very tensor p.grad is bound to (DDP's bucket view, a
        ps worker's slice of its flat gradient, a stanza GradBucket's view), handed over with p.grad
        cleared, so AccumulateGrad takes it as the new p.grad without a copy or an add, and the
        hooks that follow (DDP's, post-accumulate-grad) find the gradient in its bucket: no step
        touches P floats for it. Replay never clears gradients (its zero_grad is a no-op), so this
        binding holds across steps. A parameter with no gradient yet gets new, untouched storage
        (DDP's first backward then copies it into its bucket and binds p.grad there)."""
        g = p.grad
        if g is None:
            return torch.empty_like(p)
        p.grad = None
        return g.view_as(g)  # a new view: held by no one else (DDP keeps its own reference to g)

class _ReplayFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, layer: _Layer, x: torch.Tensor, *params):
        ctx.layer, ctx.x = layer, (x.shape, x.dtype, x.device)
        layer.rep.compute(layer, "fwd", x.shape[0])
        return torch.empty(layer.out_shape(x), dtype=x.dtype, device=x.device)

    @staticmethod
    def backward(ctx, grad):
        layer, (shape, dtype, device) = ctx.layer, ctx.x
        layer.rep.compute(layer, "bwd", shape[0])
        gx = torch.zeros((), dtype=dtype, device=device).expand(shape) if ctx.needs_input_grad[1] else None
        grads = [layer.param_grad(p) if ctx.needs_input_grad[2 + i] else None for i, p in enumerate(layer.params)]
        return (None, gx, *grads)


class _ReplayedBatchStats(torch.autograd.Function):
    """A global-statistics batch-norm layer's traffic, without its arithmetic: the two allreduces
    of C values of its forward (sum, centred sum of squares) and the two of its backward (their
    gradients), as stanza_core.batchnorm sends them, so the bn_stats bytes are those of a real step."""

    @staticmethod
    def forward(ctx, out: torch.Tensor, module: nn.Module):
        ctx.module = module
        for _ in range(2):
            module._stanza_reduce(out.new_zeros(module.num_features))
        return torch.empty_like(out)  # a new tensor, not a view: ResNet adds into it in place

    @staticmethod
    def backward(ctx, grad):
        for _ in range(2):
            ctx.module._stanza_reduce(grad.new_zeros(ctx.module.num_features))
        return grad, None


class Replayer:
    """Waits instead of arithmetic, for one rank. `armed` is off while strategies set up (their
    shape probes wait nothing); the training loop arms it at each step (`begin_step`)."""

    def __init__(self, model: nn.Module, profile, dev, dilation: float, *, measured=None, source: str = "given"):
        """`dev`: the DeviceProfile (parts, optimizer); `measured`: a perf.MeasuredLayers whose
        per-layer times each layer waits instead of its share of the part (see the docstring)."""
        from ..perf.model import layer_shares  # perf: ~125 more modules (tabulate, torch's flop counter); only a replayed run needs it

        self.profile, self.dev, self.dilation = profile, dev, float(dilation)
        self.measured, self.source = measured, source
        self.calls = {r.name: max(1, r.calls) for r in profile.layers}
        self.shares = {}  # leaf name -> (part, share of the part's time): the model's own shares
        if measured is None:
            for part in ("conv", "fc"):
                units = layer_shares(profile, part)
                for i, (name, _, share) in enumerate(units):
                    if name is None:  # no layer rows: the whole part on its last parameterised leaf
                        name = [r.name for r in profile.layers if r.part == part and r.params][-1]
                    self.shares[name] = (part, share)
        self.extrapolated: set[float] = set()  # batches of calls outside the measured records'
        self.trace: list | None = None  # a list: every call's (layer, phase, batch, seconds) (tests)
        self.armed, self.waited_s, self.debt_s = False, 0.0, 0.0
        self.mode = "sleep"  # --replay-wait: sleep | spin | cpu (module docstring)
        self.jitter: list[dict[str, float]] | None = None  # this rank's factors, in the order steps take them
        self.jitter_source: str | None = None
        self.factors = dict.fromkeys(JITTER_PHASES, 1.0)  # the current step's
        self.recorder = None  # a comm.record.Recorder: every wait is also reported there (undilated)
        memo = {id(t): torch.empty_like(t, device="meta") for t in model.buffers()}
        memo.update({id(p): nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
                     for p in model.parameters()})  # parameters stay parameters: probe learns their order
        meta = copy.deepcopy(model, memo)  # same modules, meta tensors: output shapes for free
        meta_of = dict(meta.named_modules())
        self.layers = []
        for name, module in model.named_modules():
            if name and not list(module.children()):
                layer = _Layer(self, name, module, meta_of[name])
                module.forward = self._forward_of(layer, module)  # instance attribute: nn.Module.__call__ uses it
                self.layers.append(layer)

    @staticmethod
    def _forward_of(layer: _Layer, module: nn.Module):
        def forward(x, *rest, **kw):
            if rest or kw or not isinstance(x, torch.Tensor):
                raise RuntimeError(f"replay: layer {layer.name} takes more than one tensor; not supported")
            layer.probe(x)  # the output shape, and the parameters' gradient order (first call)
            out = _ReplayFn.apply(layer, x, *layer.params)
            # batch norm switched to global statistics (after this replay was installed): its
            # allreduces still cross the network, as in a real step
            if module.training and getattr(module, "_stanza_reduce", None) is not None:
                out = _ReplayedBatchStats.apply(out, module)
            return out
        return forward

    def wait(self, seconds: float):
        """Wait `seconds` by --replay-wait's rule (sleep: release the CPU; spin: busy-wait them on
        the wall clock; cpu: busy-wait until this thread has run them). Overshoot is carried as
        debt and taken off the next waits, so the sum of waits tracks the sum of replayed times."""
        if not self.armed or seconds <= 0 or self.mode == "none":  # none: a trace of the waits only (sim/compute.py)
            return
        want = seconds - self.debt_s
        if want <= 0:
            self.debt_s = -want
            return
        clock = time.thread_time if self.mode == "cpu" else time.perf_counter  # what `seconds` counts
        t0, c0 = time.perf_counter(), clock()
        if self.mode == "sleep":
            time.sleep(want)
        else:  # spin, cpu: hold the CPU until the clock has advanced `want`
            while clock() - c0 < want:
                pass
        self.debt_s = clock() - c0 - want
        self.waited_s += time.perf_counter() - t0

    def target_seconds(self, layer: _Layer, phase: str, batch: int) -> float:
        """The target device's time of one call of `layer` in `phase` on `batch` samples (D = 1)."""
        if self.measured is not None:
            if self.measured.extrapolated(batch):
                self.extrapolated.add(batch)
            return self.measured.call_s(layer.name, phase, batch) / layer.calls
        if layer.part is None or layer.share <= 0:
            return 0.0
        return layer.share * self.dev.time_s(layer.part, phase, batch)

    def seconds(self, layer: _Layer, phase: str, batch: int) -> float:
        """D x the target device's time of one call of `layer` in `phase` on `batch` samples."""
        return self.dilation * self.target_seconds(layer, phase, batch)

    def compute(self, layer: _Layer, phase: str, batch: int):
        base = self.target_seconds(layer, phase, batch)
        seconds = self.dilation * base * self.factors[phase]
        if self.trace is not None and self.armed:
            self.trace.append((layer.name, phase, batch, seconds))
        if self.recorder is not None and self.armed:
            self.recorder.compute(layer.name, phase, base)
        if seconds > 0:
            self.wait(seconds)

    def set_jitter(self, steps: list[list[dict[str, float]]], rank: int, seed: int, source: str):
        """Measured factors (load_jitter): step t takes measured step order[t % len(steps)], the
        same permutation (by `seed`) on every rank."""
        order = list(range(len(steps)))
        random.Random(seed).shuffle(order)
        self.jitter = [{k: float(steps[i][rank][k]) for k in JITTER_PHASES} for i in order]
        self.jitter_source = source

    def begin_step(self, t: int = 0):
        self.armed, self.debt_s = True, 0.0
        if self.jitter is not None:
            self.factors = self.jitter[t % len(self.jitter)]
        if self.recorder is not None:
            self.recorder.compute("step", "overhead", self.dev.step_overhead_s)
        self.wait(self.dilation * self.dev.step_overhead_s)

    def replay_optimizer(self, optimizer: torch.optim.Optimizer):
        """optimizer.step() becomes a wait of D x update_s_per_param x the parameters it steps, and
        optimizer.zero_grad() does nothing (no optimizer state is ever made)."""
        n = sum(p.numel() for g in optimizer.param_groups for p in g["params"])
        base = self.dev.update_s_per_param * n
        seconds = self.dilation * base

        def step(closure=None):
            if self.recorder is not None and self.armed:
                self.recorder.compute("optimizer", "update", base)
            self.wait(seconds * self.factors["update"])

        optimizer.step = step
        # gradients stay bound to their buffers (param_grad): clearing them is host work with no
        # effect on what crosses the network
        optimizer.zero_grad = lambda set_to_none=True: None

    def describe(self) -> dict:
        waits = (lambda layer: layer.name in self.measured.records[0].fwd) if self.measured is not None else \
            (lambda layer: layer.share > 0)
        out = {"device": self.dev.name, "source": self.source, "dilation": self.dilation, "profile": self.dev.to_dict(),
               "replayed_layers": sum(1 for layer in self.layers if waits(layer))}
        out["wait"] = self.mode
        if self.jitter is not None:
            out["jitter"] = {"file": self.jitter_source, "steps": len(self.jitter),
                             **{k: [min(f[k] for f in self.jitter), max(f[k] for f in self.jitter)]
                                for k in JITTER_PHASES}}
        if self.measured is not None:
            out["measured"] = {"layers": "each layer waits its own measured time", "batches": self.measured.batches,
                               "extrapolated_batches": sorted(self.extrapolated)}
        return out
