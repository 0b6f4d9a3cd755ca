"""A strategy's program for any world size, from its folder: `strategies/<name>/schedule.py`
(a plug-in's beside its record) writes one rank's step, this module the whole program.

    doc = generate(cfg, world_size)        # cfg: a TrainConfig with --compute replay

A schedule module has one function, `rank_step(ctx, rank) -> build.Ops`: what `rank` does in one
step (after the first, whose buckets torch DDP has not yet rebuilt), as the strategy's engine
does it; `ctx` (Context) holds the configuration, the topology, the process groups and the
Workload (sim/compute.py: the replayed compute of the model's parts, traced). The generated
program equals the one the engine records (`--record-program`) operation for operation:
tests/dist/test_schedules.py runs both for every built-in strategy and the plug-in test strategy.
"""
from __future__ import annotations

import copy
import dataclasses
import importlib
from functools import cached_property
from typing import Any

from .. import registry, __version__
from ..batchnorm import BN_GLOBAL, bn_layers
from ..engine.config import TrainConfig
from ..topology import Topology
from . import program
from .compute import Workload


class NoSchedule(ValueError):
    """A strategy without a program generator, or options it does not generate: one line."""


def schedule_module(strategy: str):
    """The strategy's schedule module: `schedule` beside its performance model."""
    spec = registry.get(strategy)
    name = spec.model.rsplit(".", 1)[0] + ".schedule"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        raise NoSchedule(f"strategy {strategy} has no program generator ({name}: a schedule.py in its "
                         "folder); the simulator cannot time it") from None


@dataclasses.dataclass
class Context:
    """What a schedule module writes a rank's step from."""

    cfg: TrainConfig
    topo: Topology
    work: Workload
    groups: dict[str, list[int]]

    @property
    def options(self):
        return self.cfg.variant.options

    @property
    def b(self) -> int:
        """Samples per data worker."""
        return self.topo.worker_batch(self.cfg.global_batch)

    @property
    def bn_workers(self) -> int | None:
        """Data workers the batch-norm statistics are summed over (None: no "bn" group)."""
        return self.topo.data_workers if "bn" in self.groups else None

    @cached_property
    def cap_bytes(self) -> int:
        return int(self.cfg.bucket_mb * 2**20)

    def trace(self, part: str, b: int):
        """(forward, backward) events of `part` on b samples, made once per (part, b)."""
        key = (part, b)
        cache = self.__dict__.setdefault("_traces", {})
        if key not in cache:
            cache[key] = self.work.run(part, b, bn_workers=self.bn_workers)
        return cache[key]


def process_groups(cfg: TrainConfig, topo: Topology, model) -> dict[str, list[int]]:
    """The process groups a run of `cfg` makes (engine/train.py: the layout's, and "bn" where
    batch-norm statistics are global), with "world"."""
    groups = {"world": list(range(topo.world_size)), **topo.groups()}
    if cfg.bn_stats == BN_GLOBAL and topo.data_workers > 1 and bn_layers(model):
        groups["bn"] = topo.conv_ranks
    return groups


def generate(cfg: TrainConfig, world_size: int, steps: int = 1) -> dict[str, Any]:
    """The program of `cfg` on `world_size` ranks (dedicated servers included), `steps` steps."""
    if cfg.compute != "replay" or not cfg.replay_device:
        raise NoSchedule("a program is generated for replayed compute: expected compute='replay' and a replay_device")
    mod = schedule_module(cfg.strategy)
    topo = cfg.variant.topology(world_size, cfg.global_batch)
    work = Workload(cfg, topo.worker_batch(cfg.global_batch))
    ctx = Context(cfg, topo, work, process_groups(cfg, topo, work.model))
    per_rank = []
    for r in range(world_size):
        step = mod.rank_step(ctx, r).step()
        per_rank.append([copy.deepcopy(step) for _ in range(steps)])
    meta = {"strategy": cfg.strategy, "label": cfg.variant.label, "model": cfg.model, "image_size": cfg.image_size,
            "num_classes": cfg.num_classes, "global_batch": cfg.global_batch, "world_size": world_size,
            "options": cfg.variant.options.values(), "replay_device": cfg.replay_device,
            "device_row": work.rep.dev.name, "bucket_mb": cfg.bucket_mb, "bn_stats": cfg.bn_stats,
            "boundary": cfg.boundary, "steps": steps, "version": __version__}
    return program.document(source="generated", meta=meta, roles=[topo.role(r) for r in range(world_size)],
                            groups=ctx.groups, steps=per_rank)
