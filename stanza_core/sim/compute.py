"""What a rank computes in a step, as the engine's replayed compute does it, without running it:
the building block of every strategy's program generator (strategies/<name>/schedule.py).

    model = Workload(cfg)                       # a TrainConfig with --compute replay (no process group)
    model.forward("conv", b) -> [(layer, seconds), ...]
    model.backward("conv", b) -> [("compute", layer, seconds) | ("ready", k) | ("bn", bytes), ...]

The model is built on the meta device and replay (engine/replay.py) is installed on it exactly as
`train.prepare` installs it for a rank (the same profile, split, device profile and per-call
batch), then its forward and backward run on meta tensors with the waits turned into a trace:
the same layers, in the same order, with the same seconds (bit for bit) as a recorded run's
compute, and the moment each parameter's gradient is final (`("ready", k)`, k its index in the
part's `parameters()` order) from the post-accumulate-grad hooks the engine's buckets use.
A global-statistics batch-norm layer's allreduces appear as `("bn", bytes)` where replay makes
them (two after its forward, two before its backward).
"""
from __future__ import annotations

from typing import Any

import torch

from ..batchnorm import BN_GLOBAL, bn_layers, use_global_batch_stats
from ..engine import replay
from ..engine.config import TrainConfig
from ..models import get_model
from ..split import split_model


class Workload:
    """One configuration's model under replayed compute (see the module docstring)."""

    def __init__(self, cfg: TrainConfig, batch: int):
        """`cfg`: the run's TrainConfig (--compute replay); `batch`: samples per data worker, what
        train.prepare profiles and splits at."""
        self.cfg, self.batch = cfg, batch
        self.model = get_model(cfg.model, cfg.num_classes, device="meta")
        self.split = None
        if cfg.variant.spec.split:
            self.split = split_model(self.model, cfg.boundary, input_shape=(3, cfg.image_size, cfg.image_size),
                                     batch_size=batch)
        replay.prepare(cfg, self.model, batch)
        self.rep = replay.replayer_of(self.model)
        self.rep.mode = "none"  # nothing waits: every compute is traced instead
        self.events: list[tuple] = []
        rep, wait = self.rep, self.rep.compute

        def compute(layer, phase, b):  # what replay waits, in the order it waits it
            if rep.armed and (base := rep.target_seconds(layer, phase, b)) > 0:
                self.events.append(("compute", layer.name, phase, base))
            return wait(layer, phase, b)

        rep.compute = compute
        self.model.train()

    # -- parts -----------------------------------------------------------------------------------
    def part(self, name: str) -> torch.nn.Module:
        """"model" (the whole model), "conv" or "fc" (the split's parts)."""
        if name == "model":
            return self.model
        if self.split is None:
            raise ValueError(f"{self.cfg.strategy} does not split the model: no part {name!r}")
        return self.split.conv if name == "conv" else self.split.fc

    def params(self, name: str) -> list[torch.nn.Parameter]:
        return list(self.part(name).parameters())

    def update_seconds(self, n_params: int) -> float:
        """The optimizer step over n parameters on the device profile (replay_optimizer's wait)."""
        return self.rep.dev.update_s_per_param * n_params

    @property
    def step_overhead_s(self) -> float:
        return self.rep.dev.step_overhead_s

    @property
    def boundary_shape(self) -> tuple[int, ...]:
        return tuple(self.split.boundary_shape)

    # -- traces ------------------------------------------------------------------------------------
    def _input(self, name: str, b: int) -> torch.Tensor:
        if name == "fc":
            return torch.empty((b, *self.split.boundary_shape), device="meta", requires_grad=True)
        return torch.empty((b, 3, self.cfg.image_size, self.cfg.image_size), device="meta")

    def run(self, name: str, b: int, *, bn_workers: int | None = None) -> tuple[list[tuple], list[tuple]]:
        """(forward events, backward events) of one forward and backward of part `name` on b
        samples: ("compute", layer, phase, seconds) for each wait over 0 s, ("ready", k) when
        parameter k of the part is final, ("bn", bytes) for a batch-norm allreduce among
        `bn_workers` data workers (global statistics)."""
        part = self.part(name)
        if bn_workers is not None and bn_layers(part) and self.cfg.bn_stats == BN_GLOBAL:
            use_global_batch_stats(part, lambda t: self.events.append(("bn", t.numel() * t.element_size())),
                                   bn_workers)
        params = list(part.parameters())
        hooks = [p.register_post_accumulate_grad_hook(lambda _p, k=k: self.events.append(("ready", k)))
                 for k, p in enumerate(params) if p.requires_grad]
        try:
            self.rep.armed = True
            self.events = []
            out = part(self._input(name, b))
            fwd, self.events = self.events, []
            out.sum().backward()
            bwd, self.events = self.events, []
        finally:
            self.rep.armed = False
            for h in hooks:
                h.remove()
            for p in params:
                p.grad = None
        return fwd, bwd


def config_for(meta: dict[str, Any], variant, world_size: int) -> TrainConfig:
    """The TrainConfig a recorded run had, from a generator's inputs (replayed compute)."""
    return TrainConfig(variant=variant, model=meta["model"], num_classes=meta["num_classes"],
                       image_size=meta["image_size"], global_batch=meta["global_batch"], compute="replay",
                       replay_device=meta["replay_device"], bucket_mb=meta.get("bucket_mb", 25.0),
                       bn_stats=meta.get("bn_stats", BN_GLOBAL), boundary=meta.get("boundary"), steps=2, warmup=1)
