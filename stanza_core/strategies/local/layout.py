"""`local`'s layout: one process, the LOCAL role."""
from __future__ import annotations

from ... import registry
from ...errors import ConfigError
from ...topology import LOCAL, Layout


class LocalLayout(Layout):
    def resolve(self, strategy, world_size, fc_workers, ps_shards, ps_servers, unit, name):
        if world_size != 1:
            others = ", ".join(s for s in registry.compared())
            raise ConfigError(f"strategy {strategy} runs in one process (1 {unit[:-1]}), got {world_size} {unit} "
                              f"(use one of {others})")
        return super().resolve(strategy, world_size, fc_workers, ps_shards, ps_servers, unit, name)

    def role(self, t, rank):
        return LOCAL
