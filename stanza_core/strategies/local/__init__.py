"""`local`: one process, the whole global batch, no communication: the oracle every strategy
must equal. This module is its registry record; engine.py its engine, model.py its model."""
from ... import registry

SPEC = registry.register(registry.StrategySpec(
    name="local", summary="one process, the whole global batch: the oracle every strategy must equal",
    roles=("local",), color="#7f7f7f", engine=f"{__name__}.engine:Local", model=f"{__name__}.model",
    layout=f"{__name__}.layout:LocalLayout",
    compared=False, simplicity=0, order=0))
