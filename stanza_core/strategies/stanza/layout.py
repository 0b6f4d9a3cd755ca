"""`stanza`'s layout (topology.py's docstring): CONV workers are ranks 0..N-k-1, FC workers
N-k..N-1, CONV worker i served by FC worker i % k; hybrid FC workers join the CONV group."""
from __future__ import annotations

from ...errors import ConfigError
from ...topology import CONV_WORKER, FC_WORKER, Layout, fc_worker_choices


class StanzaLayout(Layout):
    def resolve(self, variant, world_size, unit, name):
        strategy, fc_workers, k = variant.strategy, variant.options.fc_workers, name("fc_workers")
        if world_size < 2:
            raise ConfigError(f"{strategy} needs at least 2 {unit} (1 CONV worker + 1 FC worker), got {world_size}")
        fits = fc_worker_choices(world_size)
        if fc_workers < 1:
            raise ConfigError(f"{k} must be >= 1 with {strategy}, got {fc_workers}; expected 1 <= k <= {fits[-1]}")
        if fc_workers >= world_size:
            raise ConfigError(f"{k} {fc_workers} leaves no CONV worker with {world_size} {unit}; "
                              f"expected 1 <= k <= {fits[-1]}")
        if fc_workers not in fits:
            raise ConfigError(f"{k} {fc_workers} on {world_size} {unit} leaves an FC worker with no CONV "
                              f"worker to serve; expected k <= N - k, i.e. k <= {fits[-1]}")
        return fc_workers, 0

    def fc_batch(self, variant, global_batch, world_size, k):
        share = variant.options.fc_conv_share
        if not share:
            return 0
        return hybrid_batches(global_batch, world_size - k, k, share)[1]

    def check(self, topo, global_batch, variant):
        micro_batches = variant.options.micro_batches
        smallest = min(b for b in (topo.worker_batch(global_batch), topo.fc_batch) if b)
        if micro_batches > smallest:
            raise ConfigError(f"--micro-batches {micro_batches} exceeds the {smallest} samples of the smallest "
                              f"worker batch; expected 1..{smallest}")

    def conv_ranks(self, t):
        return list(range(t.world_size - t.fc_workers))

    def fc_ranks(self, t):
        return list(range(t.world_size - t.fc_workers, t.world_size))

    def conv_group(self, t):
        return list(range(t.world_size)) if t.fc_batch else t.conv_ranks

    def role(self, t, rank):
        return CONV_WORKER if rank < t.world_size - t.fc_workers else FC_WORKER

    def groups(self, t):
        """Stanza also gets one two-rank group per CONV-FC pair (`pair_group`), which carries that
        pair's activations and activation gradients: on NCCL each group is its own communicator
        and stream, so an FC worker's exchanges with different CONV workers do not run in posting
        order behind each other."""
        pairs = {t.pair_group(i): [i, t.fc_worker_of(i)] for i in t.conv_ranks}
        return {"conv": t.conv_group, "fc": t.fc_ranks, **pairs}


def hybrid_batches(global_batch: int, conv_workers: int, fc_workers: int, share: float) -> tuple[int, int]:
    """(bc, bh): samples per CONV worker and per hybrid FC worker when each of the k FC workers
    takes `share` of the global batch G. One-line ConfigError unless both are whole numbers,
    bh >= 1 when share > 0, and every CONV worker keeps at least one sample."""
    if not 0 <= share < 1:
        raise ConfigError(f"--fc-conv-share must be in [0, 1), got {share}")
    exact = share * global_batch
    bh = round(exact)
    if abs(exact - bh) > 1e-6 * max(1, global_batch) or (share > 0 and bh == 0):
        raise ConfigError(f"--fc-conv-share {share} of --global-batch {global_batch} is {exact:g} samples; "
                          f"expected a whole number (a multiple of 1/{global_batch})")
    rest = global_batch - fc_workers * bh
    if rest < conv_workers:
        raise ConfigError(f"--fc-conv-share {share} leaves {rest} samples for {conv_workers} CONV workers; "
                          f"expected at least one each")
    if rest % conv_workers:
        raise ConfigError(f"--fc-conv-share {share}: the {rest} samples left after {fc_workers} FC worker(s) take "
                          f"{bh} each do not split evenly over {conv_workers} CONV workers")
    return rest // conv_workers, bh
