"""Training entry point: `torchrun --nproc-per-node N -m stanza_core.train --strategy stanza ...`
(or plain `python -m stanza_core.train --strategy local ...`).

Order of work: parse and validate everything a user can get wrong (config, layout, device,
dataset, model, split, checkpoint) before any process group forms, so bad input is one line
and a non-zero exit; then join the group, train, gather every rank's counters and timings to
rank 0, which writes the metrics JSON and the full model's state_dict.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import json
import os

import torch

from .. import DIST_NAME, __version__, atomic, checks, registry
from . import checkpoint, config, replay
from ..batchnorm import use_global_batch_stats
from ..comm import Comm, PeerError
from .compiled import compile_pieces
from .config import ConfigError, TrainConfig, check_layout, check_model_layout, check_on_device, step_save_path
from ..data import batch_indices, open_dataset
from .exit_policy import error_line, exit_now, leave
from .metrics import PeakRss, build_metrics, rank_record
from ..models import check_model, get_model
from ..numerics import set_numerics
from .rank_errors import record
from ..split import SplitError, SplitModel, split_model
from .step_failures import NonFiniteLoss, check_finite, naming_step
from .steplog import StepLog
from .watch import Watch, level_of, setup_logging, summary_line
from .watch import log as logger
from ..topology import Topology, make_topology, unused_part
from .batch import Batch, positions_of
from ..errors import OneLineParser, command_name
from ..extras import require


def build_parser() -> argparse.ArgumentParser:
    # Enumerated flags: --help lists the choices; a bad value is refused while parsing, in the
    # words TrainConfig's own check uses (its name for the value, then the expected ones).
    enums = {"device": ("device", config.DEVICES),
             "backend": ("backend", config.BACKENDS), "compute": ("--compute", config.COMPUTE),
             "replay_wait": ("--replay-wait", config.REPLAY_WAITS), "bn_stats": ("--bn-stats", config.BN_STATS),
             "compile_mode": ("--compile-mode", config.COMPILE_MODES)}

    def one_of(name, choices):
        def check(value: str) -> str:
            try:
                return checks.one_of(name, value, choices)
            except ConfigError as e:
                raise argparse.ArgumentTypeError(str(e)) from None
        return check

    def add(to, flag, name, default, help, choices=None, short=()):
        if isinstance(default, bool):
            to.add_argument(flag, *short, action="store_true", help=help)
        elif choices:
            to.add_argument(flag, type=one_of(name, choices), choices=choices, default=default, help=help)
        else:
            kind = int if isinstance(default, int) else float if isinstance(default, float) else str
            to.add_argument(flag, type=kind, default=default, help=help)

    p = OneLineParser(prog=command_name("stanza_core.train"), description=__doc__.splitlines()[0],
                      formatter_class=argparse.ArgumentDefaultsHelpFormatter, raise_errors=True)
    p.add_argument("--version", action="version", version=f"{DIST_NAME} {__version__}")
    p.add_argument("--strategy", type=one_of("strategy", registry.names()), choices=registry.names(),
                   default="stanza", help=" | ".join(registry.names()) + " (each one's own options: below)")
    for f in dataclasses.fields(TrainConfig):
        if f.name == "variant":
            continue
        flag = "--" + f.name.replace("_", "-")
        short = {"quiet": ["-q"], "verbose": ["-v"]}.get(f.name, [])
        add(p, flag, enums.get(f.name, ("", ""))[0], False if f.type in ("bool", bool) else f.default, _help(f.name),
            enums.get(f.name, (None, None))[1], short)
    for spec in registry.specs():  # every strategy's own options, from its options class
        cls = spec.options_type()
        group = p.add_argument_group(f"--strategy {spec.name}", spec.summary) if cls.names() else None
        for name, default in cls.defaults().items():
            flag = "--" + name.replace("_", "-")
            add(group, flag, flag, default, cls.help(name), cls.CHOICES.get(name))
    return p


def _help(name: str) -> str:
    for line in _config_source():
        if line.strip().startswith(name + ":") and "#" in line:
            return line.split("#", 1)[1].strip()
    return ""


@functools.lru_cache(maxsize=1)
def _config_source() -> tuple[str, ...]:
    """TrainConfig's source lines, read once (inspect.getsource per flag made every start slow)."""
    return tuple(inspect.getsource(TrainConfig).splitlines())


def parse_config(argv: list[str] | None) -> TrainConfig:
    ns = build_parser().parse_args(argv)  # a bad argument raises ArgError (a ConfigError): rank 0 prints it
    return TrainConfig(**vars(ns))


def rank_device(cfg: TrainConfig, local_rank: int, local_world: int | None = None) -> torch.device:
    """This rank's device. CUDA: local rank i takes GPU i. More ranks on this machine than GPUs
    is refused (NCCL cannot put two ranks on one GPU) unless --backend gloo, under which ranks
    share the GPUs round-robin (collectives on CUDA tensors, P2P staged through host memory)."""
    if local_world is None:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda: no CUDA GPU is visible to this process (use --device cpu)",
                              scope="host")
        count = torch.cuda.device_count()
        if local_world > count and cfg.backend != "gloo":
            raise ConfigError(f"--device {cfg.device}: {local_world} ranks on this machine but {count} GPU(s) "
                              f"visible, and NCCL needs one GPU per rank; run at most {count} ranks per machine, "
                              "add --backend gloo (ranks share GPUs), or use --device cpu", scope="host")
        torch.cuda.set_device(local_rank % count)
        return torch.device("cuda", local_rank % count)
    return torch.device("cpu")


@dataclasses.dataclass
class Prepared:
    """What `prepare()` checked and built, before any process group forms."""

    topo: Topology
    device: torch.device
    dataset: object
    model: torch.nn.Module  # on `device`, the same initial parameters on every rank
    split: SplitModel | None  # built once here (stanza), handed to the strategy
    resumed: checkpoint.Resume | None  # the checkpoint to continue from (checked, not yet read)
    bn_sync: bool = False  # batch-norm statistics over the global batch (process group "bn")


def prepare(cfg: TrainConfig) -> Prepared:
    """Everything that can fail on bad input, before any process group forms."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    try:
        topo = cfg.variant.topology(world, cfg.global_batch)
    except ConfigError as e:
        if "WORLD_SIZE" in os.environ:  # started by torchrun: the layout itself is wrong
            raise
        raise ConfigError(f"{e}; this is one process: start ranks with torchrun (torchrun --nproc-per-node N "
                          f"-m stanza_core.train --strategy {cfg.strategy} ...) or use --strategy local") from None
    set_numerics(cfg.exact)  # before any CUDA work: cuBLAS reads its workspace setting at init
    device = rank_device(cfg, int(os.environ.get("LOCAL_RANK", 0)))
    check_on_device(cfg, device)
    dataset = open_dataset(cfg.dataset, cfg.image_size, cfg.num_classes, cfg.seed)
    torch.manual_seed(cfg.seed)  # the same initial parameters on every rank and strategy
    try:
        model = _build_model(cfg)
        bn_fewest = check_model(model, (3, cfg.image_size, cfg.image_size), cfg.num_classes, cfg.model)
        if cfg.compute == "replay":  # checked on the meta device: now storage nothing has written
            model = model.to_empty(device=device)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    split = None
    if registry.get(cfg.strategy).split:  # split once, here: a model with no valid cut fails before the group forms
        split = split_model(model, cfg.boundary, input_shape=(3, cfg.image_size, cfg.image_size),
                            batch_size=topo.worker_batch(cfg.global_batch))
    bn_sync = check_model_layout(cfg, topo, model, split, bn_fewest)
    if cfg.tensorboard:  # the extra, before any process group forms: one line naming the install
        require("tensorboard", "--tensorboard")
    resumed = None
    if cfg.resume:
        resumed = checkpoint.locate(cfg.checkpoint_dir, world, cfg.to_dict())
    replay.prepare(cfg, model, topo.worker_batch(cfg.global_batch), rank, world)  # --compute replay: waits, no arithmetic
    if split is not None and (unused := unused_part(topo, rank)):  # built whole (same init everywhere),
        split.release(unused)  # then a rank keeps only what it trains, before it reaches the device
    # to the device, leaving released (meta) tensors where they are (Module.to would refuse them)
    model._apply(lambda t: t if t.is_meta else t.to(device))
    for line in check_layout(cfg, topo) if rank == 0 else []:  # input is good; a flag without effect: one line each
        logger.warning(line)
    return Prepared(topo, device, dataset, model, split, resumed, bn_sync)


def _build_model(cfg: TrainConfig) -> torch.nn.Module:
    """The model, randomly initialised. Replayed compute never reads a parameter's value: the model
    is built on the meta device (and later given uninitialised storage, which holds no page until
    something writes it), so a replayed rank keeps only what crosses the network (replay.py)."""
    return get_model(cfg.model, cfg.num_classes, device="meta" if cfg.compute == "replay" else None)


def run(cfg: TrainConfig) -> dict | None:
    prep = prepare(cfg)
    comm = Comm.from_env(cfg.timeout_s, prep.device, None if cfg.backend == "auto" else cfg.backend)
    comm.set_payload_scale(cfg.payload_scale)  # replayed runs: 1/F of each message on links shaped to 1/F
    failed = True
    try:
        out = _train(cfg, prep, comm)
        failed = False
        return out
    except NonFiniteLoss:
        raise
    except Exception as e:  # a dead peer surfaces wherever it is noticed: make it a PeerError
        raise comm.peer_error(e) from None
    finally:
        comm.close(failed=failed)  # after a failure: abort, never a destroy that can block


def _train(cfg, prep: Prepared, comm) -> dict | None:
    topo, device, dataset, model = prep.topo, prep.device, prep.dataset, prep.model
    groups = dict(topo.groups())
    if prep.bn_sync:  # batch-norm statistics summed over the data workers, counted as bn_stats
        groups["bn"] = topo.conv_ranks
    comm.new_groups(groups, device)
    if prep.bn_sync and comm.rank in topo.conv_ranks:
        part = prep.split.conv if prep.split is not None else model
        use_global_batch_stats(part, lambda t: comm.allreduce(t, "bn", "bn_stats"), topo.data_workers)
    if cfg.timeline:
        comm.enable_timeline()
    recorder = comm.record() if cfg.record_program else None
    if cfg.compile:  # in place, before any wrapper (DDP) sees the model; traced at the first step
        compile_pieces(model, prep.split, cfg.compile_mode)
    strategy = registry.get(cfg.strategy).engine_class()(model, cfg, topo, comm, device, prep.split)
    start = 0
    if prep.resumed is not None:
        start = prep.resumed.step  # collective: each rank reads its state, at any allowed world size
        strategy.load_checkpoint_state(checkpoint.Reader(prep.resumed, comm))
    model.train()
    replayer = replay.replayer_of(model)
    if replayer:
        replayer.replay_optimizer(strategy.optimizer)
        replayer.recorder = recorder

    def batch_for(t) -> Batch | None:
        """Load this rank's slice of step t's global batch now, so data loading stays out of the
        step's time (as a prefetching data loader would keep it)."""
        mine = strategy.data_slice()
        if mine is None:
            return None
        x, y = dataset.get(batch_indices(dataset, t, cfg.global_batch, cfg.seed, mine))
        return Batch(x.to(device), y.to(device), positions_of(mine))

    steps = range(start, cfg.steps)
    watch = Watch(cfg, topo.world_size, start, enabled=comm.rank == 0)  # the bar, -v lines, TensorBoard, CSV
    save_steps = set(cfg.save_steps())
    rss = PeakRss()  # setup's peak read here, then the steps' own peak from now on
    # Steps are timed and their losses read without stopping the host in the step (steplog.py):
    # CUDA events on a GPU, the loss shares left on the device until a read, every --log-every
    # steps and before anything is saved, so nothing of a non-finite step is ever written.
    log = StepLog(device, cfg.log_every, host_clock=cfg.timeline or cfg.compute != "real",
                  scale=1.0 / cfg.global_batch)  # strategies return loss sums
    first = start  # the first step not yet checked for a finite global loss
    for t in steps:
        batch = batch_for(t)
        mark = log.start()
        if recorder is not None:
            recorder.begin_step()
        if replayer:
            replayer.begin_step(t)
        with naming_step(comm, t):
            with comm.counting():
                share = strategy.step(t, batch)
        if recorder is not None:
            recorder.end_step()
        due = log.end(mark, share)
        if cfg.compute != "real":
            # Replayed values mean nothing, but an allreduce still runs every step: it is the one
            # point where every rank meets between steps, so without it a replayed FC worker
            # would start its next step early.
            with naming_step(comm, t):
                comm.sum_scalar(0.0)
        checkpoint_due = cfg.checkpoint_dir and cfg.checkpoint_every and (t + 1) % cfg.checkpoint_every == 0 \
            and t + 1 < cfg.steps
        if due or checkpoint_due or t + 1 in save_steps or t + 1 == cfg.steps:
            shares = log.read()
            total = check_finite(cfg, comm, first, shares, start)  # the window's global loss (summed)
            watch.window(t, None if total is None else total / len(shares), log.times[-len(shares):])
            first = t + 1
        watch.step_done()
        if checkpoint_due:  # collective (torch.distributed.checkpoint): a dead peer here names this step too
            with naming_step(comm, t):
                checkpoint.save(cfg.checkpoint_dir, comm, topo.world_size, t + 1, cfg.to_dict(),
                                strategy.checkpoint_state())
        if t + 1 in save_steps:  # collective: every rank takes part, rank 0 writes
            with naming_step(comm, t):
                state = strategy.full_state_dict()
            if comm.rank == 0:
                atomic.torch_save(state, step_save_path(cfg.save, t + 1))
    rss.steps_done()
    watch.close()
    if cfg.checkpoint_dir:
        with naming_step(comm, cfg.steps - 1):
            checkpoint.save(cfg.checkpoint_dir, comm, topo.world_size, cfg.steps, cfg.to_dict(),
                            strategy.checkpoint_state())
    state = strategy.full_state_dict()
    everyone = comm.all_gather_object(rank_record(comm, strategy, log, replayer, rss))
    programs = comm.all_gather_object(recorder.to_list()) if recorder is not None else None
    if comm.rank != 0:
        return None
    if programs is not None:
        atomic.write_text(cfg.record_program, json.dumps(recorded_program(cfg, topo, groups, programs, replayer)) + "\n")
    metrics = build_metrics(cfg, topo, device, start, everyone, replayer.describe() if replayer else None)
    if cfg.save:
        atomic.torch_save(state, cfg.save)
    if cfg.metrics:
        atomic.write_text(cfg.metrics, json.dumps(metrics, indent=1))
    logger.info(summary_line(metrics, cfg.metrics))
    return metrics


def recorded_program(cfg: TrainConfig, topo: Topology, groups: dict[str, list[int]], steps: list, replayer) -> dict:
    """--record-program's file: every rank's recorded steps (comm/record.py) with what the run was
    (stanza_core.sim.program's format)."""
    from ..sim import program  # the format module only (no simulator)

    world = topo.world_size
    meta = {"strategy": cfg.strategy, "label": cfg.variant.label, "model": cfg.model, "image_size": cfg.image_size,
            "num_classes": cfg.num_classes, "global_batch": cfg.global_batch, "world_size": world,
            "options": cfg.variant.options.values(), "replay_device": cfg.replay_device,
            "device_row": replayer.dev.name if replayer is not None else None, "bucket_mb": cfg.bucket_mb,
            "bn_stats": cfg.bn_stats, "boundary": cfg.boundary, "steps": cfg.steps, "warmup": cfg.warmup,
            "version": __version__}
    return program.document(source="recorded", meta=meta, roles=[topo.role(r) for r in range(world)],
                            groups={"world": list(range(world)), **groups}, steps=steps)


@record  # an exception escaping a rank goes to torchrun's error file, which the launcher reads
def main(argv: list[str] | None = None) -> int:
    rank = int(os.environ.get("RANK", 0))
    setup_logging()
    try:
        cfg = parse_config(argv)
        setup_logging(level_of(cfg, rank))
        run(cfg)
    except (ConfigError, SplitError) as e:
        line = error_line(e, rank, int(os.environ.get("LOCAL_RANK", 0)))
        if line:
            logger.error(line.removeprefix("error: "))
        return 2
    except NonFiniteLoss as e:  # every rank knows (the loss is summed over ranks): rank 0 says it
        if rank == 0:
            logger.error(e)
        return exit_now(1)
    except PeerError as e:
        logger.error(e)
        return exit_now(1)
    return 0


if __name__ == "__main__":
    leave(main())
