"""Rank layout, without process groups."""
import re

import pytest

from stanza_core.engine.config import ConfigError
from stanza_core.topology import CONV_WORKER, FC_WORKER, LOCAL, WORKER, make_topology
from stanza_core.variant import Variant


def test_stanza_roles_and_service_are_balanced():
    t = make_topology(Variant("stanza", fc_workers=2), 7, 40)
    assert [t.role(r) for r in range(7)] == [CONV_WORKER] * 5 + [FC_WORKER] * 2
    assert t.served_by(5) == [0, 2, 4] and t.served_by(6) == [1, 3]
    assert [t.fc_worker_of(i) for i in range(5)] == [5, 6, 5, 6, 5]
    assert t.groups() == {"conv": [0, 1, 2, 3, 4], "fc": [5, 6], "pair0": [0, 5], "pair1": [1, 6],
                          "pair2": [2, 5], "pair3": [3, 6], "pair4": [4, 5]}
    assert [t.batch_slice(r, 40) for r in range(5)] == [slice(8 * i, 8 * i + 8) for i in range(5)]
    assert t.data_workers == 5


@pytest.mark.parametrize("n,k", [(2, 1), (5, 1), (9, 4), (16, 3), (8, 4)])
def test_every_conv_worker_served_once(n, k):
    t = make_topology(Variant("stanza", fc_workers=k), n, (n - k) * 2)
    served = sorted(i for f in t.fc_ranks for i in t.served_by(f))
    assert served == t.conv_ranks
    loads = [len(t.served_by(f)) for f in t.fc_ranks]
    assert max(loads) - min(loads) <= 1


def test_ddp_ps_local_layouts():
    d = make_topology(Variant("ddp"), 4, 8)
    assert [d.role(r) for r in range(4)] == [WORKER] * 4 and d.groups() == {} and d.data_workers == 4
    p = make_topology(Variant("ps"), 4, 8)
    assert p.ps_shards == 4 and [p.shard_owner(s) for s in range(4)] == [0, 1, 2, 3]
    assert make_topology(Variant("ps", ps_shards=2), 4, 8).ps_shards == 2
    assert make_topology(Variant("local"), 1, 8).role(0) == LOCAL


@pytest.mark.parametrize("args,msg", [
    (("stanza", 3, 12, 3), "leaves no CONV worker"),
    (("stanza", 3, 12, 5), "leaves no CONV worker"),
    (("stanza", 3, 12, 0), "fc_workers must be a positive integer"),  # the Variant's own check
    (("stanza", 3, 12, 2), "leaves an FC worker with no CONV worker"),
    (("stanza", 1, 12, 1), "at least 2 ranks"),
    (("stanza", 4, 10, 1), "not divisible by the 3 data workers"),
    (("ddp", 4, 10), "not divisible by the 4 data workers"),
    (("local", 2, 8), "runs in one process"),
    (("nccl", 2, 8), "unknown strategy"),
])
def test_bad_layouts_are_one_line_errors(args, msg):
    strategy, n, g, *k = args
    with pytest.raises(ConfigError, match=msg) as e:
        make_topology(Variant(strategy, fc_workers=k[0] if k else None), n, g)
    assert "\n" not in str(e.value)


def test_ps_shards_bounded():
    with pytest.raises(ConfigError, match="exceeds the 3 ranks"):
        make_topology(Variant("ps", ps_shards=4), 3, 9)


def test_ps_dedicated_servers_are_the_last_ranks():
    from stanza_core.topology import PS_SERVER

    t = make_topology(Variant("ps", ps_servers=2), 5, 6)  # 3 data workers + 2 servers
    assert [t.role(r) for r in range(5)] == [WORKER] * 3 + [PS_SERVER] * 2
    assert t.data_workers == 3 and t.conv_ranks == [0, 1, 2] and t.ps_shards == 2
    assert t.server_ranks == [3, 4] and [t.shard_of(r) for r in range(5)] == [None, None, None, 0, 1]
    assert [t.batch_slice(r, 6) for r in range(3)] == [slice(0, 2), slice(2, 4), slice(4, 6)]
    assert t.groups() == {}
    c = make_topology(Variant("ps", ps_shards=2), 4, 8)  # colocated: shard s on rank s
    assert c.server_ranks == [0, 1] and [c.shard_of(r) for r in range(4)] == [0, 1, None, None]
    assert c.role(0) == WORKER and c.ps_servers == 0


@pytest.mark.parametrize("args,kw,msg", [
    (("ps", 3, 6), {"ps_servers": 3}, "leaves no data worker among 3 ranks"),
    (("ps", 3, 6), {"ps_servers": 5}, "leaves no data worker"),
    (("ps", 4, 6), {"ps_servers": 2, "ps_shards": 3}, "each dedicated server holds one shard"),
    (("ddp", 4, 8), {"ps_servers": 1}, "applies to ps only"),  # the Variant's own check
    (("ps", 4, 8), {"ps_servers": 1}, "not divisible by the 3 data workers of ps on 4 ranks (1 of them"),
])
def test_bad_ps_deployments_are_one_line_errors(args, kw, msg):
    strategy, n, g = args
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(")) as e:
        make_topology(Variant(strategy, **kw), n, g)
    assert "\n" not in str(e.value)


def test_the_model_and_the_engine_accept_the_same_layouts():
    """perf.traffic.model_layout states no layout rule of its own: over every strategy, world size
    1..6, k 1..6, S 0..7 and 0..6 dedicated servers, it accepts exactly what make_topology accepts,
    resolves the same (k, S), and rejects with the same message (ranks worded as nodes)."""
    from stanza_core.perf.traffic import model_layout

    accepted = rejected = 0
    for strategy in ("local", "ddp", "ps", "stanza"):
        for n in range(1, 7):
            for k in range(1, 7) if strategy == "stanza" else [None]:
                for s in range(0, 8) if strategy == "ps" else [None]:
                    for servers in range(0, 7) if strategy == "ps" else [0]:
                        variant = Variant(strategy, fc_workers=k, ps_shards=s, ps_servers=servers)
                        try:
                            topo = make_topology(variant, n, 60)
                        except ConfigError as e:
                            engine = str(e)
                        else:
                            engine = (topo.fc_workers, topo.ps_shards)
                        try:
                            got, _ = model_layout(variant, n, 60)
                        except ValueError as e:
                            model = str(e)
                        else:
                            model = (got.fc_workers, got.ps_shards)
                        if isinstance(engine, str):
                            rejected += 1
                            flags = re.sub(r"--([a-z-]+)", lambda m: m.group(1).replace("-", "_"), engine)
                            assert model == flags.replace(" rank", " node"), (strategy, n, k, s, servers)
                        else:
                            accepted += 1
                            assert model == engine, (strategy, n, k, s, servers)
    assert accepted > 50 and rejected > 50
