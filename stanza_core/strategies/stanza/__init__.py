"""`stanza`: layer separation, N - k CONV workers and k FC workers. This module is its registry
record; engine.py its engine (pipeline.py: hybrid FC workers, micro-batches, compressed
traffic), model.py its performance model."""
from ... import registry

SPEC = registry.register(registry.StrategySpec(
    name="stanza", summary="CONV workers train the CONV body, FC workers the FC head; activations and their "
                           "gradients cross the boundary, FC parameters never move",
    roles=("conv_worker", "fc_worker"), color="#9467bd", engine=f"{__name__}.engine:Stanza",
    model=f"{__name__}.model", options_class=f"{__name__}.options:Options",
    bare_pieces=f"{__name__}.opcount:bare_pieces",
    layout=f"{__name__}.layout:StanzaLayout",
    options=("fc_workers", "fc_conv_share", "micro_batches", "boundary_dtype", "grad_compression"), simplicity=2,
    bucketed=True, split=True, exchange="layer_separation", order=3))
