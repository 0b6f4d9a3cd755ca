"""`allreduce_after`'s one option: the flat gradient's allreduce in this many pieces."""
from __future__ import annotations

import dataclasses

from stanza_core import checks
from stanza_core.strategy_options import StrategyOptions


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options(StrategyOptions):
    flat_chunks: int = 1  # allreduce_after: the flat gradient allreduced in this many pieces, one after another

    def check(self, spell=str) -> None:
        checks.positive_int(spell("flat_chunks"), self.flat_chunks)

    def label_parts(self) -> list[tuple[str, str]]:
        return [("chunks", str(self.flat_chunks))] if self.flat_chunks > 1 else []
