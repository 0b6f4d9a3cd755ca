"""stanza_core.variant.Variant: one configuration's layout as one value, passed whole to RunConfig,
perf.predict and perf.expected_bytes; the cache keys of RunConfigs built from it are the keys
every cached run and stored grid result was written under (literal dicts, captured before the
Variant existed)."""
import pytest

from stanza_core.runs.runconfig import KEY_FIELDS, RunConfig
from stanza_core.runs.spec import MeasureSpec
from stanza_core.variant import Variant
from stanza_core.perf import Cluster, expected_bytes, named_profile, predict, totals

_COMMON = {"model": "alexnet", "image_size": 224, "num_classes": 1000, "nodes": 4, "fc_workers": 0,
           "global_batch": 96, "steps": 3, "warmup": 1, "link_mbit": 250.0, "delay_ms": 0.0, "mtu": 9000,
           "boundary": None, "ps_servers": 0, "ps_overlap": False, "compute": "real", "replay_device": None,
           "dilation": 1.0}
_REST = {"model": "alexnet", "image_size": 224, "num_classes": 1000, "nodes": 4, "global_batch": 96, "steps": 3,
         "link_mbit": 250.0}

# (variant, RunConfig's other fields, the cache key RunConfig(...) gave before the Variant existed)
KEYS = [
    (Variant(strategy="ddp"), {}, {**_COMMON, "strategy": "ddp"}),
    (Variant(strategy="ps"), {}, {**_COMMON, "strategy": "ps"}),
    (Variant(strategy="ps", ps_servers=1, ps_overlap=True), {},
     {**_COMMON, "strategy": "ps", "ps_servers": 1, "ps_overlap": True}),
    (Variant(strategy="stanza", fc_workers=1), {}, {**_COMMON, "strategy": "stanza", "fc_workers": 1}),
    (Variant(strategy="stanza", fc_workers=2), {"boundary": "classifier"},
     {**_COMMON, "strategy": "stanza", "fc_workers": 2, "boundary": "classifier"}),
    (Variant(strategy="stanza", fc_workers=1, fc_conv_share=0.25, micro_batches=2), {},
     {**_COMMON, "strategy": "stanza", "fc_workers": 1, "fc_conv_share": 0.25, "micro_batches": 2}),
    (Variant(strategy="ddp"), {"compute": "replay", "replay_device": "v100", "dilation": 40.0},
     {**_COMMON, "strategy": "ddp", "compute": "replay", "replay_device": "v100", "dilation": 40.0}),
]


@pytest.mark.parametrize("variant, rest, key", KEYS, ids=[f"{v.key}-{i}" for i, (v, _, _) in enumerate(KEYS)])
def test_run_config_of_a_variant_keys_as_before(variant, rest, key):
    cfg = RunConfig.of(variant, **_REST, **rest)
    assert cfg.cache_key() == key
    assert cfg.variant == variant and cfg.label == variant.label and cfg.key == variant.key
    flat = RunConfig(**_REST, **rest, **{k: cfg.to_dict()[k] for k in KEY_FIELDS})  # a stored row's flat layout
    assert flat == cfg and flat.cache_key() == key


def test_a_grid_spec_keys_its_configurations_as_before():
    spec = MeasureSpec(model="alexnet", image_size=224, num_classes=1000, nodes=4, strategies=["ps", "ddp", "stanza"],
                       fc_workers=[1, 2], batch_per_worker=32, steps=3, target_gbps=[10.0], compute="replay",
                       replay_device="v100", ps_servers=[0, 1], ps_overlap=[False, True])
    base = {**_COMMON, "link_mbit": 1000.0, "compute": "replay", "replay_device": "v100"}
    want = [{**base, "strategy": "ps", "global_batch": 128, "ps_servers": s, "ps_overlap": o}
            for s in (0, 1) for o in (False, True)]
    want += [{**base, "strategy": "ddp", "global_batch": 128},
             {**base, "strategy": "stanza", "fc_workers": 1, "global_batch": 96},
             {**base, "strategy": "stanza", "fc_workers": 2, "global_batch": 64}]
    assert [spec.run_config(v).cache_key() for v in spec.variants()] == want
    assert [v.label for v in spec.variants()] == ["ps", "ps overlap", "ps S=1", "ps S=1 overlap", "ddp",
                                                  "stanza k=1", "stanza k=2"]


def test_a_variant_is_checked_once_in_one_line():
    for bad, match in [({"strategy": "nope"}, "unknown strategy"),
                       ({"strategy": "ddp", "fc_workers": 2}, "fc_workers 2 applies to stanza only, not ddp"),
                       ({"strategy": "ddp", "ps_servers": 1}, "ps_servers 1 applies to ps only"),
                       ({"strategy": "stanza", "fc_workers": 0}, "fc_workers"),
                       ({"strategy": "ps", "ps_overlap": 1}, "ps_overlap"),
                       ({"strategy": "ps", "micro_batches": 2}, "micro"),
                       ({"strategy": "stanza", "fc_workers": 1, "fc_conv_share": 2}, "fc_conv_share"),
                       ({"strategy": "ddp", "flat_chunks": 2}, "unknown option 'flat_chunks'")]:
        with pytest.raises(ValueError, match=match) as e:
            Variant(**bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="Variant"):
        RunConfig.of(("ddp", 0), **_REST)
    assert Variant(strategy="stanza") == Variant(strategy="stanza", fc_workers=1)  # k defaults to 1, as --fc-workers


def test_label_key_and_topology():
    v = Variant(strategy="stanza", fc_workers=1, fc_conv_share=0.25, micro_batches=2)
    assert (v.label, v.key) == ("stanza k=1 share=0.25 M=2", "stanza_k1_share0.25_M2")
    ps = Variant(strategy="ps", ps_servers=1, ps_overlap=True)
    assert (ps.label, ps.key) == ("ps S=1 overlap", "ps_S1_overlap")
    assert ps.topology(5, 128).data_workers == 4  # one of the 5 nodes is a dedicated server
    assert Variant(strategy="stanza", fc_workers=1).topology(4, 96).data_workers == 3
    cfg = RunConfig.of(ps, **_REST)
    assert cfg.topology() == ps.topology(cfg.cluster_nodes, cfg.global_batch)


@pytest.mark.parametrize("variant", [Variant(strategy="ddp"), Variant(strategy="ps", ps_servers=1, ps_overlap=True),
                                     Variant(strategy="stanza", fc_workers=1, fc_conv_share=0.25, micro_batches=2)])
def test_predict_and_expected_bytes_take_a_variant_and_nothing_else(variant):
    profile = named_profile("tiny_cnn", 32, 10)
    nodes = 5
    cluster = Cluster(nodes, 10.0, device="v100")
    p = predict(profile, cluster, variant, global_batch=80)
    assert p.variant == variant and p.label == variant.label
    rows = expected_bytes(profile, variant, nodes, global_batch=80)
    assert rows == p.ranks and totals(rows)["bytes_per_step"] == p.bytes_per_step
    with pytest.raises(ValueError, match="expected a stanza_core.variant.Variant"):
        predict(profile, cluster, variant.strategy, global_batch=80)
    with pytest.raises(ValueError, match="expected a stanza_core.variant.Variant"):
        expected_bytes(profile, variant.strategy, nodes, global_batch=80)
    with pytest.raises(TypeError):  # the old positional k (or G) is refused, never read as another argument
        predict(profile, cluster, variant, 80)
    with pytest.raises(TypeError):
        expected_bytes(profile, variant, nodes, 1, 80)


def test_a_spec_of_given_configurations_runs_exactly_those():
    given = [Variant(strategy="ps", ps_servers=1, ps_overlap=True), Variant(strategy="ddp"),
             Variant(strategy="stanza", fc_workers=2, micro_batches=2, boundary_dtype="bf16")]
    spec = MeasureSpec(model="alexnet", image_size=224, num_classes=1000, nodes=4, configurations=given,
                       batch_per_worker=32, steps=3, target_gbps=[10.0], compute="replay", replay_device="v100")
    assert spec.variants() == given and spec.strategies == ["ps", "ddp", "stanza"] and spec.fc_workers == [2]
    cfgs = [spec.run_config(v) for v in spec.variants()]
    assert [c.label for c in cfgs] == ["ps S=1 overlap", "ddp", "stanza k=2 M=2 bf16|none"]
    assert cfgs[2].cache_key()["boundary_dtype"] == "bf16" and "boundary_dtype" not in cfgs[1].cache_key()
    args = cfgs[2].train_args("m.json")
    assert args[args.index("--boundary-dtype") + 1] == "bf16" and args[args.index("--micro-batches") + 1] == "2"
    assert spec.to_dict()["configurations"][2] == {"strategy": "stanza", "fc_workers": 2, "fc_conv_share": 0.0,
                                                  "micro_batches": 2, "boundary_dtype": "bf16",
                                                  "grad_compression": "none"}
    grid = MeasureSpec(model="alexnet", image_size=224, num_classes=1000, nodes=4, strategies=["ddp"], fc_workers=[1],
                       batch_per_worker=32, steps=3, target_gbps=[10.0], compute="replay", replay_device="v100")
    assert "configurations" not in grid.to_dict()  # a grid's dict as before
    for bad, match in [(dict(configurations=[]), "non-empty list"), (dict(configurations=[given[1], given[1]]), "twice"),
                       (dict(configurations=given[:1], strategies=["ddp"]), "not both")]:
        with pytest.raises(ValueError, match=match):
            MeasureSpec(model="alexnet", image_size=224, num_classes=1000, nodes=4, batch_per_worker=32, steps=3,
                        target_gbps=[10.0], compute="replay", replay_device="v100", **bad)


def test_a_record_is_refused_an_option_another_strategy_or_the_configuration_owns():
    from stanza_core import registry

    def spec(*options):
        return registry.StrategySpec(name="planted", summary="", roles=("worker",), color="#000000",
                                     engine="planted:Engine", model="planted", options=options)
    for options, match in [(("micro_batches",), "'micro_batches' of planted belongs to stanza already"),
                           (("variant",), "'variant' of planted: the name is taken by the configuration")]:
        with pytest.raises(ValueError, match=match):
            registry.register(spec(*options))
        assert "planted" not in registry.names()
    with registry.registered(spec()):  # no options: the base options class, nothing to set
        v = Variant("planted")
        assert v.options.values() == {} and v.label == "planted" and v.get("micro_batches") is None
        assert not hasattr(v, "micro_batches")  # another strategy's option is not read through a Variant
        with pytest.raises(ValueError, match="micro_batches 2 applies to stanza only, not planted"):
            Variant("planted", micro_batches=2)
    with registry.registered(registry.dataclasses.replace(spec("pieces"))):  # a record whose class is missing
        with pytest.raises(ValueError, match="lists options .'pieces',. but its options class StrategyOptions has"):
            Variant("planted")
