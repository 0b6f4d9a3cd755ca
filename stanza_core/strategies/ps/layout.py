"""`ps`'s layout (topology.py's docstring): S shards colocated with the first S data workers, or
S dedicated server ranks (the PS_SERVER role) after the N data workers."""
from __future__ import annotations

from ...errors import ConfigError
from ...topology import PS_SERVER, WORKER, Layout


class PSLayout(Layout):
    def resolve(self, variant, world_size, unit, name):
        ps_shards, ps_servers = variant.options.ps_shards, variant.options.ps_servers
        servers, shards = name("ps_servers"), name("ps_shards")
        if ps_servers:
            if ps_servers >= world_size:
                raise ConfigError(f"{servers} {ps_servers} leaves no data worker among {world_size} {unit} "
                                  f"(data workers + servers); expected S <= {world_size - 1}")
            if ps_shards not in (0, ps_servers):
                raise ConfigError(f"{shards} {ps_shards} with {servers} {ps_servers}: each dedicated server "
                                  f"holds one shard; leave {shards} unset or set it to {ps_servers}")
            return 0, ps_servers
        ps_shards = ps_shards or world_size
        if not 1 <= ps_shards <= world_size:
            raise ConfigError(f"{shards} {ps_shards} exceeds the {world_size} {unit} that serve them; "
                              f"expected 1..{world_size} (one shard per {unit[:-1]} at most)")
        return 0, ps_shards

    def role(self, t, rank):
        return PS_SERVER if rank >= t.world_size - t.ps_servers else WORKER
