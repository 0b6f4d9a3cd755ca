"""The simulator's pieces: the program reader refuses malformed files in one line; SimGrid times
hand-made programs as the flow model says (a message: latency + bytes / rate; a ring allreduce:
2(n-1) rounds of a chunk); a generated program's bytes equal the performance model's
expected_bytes exactly; without SimGrid the simulated path says so in one line."""
from __future__ import annotations

import json
from fractions import Fraction

import pytest

from stanza_core import perf
from stanza_core.engine.train import parse_config
from stanza_core.perf.profiles import named_profile
from stanza_core.sim import program
from stanza_core.sim.cluster import Platform
from stanza_core.sim.executor import ring_sends
from stanza_core.sim.generate import NoSchedule, generate
from stanza_core.sim.run import available, simulate_program, summarize

needs_simgrid = pytest.mark.skipif(available() is not None, reason=str(available()))


def doc(ranks, groups=None):
    return program.document(source="generated", meta={}, roles=["worker"] * len(ranks),
                            groups=groups or {"world": list(range(len(ranks)))}, steps=ranks)


def test_the_reader_refuses_a_malformed_program_in_one_line(tmp_path):
    good = doc([[[{"id": 0, "type": "send", "peer": 1, "bytes": 8, "category": "x", "tag": 0, "group": None},
                  {"id": 1, "type": "wait", "on": [0]}]],
                [[{"id": 0, "type": "recv", "peer": 0, "bytes": 8, "category": "x", "tag": 0, "group": None},
                  {"id": 1, "type": "wait", "on": [0]}]]])
    p = tmp_path / "p.json"
    p.write_text(json.dumps(good))
    assert program.read(p)["ranks"][1]["steps"][0][0]["type"] == "recv"
    bad = [("peer", lambda d: d["ranks"][0]["steps"][0][0].update(peer=0), "peer must be another rank"),
           ("wait", lambda d: d["ranks"][0]["steps"][0][1].update(on=[7]), "earlier operations"),
           ("type", lambda d: d["ranks"][0]["steps"][0][0].update(type="bcast"), "type must be one of"),
           ("format", lambda d: d.update(format="chakra"), "format must be"),
           ("group", lambda d: d["ranks"][0]["steps"][0][0].update(group="pair9"), "not in the program's groups")]
    for name, spoil, says in bad:
        d = json.loads(json.dumps(good))
        spoil(d)
        p.write_text(json.dumps(d))
        with pytest.raises(program.ProgramError) as e:
            program.read(p)
        assert says in str(e.value) and "\n" not in str(e.value), name
    p.write_text("{not json")
    with pytest.raises(program.ProgramError, match="not JSON"):
        program.read(p)


def test_ring_sends_move_2_n_minus_1_chunks_per_rank():
    rounds = ring_sends(1003, 4)
    assert len(rounds) == 6
    per_rank = [sum(r[i] for r in rounds) for i in range(4)]
    assert sum(per_rank) == 6 * 1003  # every chunk crosses 2(n-1) edges
    assert all(abs(x - Fraction(6 * 1003, 4)) < 4 for x in per_rank)


@needs_simgrid
def test_a_message_takes_latency_plus_bytes_over_the_rate():
    nbytes, gbps, delay_ms = 10_000_000, 10.0, 0.5
    d = doc([[[{"id": 0, "type": "compute", "name": "x", "phase": "fwd", "seconds": 0.01},
               {"id": 1, "type": "send", "peer": 1, "bytes": nbytes, "category": "x", "tag": 0, "group": None},
               {"id": 2, "type": "wait", "on": [1]}]],
             [[{"id": 0, "type": "recv", "peer": 0, "bytes": nbytes, "category": "x", "tag": 0, "group": None},
               {"id": 1, "type": "wait", "on": [0]}]]])
    res = simulate_program(d, Platform(hosts=2, target_gbps=gbps, delay_ms=delay_ms))
    want = 0.01 + delay_ms / 1e3 + nbytes / (gbps * 1e9 / 8)
    assert res["steps"][0]["time_s"] == pytest.approx(want, rel=1e-9)
    assert res["link_up_bytes"] == [nbytes, 0] and res["link_down_bytes"] == [0, nbytes]


@needs_simgrid
@pytest.mark.parametrize("ring", ["expanded", "merged"])
def test_a_ring_allreduce_takes_2_n_minus_1_rounds(ring):
    n, nbytes, gbps, delay_ms = 4, 4_000_000, 10.0, 0.1
    steps = [[[{"id": 0, "type": "collective", "kind": "allreduce", "group": "world", "bytes": nbytes,
                "category": "grads", "algorithm": "ring"}, {"id": 1, "type": "wait", "on": [0]}]] for _ in range(n)]
    res = simulate_program(doc(steps), Platform(hosts=n, target_gbps=gbps, delay_ms=delay_ms, ring=ring))
    want = 2 * (n - 1) * (delay_ms / 1e3 + nbytes / n / (gbps * 1e9 / 8))
    assert res["steps"][0]["time_s"] == pytest.approx(want, rel=1e-9)
    assert sum(res["link_up_bytes"]) == 2 * (n - 1) * nbytes


def _cfg(*flags, model="alexnet"):
    return parse_config(["--model", model, "--image-size", "224", "--num-classes", "1000", "--steps", "3",
                         "--warmup", "1", "--compute", "replay", "--replay-device", "v100", *flags])


@pytest.mark.parametrize("flags,nodes", [
    (["--strategy", "ddp", "--global-batch", "128"], 4),
    (["--strategy", "ps", "--global-batch", "256"], 8),
    (["--strategy", "ps", "--ps-servers", "4", "--global-batch", "128"], 8),
    (["--strategy", "ps", "--ps-overlap", "--global-batch", "128"], 4),
    (["--strategy", "stanza", "--fc-workers", "1", "--global-batch", "96"], 4),
    (["--strategy", "stanza", "--fc-workers", "2", "--global-batch", "192"], 8),
])
@pytest.mark.parametrize("model", ["alexnet", "vgg16"])
def test_a_generated_programs_bytes_are_the_models(flags, nodes, model):
    cfg = _cfg(*flags, model=model)
    got = program.rank_bytes(generate(cfg, nodes))
    want = perf.expected_bytes(named_profile(model), cfg.variant, nodes, global_batch=cfg.global_batch)
    for g, w in zip(got, want, strict=True):
        for side in ("sent", "recv"):
            assert {k: round(Fraction(v)) for k, v in g[side].items() if v} == \
                {k: v for k, v in w[side].items() if v}, (g["rank"], side)


def test_options_a_generator_does_not_write_are_refused_in_one_line():
    with pytest.raises(NoSchedule, match="micro_batches") as e:
        generate(_cfg("--strategy", "stanza", "--fc-workers", "1", "--micro-batches", "2", "--global-batch", "96"), 4)
    assert "\n" not in str(e.value)


@needs_simgrid
def test_a_simulated_step_is_summarised_per_rank_and_link():
    cfg = _cfg("--strategy", "stanza", "--fc-workers", "1", "--global-batch", "96")
    d = generate(cfg, 4, steps=2)
    out = summarize(d, simulate_program(d, Platform(hosts=4, target_gbps=10.0)))
    assert len(out["ranks"]) == 4 and out["step_s"] > 0
    assert all(0 < r["compute_s"] <= out["step_s"] for r in out["ranks"])
    fc = out["link_bytes_per_step"][3]
    assert fc["down"] == sum(r["sent"].get("activations", 0) + r["sent"].get("labels", 0)
                             for r in program.rank_bytes(d)[:3])
