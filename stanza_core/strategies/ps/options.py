"""`ps`'s options: its shards, its dedicated servers, the overlapped push."""
from __future__ import annotations

import dataclasses

from ... import checks
from ...strategy_options import StrategyOptions


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options(StrategyOptions):
    ps_shards: int = 0  # parameter-server shards S (0: one per rank)
    ps_servers: int = 0  # ps: dedicated server ranks holding the shards, no compute (0: colocated shards)
    ps_overlap: bool = False  # ps: push each gradient bucket as the backward produces it (wait-free backprop)

    def check(self, spell=str) -> None:
        checks.positive_int(spell("ps_shards"), self.ps_shards, 0)
        checks.positive_int(spell("ps_servers"), self.ps_servers, 0)
        if not isinstance(self.ps_overlap, bool):
            raise checks.ConfigError(f"{spell('ps_overlap')} must be true or false, got {self.ps_overlap!r}")

    def label_parts(self) -> list[tuple[str, str]]:
        """S = dedicated parameter-server nodes (0: shards colocated with the workers), overlap = each
        gradient bucket pushed as the backward produces it."""
        out = []
        if self.ps_servers:
            out.append(("S", str(self.ps_servers)))
        if self.ps_overlap:
            out.append(("overlap", ""))
        return out
