"""`ddp`: torch's DistributedDataParallel, the paper's other baseline. This module is its registry
record; engine.py its engine, model.py its performance model."""
from ... import registry

SPEC = registry.register(registry.StrategySpec(
    name="ddp", summary="every rank trains the whole model; bucketed gradient allreduce overlaps the backward",
    roles=("worker",), color="#2ca02c", engine=f"{__name__}.engine:DDP", model=f"{__name__}.model",
    simplicity=0, baseline=True, bucketed=True, fan_in=False,
    exchange="allreduce", order=2))
