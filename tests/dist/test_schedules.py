"""Every strategy's generated program equals the one the engine records, operation for operation.

For each world size (4, 8, 16 nodes) one torchrun launch runs the real engine (replayed compute on
the V100 row, D = 1, gloo over loopback) with --record-program for ddp, ps (colocated shards;
overlapped push), stanza k = 1 and k = 2 and the plug-in test strategy, and a second launch ps
with two dedicated servers beside the N workers; each recording is compared with the program the
strategy's schedule.py generates for the same configuration (sim/program.difference: kinds,
peers, bytes, tags, groups, order, waits, and the compute seconds bit for bit). The first step is
left out: torch DDP rebuilds its buckets after it.
"""
from __future__ import annotations

import importlib
import sys

import pytest

import dist_launch
from dist_launch import rank_env, train_many
from stanza_core import registry
from stanza_core.engine.train import parse_config
from stanza_core.sim import program
from stanza_core.sim.generate import generate

pytestmark = pytest.mark.slow

B = 4  # samples per data worker
BASE = ["--model", "tiny_cnn", "--image-size", "32", "--steps", "3", "--warmup", "1", "--compute", "replay",
        "--replay-device", "v100", "--bucket-mb", "0.01"]  # small buckets: several per backward


def configs(n: int) -> dict[str, tuple[int, list[str]]]:
    """name -> (world size, strategy flags with the global batch)."""
    out = {
        "ddp": (n, ["--strategy", "ddp", "--global-batch", str(B * n)]),
        "ps": (n, ["--strategy", "ps", "--global-batch", str(B * n)]),
        "ps_overlap": (n, ["--strategy", "ps", "--ps-overlap", "--global-batch", str(B * n)]),
        "stanza_k1": (n, ["--strategy", "stanza", "--fc-workers", "1", "--global-batch", str(B * (n - 1))]),
        "stanza_k2": (n, ["--strategy", "stanza", "--fc-workers", "2", "--global-batch", str(B * (n - 2))]),
        "toy": (n, ["--strategy", "allreduce_after", "--flat-chunks", "2", "--global-batch", str(B * n)]),
        "ps_S2": (n + 2, ["--strategy", "ps", "--ps-servers", "2", "--global-batch", str(B * n)]),
    }
    return out


@pytest.fixture(scope="module", params=[4, 8, 16])
def recorded(request, tmp_path_factory):
    """name -> (world size, flags, recorded program) of every configuration at N nodes."""
    n = request.param
    mp = pytest.MonkeyPatch()
    mp.setattr(dist_launch, "rank_env", lambda: {**rank_env(), registry.PLUGINS_ENV: "toy_allreduce"})
    toy = importlib.import_module("toy_allreduce")  # registers allreduce_after in this process too
    if toy.NAME not in registry.names():  # imported by an earlier test: register its record again
        registry.register(toy.SPEC)
    try:
        out = {}
        by_world: dict[int, dict[str, list[str]]] = {}
        tmp = tmp_path_factory.mktemp(f"record{n}")
        for name, (world, flags) in configs(n).items():
            path = tmp / f"{name}.program.json"
            by_world.setdefault(world, {})[name] = [*BASE, *flags, "--record-program", str(path)]
            out[name] = (world, flags, path)
        for world, jobs in by_world.items():
            train_many(tmp_path_factory.mktemp(f"w{world}"), world, jobs, timeout=900, save=False)
        yield n, {name: (world, flags, program.read(path)) for name, (world, flags, path) in out.items()}
    finally:
        mp.undo()
        registry.unregister(toy.NAME)  # as tests/dist/test_toy_strategy.py leaves the registry
        sys.modules.pop("toy_allreduce", None)


@pytest.mark.parametrize("name", list(configs(4)))
def test_the_generated_program_is_the_recorded_one(recorded, name):
    n, runs = recorded
    world, flags, rec = runs[name]
    cfg = parse_config([*BASE, *flags])
    gen = generate(cfg, world, steps=3)
    assert rec["source"] == "recorded" and gen["source"] == "generated"
    assert len(rec["ranks"]) == world
    # the recorded steps after the first, every one the same program, equal to the generated one
    d = program.difference(rec, gen, steps=slice(1, None))
    assert d is None, f"{name} at N={n}: {d}"


def test_a_difference_is_found(recorded):
    """The comparison can fail: one byte, one peer or one compute second changed is named."""
    n, runs = recorded
    _, flags, rec = runs["stanza_k1"]
    gen = generate(parse_config([*BASE, *flags]), len(rec["ranks"]), steps=3)
    ops = gen["ranks"][0]["steps"][1]
    send = next(op for op in ops if op["type"] == "send")
    send["bytes"] += 1
    assert "bytes" in program.difference(rec, gen, steps=slice(1, None))
    send["bytes"] -= 1
    comp = next(op for op in ops if op["type"] == "compute")
    comp["seconds"] *= 1 + 1e-12
    assert "seconds" in program.difference(rec, gen, steps=slice(1, None))
