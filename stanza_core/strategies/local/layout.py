"""`local`'s layout: one process, the LOCAL role."""
from __future__ import annotations

from ... import registry
from ...errors import ConfigError
from ...topology import LOCAL, Layout


class LocalLayout(Layout):
    def resolve(self, variant, world_size, unit, name):
        strategy = variant.strategy
        if world_size != 1:
            others = ", ".join(s for s in registry.compared())
            raise ConfigError(f"strategy {strategy} runs in one process (1 {unit[:-1]}), got {world_size} {unit} "
                              f"(use one of {others})")
        return super().resolve(variant, world_size, unit, name)

    def role(self, t, rank):
        return LOCAL
