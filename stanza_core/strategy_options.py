"""What a strategy's options object is: a frozen dataclass in its folder (`<name>/options.py`,
named by its record's `options_class`), one field per option, with its default, its checks and
its parts of a configuration's label. The options object rides inside a variant.Variant (the
strategy with its options), which TrainConfig, RunConfig and perf's Prediction each hold whole.

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Options(StrategyOptions):
        pieces: int = 1  # the gradient allreduced in this many pieces

        def check(self, spell=str):
            checks.positive_int(spell("pieces"), self.pieces)

        def label_parts(self):
            return [("pieces", str(self.pieces))] if self.pieces > 1 else []

The field's comment is its `--pieces` help in the training CLI. `UNSET` says how an option
reads under another strategy, where that differs from its default (k reads 0 outside stanza).
This module imports nothing of the workbench: it sits at the bottom of the import graph, beside
the registry.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, ClassVar


@dataclasses.dataclass(frozen=True, kw_only=True)
class StrategyOptions:
    """A strategy's options (none: this class itself, for a strategy that has no option)."""

    UNSET: ClassVar[dict[str, Any]] = {}  # an option's value under another strategy, where not its default
    CHOICES: ClassVar[dict[str, tuple]] = {}  # an option's allowed values, where it has a fixed set (the CLI lists them)

    def check(self, spell=str) -> None:
        """One-line error (ValueError or ConfigError) unless every option holds a valid value;
        `spell` words an option's name (`str`: the Python API's, or the CLI's flag)."""

    def label_parts(self) -> list[tuple[str, str]]:
        """(name, value) parts of a configuration's label and key ("S", "2"; "overlap", "")."""
        return []

    def check_model(self, model, name: str, *, bn_sync: bool, spell=str) -> None:
        """One-line error where an option does not fit the built model (`name`: its name), checked
        before any process group forms; `bn_sync`: batch-norm statistics over the global batch."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {f.name: f.default for f in dataclasses.fields(cls)}

    @classmethod
    def unset(cls) -> dict[str, Any]:
        """How each option reads under another strategy (its default unless UNSET says)."""
        return {**cls.defaults(), **cls.UNSET}

    @classmethod
    def of(cls, values: dict[str, Any]) -> "StrategyOptions":
        """The options among `values` (others ignored; missing ones at their defaults), unchecked."""
        return cls(**{k: v for k, v in values.items() if k in cls.names()})

    def values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names()}

    def given(self) -> dict[str, Any]:
        """The options set away from their defaults."""
        defaults = self.defaults()
        return {k: v for k, v in self.values().items() if v != defaults[k]}

    @classmethod
    def help(cls, name: str) -> str:
        """An option's comment in its class's source (the training CLI's help for its flag)."""
        for klass in cls.__mro__:
            try:
                lines = inspect.getsource(klass).splitlines()
            except (OSError, TypeError):
                continue
            for line in lines:
                if line.strip().startswith(name + ":") and "#" in line:
                    return line.split("#", 1)[1].strip()
        return ""
