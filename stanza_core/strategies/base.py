"""The interface every training strategy implements, and what they share.

A strategy is built on every rank from the full model (same seed, so the same initial
parameters everywhere), the config, the topology, the rank's Comm and the SplitModel that
`train.prepare()` built once (None where the strategy needs no split). `step(t, batch)` runs one
BSP step on global batch t, with `batch` this rank's samples, labels and their positions in the
global batch (a `Batch`; None on a rank that loads no data, e.g. a stanza FC worker). The loss
is the sum of per-sample losses divided by the global batch G, so the gradients the ranks add
up are exactly the single-process gradient of the mean loss.

The 1/G costs no operator call in a step: a forward returns the sum of its samples' losses and
`backward()` starts the backward pass from 1/G (a 0-d tensor made once), which is the gradient
the division would have passed down, bit for bit; `step` returns the loss sum (or a list of
them), and the training loop multiplies by 1/G when it reads the losses (`LOSS_SCALE`, steplog.py).

Dropout keys: every forward that can hold a SampleDropout runs inside `self.dropout_keys(t,
positions)`, on both sides of a split, so a sample's mask never depends on who computes it.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..batchnorm import BN_LOCAL
from ..comm import Comm
from ..engine.batch import Batch, positions_of  # noqa: F401 (a strategy's step input)
from ..engine.config import TrainConfig
from ..models import sample_keys
from ..split import SplitModel
from ..topology import FC_WORKER, LOCAL, PS_SERVER, Topology
from . import state


def make_sgd(params, cfg: TrainConfig) -> torch.optim.SGD:
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def loss_sum(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The sum of this slice's per-sample losses (its share of the global mean loss, times G)."""
    return F.cross_entropy(logits, y, reduction="sum")


class Strategy:
    name = "base"

    def __init__(self, model: nn.Module, cfg: TrainConfig, topo: Topology, comm: Comm, device: torch.device,
                 split: SplitModel | None = None):
        self.model, self.cfg, self.topo, self.comm, self.device = model, cfg, topo, comm, device
        self.options = cfg.variant.options  # this strategy's own options (its folder's options.py)
        self.split = split
        self.rank = comm.rank
        self.role = topo.role(comm.rank)
        self._seeds: dict[tuple, torch.Tensor] = {}  # backward seeds: factor / G, made once per device

    def data_slice(self) -> slice | None:
        """Positions of the global batch this rank loads (None: it loads no data)."""
        if self.role in (FC_WORKER, PS_SERVER):
            return None
        if self.role == LOCAL:
            return slice(0, self.cfg.global_batch)
        return self.topo.batch_slice(self.rank, self.cfg.global_batch)

    def step(self, t: int, batch: Batch | None) -> torch.Tensor | list | None:
        """One BSP step; returns the sum of the per-sample losses this rank computed (None if it
        has none; a list of sums if it computed several), as 0-d tensors left on the device:
        reading one would make the host wait for the step's end (the training loop reads them
        every --log-every steps and scales them by 1/G, steplog.py)."""
        raise NotImplementedError

    def backward(self, loss: torch.Tensor, factor: float = 1.0):
        """Backward from `loss` (a sum of per-sample losses) as from factor * loss / G: seeded with
        the 0-d tensor factor / G, made once (no operator call in the step)."""
        key = (loss.device, loss.dtype, factor)
        if key not in self._seeds:
            self._seeds[key] = torch.tensor(factor / self.cfg.global_batch, dtype=loss.dtype, device=loss.device)
        loss.backward(self._seeds[key])

    def dropout_keys(self, t: int, positions: range):
        """SampleDropout masks of this block's samples: rows `positions` of each layer's draw over
        the global batch of step t (models.sample_keys)."""
        return sample_keys(self.cfg.seed, t, positions, rows=self.cfg.global_batch)

    def forward_loss(self, module: nn.Module, x: torch.Tensor, y: torch.Tensor, t: int,
                     positions: range) -> torch.Tensor:
        """The sum of the per-sample losses of these samples (start its backward with `backward`)."""
        with self.dropout_keys(t, positions):
            return loss_sum(module(x), y)

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The unsplit model's state_dict on rank 0 (collective: every rank must call it)."""
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()} if self.rank == 0 else None

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """This rank's training state as tensors keyed by name (state.py): a tensor other ranks
        hold too goes under the same key, so it is stored once (engine/checkpoint.py)."""
        return state.module_state([self.model], self.state_names(), self.optimizer, self.rank, self.bn_local)

    def load_checkpoint_state(self, reader):
        """Fill this rank's state from a checkpoint (`reader.load` is collective: called once)."""
        state.load_modules(reader, [self.model], self.state_names(), self.optimizer, self.rank, self.bn_local)

    def state_names(self) -> dict[int, str]:
        return state.tensor_names(self.model)

    @property
    def bn_local(self) -> bool:
        """Batch-norm statistics per data worker: kept per rank in a checkpoint."""
        return self.cfg.bn_stats == BN_LOCAL
