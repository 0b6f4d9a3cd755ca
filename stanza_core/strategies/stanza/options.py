"""`stanza`'s options: k, then what goes beyond the paper (each defaults to the paper's Stanza)."""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ... import checks
from ...batchnorm import bn_layers
from ...errors import ConfigError
from ...strategy_options import StrategyOptions

BOUNDARY_DTYPES = ("fp32", "bf16", "fp16")  # --boundary-dtype
GRAD_COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")  # --grad-compression


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options(StrategyOptions):
    fc_workers: int = 1  # k: ranks training the FC head (stanza)
    fc_conv_share: float = 0.0  # stanza: share of the global batch each FC worker also trains the CONV body on
    micro_batches: int = 1  # stanza: M chunks per CONV worker, exchanged as a pipeline (1: whole batch)
    boundary_dtype: str = "fp32"  # stanza: dtype of activations and their gradients on the wire (fp32|bf16|fp16)
    grad_compression: str = "none"  # stanza: CONV gradient allreduce via DDP comm hook (none|fp16|bf16|powersgd)

    UNSET: ClassVar[dict[str, Any]] = {"fc_workers": 0}  # k reads 0 under a strategy without FC workers
    CHOICES: ClassVar[dict[str, tuple]] = {"boundary_dtype": BOUNDARY_DTYPES, "grad_compression": GRAD_COMPRESSIONS}

    def __post_init__(self):
        if isinstance(self.fc_conv_share, int) and not isinstance(self.fc_conv_share, bool):
            object.__setattr__(self, "fc_conv_share", float(self.fc_conv_share))

    def check(self, spell=str) -> None:
        checks.positive_int(spell("fc_workers"), self.fc_workers)
        checks.positive_int(spell("micro_batches"), self.micro_batches)
        checks.in_interval(spell("fc_conv_share"), self.fc_conv_share, 0, 1)
        for name, choices in self.CHOICES.items():
            checks.one_of(spell(name), getattr(self, name), choices)

    def check_model(self, model, name: str, *, bn_sync: bool, spell=str) -> None:
        if self.micro_batches > 1 and bn_layers(model):
            raise ConfigError(f"{spell('micro_batches')} {self.micro_batches}: {name} has BatchNorm, whose batch "
                              f"statistics would change per micro-batch; expected {spell('micro_batches')} 1 for it")
        if bn_sync and self.fc_conv_share:
            raise ConfigError(f"{spell('fc_conv_share')} {self.fc_conv_share}: {name} has batch norm, and global batch "
                              "statistics need equal CONV batches on every data worker; pass --bn-stats local or "
                              f"{spell('fc_conv_share')} 0")

    def label_parts(self) -> list[tuple[str, str]]:
        """k = FC workers, share = each FC worker's share of the global batch on the CONV body, M =
        micro-batches, then "boundary dtype|gradient compression" when either is not exact."""
        out = [("k", str(self.fc_workers or 1))]
        if self.fc_conv_share:
            out.append(("share", f"{self.fc_conv_share:.3g}"))
        if self.micro_batches > 1:
            out.append(("M", str(self.micro_batches)))
        if (self.boundary_dtype, self.grad_compression) != ("fp32", "none"):
            out.append((f"{self.boundary_dtype}|{self.grad_compression}", ""))
        return out
