"""How a replayed configuration's D is chosen, stated once: one frozen value from a notebook's
parameters down to the plan.

    DilationRule(floor=20.0, engine=True)   D at least 20, raised for the links and the engine's own seconds
    DilationParams                          the notebook parameters that make one (min_dilation, replay_engine)

runs.plan.replayed_plan applies it: D = max(floor, perf.replay_dilation(target, N, engine_s, ...)),
the engine seconds measured once per configuration when `engine` holds (else only the links
raise D). spec.MeasureSpec, replayed.ReplaySet and store.Point hold one; the replay device is not
part of it (each RunConfig carries its own replay_device, what its compute follows).
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from .. import checks


@dataclasses.dataclass(frozen=True, kw_only=True)
class DilationRule:
    """The smallest D and whether the engine term may raise it, checked on creation (one-line
    ValueError). Its plain form (`to_dict`) keeps the names results JSONs have always had."""

    floor: float = 1.0  # the smallest D (the notebooks' min_dilation); the plan's own D is at least this
    engine: bool = True  # raise each configuration's D for the engine's own seconds (measured once, cached)

    def __post_init__(self):
        checks.number("min_dilation", self.floor, above=0)
        if not isinstance(self.engine, bool):
            raise ValueError(f"replay_engine must be true or false, got {self.engine!r}")

    def to_dict(self) -> dict[str, Any]:
        """{"min_dilation", "engine"}: MeasureSpec.to_dict's flat fields, as results JSONs hold them."""
        return {"min_dilation": self.floor, "engine": self.engine}


LINKS_ONLY = DilationRule(engine=False)  # no engine term: D from the links and the floor alone


@dataclasses.dataclass(kw_only=True)
class DilationParams:
    """The notebook parameters of the rule (ReplayParams and TodayParams inherit them; the
    `parameters` cells of notebooks 03, 04, 05, 07 and 09 name them alike). A renamed parameter
    stays in RENAMED (old name -> new name, what it is): nbtools.experiment_params refuses it in
    one line, where papermill would pass it on unseen."""

    # defaults: the rule's own (DilationRule's class attributes), stated there once
    min_dilation: float = DilationRule.floor  # the smallest D (runs.plan decides each configuration's own)
    replay_engine: bool = DilationRule.engine  # raise D per configuration for the engine's own seconds
    RENAMED: ClassVar[dict[str, tuple[str, str]]] = {
        # min_dilation's former name (CHANGELOG.md; RunConfig.dilation, not renamed, is a run's actual D)
        "dilation": ("min_dilation", "the smallest D; each run's own D comes from its plan")}

    @property
    def dilation_rule(self) -> DilationRule:
        """The rule these parameters state (checked: a one-line ValueError)."""
        return DilationRule(floor=self.min_dilation, engine=self.replay_engine)
