"""A strategy added from outside the package, as a plug-in folder: `allreduce_after`, data
parallelism with one allreduce of the whole flat gradient after the backward (no buckets, no
overlap), sent in `--flat-chunks` pieces one after another.

This module is its record; engine.py its engine, model.py its performance model, options.py its
one option. Import it, or name it in STANZA_PLUGINS for a torchrun job. Nothing else in the
workbench names it: tests/dist/test_toy_strategy.py shows the CLI, the config checks, the
performance model, the optimiser, the explorer's diagram and the figures taking it, and its
option, from the registry."""
from stanza_core import registry

NAME = "allreduce_after"

SPEC = registry.StrategySpec(
    name=NAME, summary="every rank trains the whole model; one allreduce of the whole gradient after the backward",
    roles=("worker",), color="#17becf", engine=f"{__name__}.engine:AllreduceAfter", model=f"{__name__}.model",
    options=("flat_chunks",), options_class=f"{__name__}.options:Options", exchange="allreduce", simplicity=0)
registry.register(SPEC)
