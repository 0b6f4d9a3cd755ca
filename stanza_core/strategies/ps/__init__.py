"""`ps`: the paper's baseline, a sharded parameter server. This module is its registry record;
engine.py its engine, model.py its performance model."""
from ... import registry

SPEC = registry.register(registry.StrategySpec(
    name="ps", summary="every worker trains the whole model; gradients pushed to sharded parameter servers, "
                       "parameters pulled back",
    roles=("worker", "ps_server"), color="#ff7f0e", engine=f"{__name__}.engine:ParameterServer",
    model=f"{__name__}.model", options_class=f"{__name__}.options:Options",
    bare_pieces=f"{__name__}.opcount:bare_pieces",
    layout=f"{__name__}.layout:PSLayout",
    options=("ps_shards", "ps_servers", "ps_overlap"), simplicity=1, baseline=True, bucketed="ps_overlap",
    exchange="parameter_server", order=1))
