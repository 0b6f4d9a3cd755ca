"""One label format for configurations and one set of parameter checks, shared by experiments,
the bench and viz."""
import re

import pytest

from stanza_core.engine.config import TrainConfig
from stanza_core import checks
from stanza_core.runs.runconfig import RunConfig
from stanza_core.labels import config_key, config_label, run_key, run_label


def test_labels_and_keys():
    assert config_label("stanza", 1) == "stanza k=1" and config_key("stanza", 2) == "stanza_k2"
    assert config_label("ddp") == "ddp" and config_label("ps") == "ps"
    assert config_label("ps", ps_servers=1, ps_overlap=True) == "ps S=1 overlap"
    assert config_key("ps", ps_servers=1, ps_overlap=True) == "ps_S1_overlap"
    assert config_label("ps", ps_overlap=True) == "ps overlap"
    row = {"strategy": "stanza", "fc_workers": 3}
    assert run_label(row) == "stanza k=3" and run_key(row) == "stanza_k3"
    # stanza's options beyond the paper: in the label and the key; rows without them are at the defaults
    row = {"strategy": "stanza", "fc_workers": 1, "fc_conv_share": 0.0625, "micro_batches": 2}
    assert run_label(row) == config_label("stanza", 1, fc_conv_share=0.0625, micro_batches=2) == "stanza k=1 share=0.0625 M=2"
    assert run_key(row) == "stanza_k1_share0.0625_M2"
    assert run_label({**row, "fc_conv_share": 0.0, "micro_batches": 1}) == "stanza k=1"


@pytest.mark.parametrize("call, message", [
    (lambda: checks.int_list("nodes", [1, 2], 2), "nodes must be a non-empty list of integers >= 2, got [1, 2]"),
    (lambda: checks.int_list("k", "1,1", unique=True), "k lists a value twice: [1, 1]"),
    (lambda: checks.positive_floats("gbps", "10,x"), "gbps must be a non-empty list of positive numbers, got '10,x'"),
    (lambda: checks.model_names(["alexnet"], 32), "alexnet needs image_size >= 63, got 32"),
    (lambda: checks.model_names("nope"), "unknown model 'nope'; expected one of:"),
    (lambda: checks.one_of("target_device", "p100", ["v100", "a100"]), "unknown target_device 'p100'; expected one of v100, a100"),
    (lambda: checks.fc_workers(3, 5), "fc_workers 3 with 5 nodes: expected 1 <= k <= 2"),
    (lambda: checks.positive_int("nodes", True), "nodes must be a positive integer, got True"),
    (lambda: checks.positive_int("global_batch", 3, 4, what="the data workers"),
     "global_batch must be an integer >= 4 (the data workers), got 3"),
    (lambda: checks.number("--lr", float("nan"), above=0), "--lr must be a finite number, got nan"),
    (lambda: checks.number("--lr", 0.0, above=0), "--lr must be > 0, got 0.0"),
    (lambda: checks.number("latency_s", -1, at_least=0), "latency_s must be >= 0, got -1"),
    (lambda: checks.in_interval("--momentum", 1.0, 0, 1), "--momentum must be in [0, 1), got 1.0"),
    (lambda: checks.batch_divides(7, "stanza", 4, 1), "global_batch 7 is not divisible by the 3 data workers of "
                                                      "stanza k=1 on 4 nodes"),
])
def test_checks_fail_in_one_line(call, message):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_checks_accept_papermill_strings():
    assert checks.int_list("nodes", "4,2,4", 2) == [2, 4]
    assert checks.positive_floats("gbps", 10) == [10.0]
    assert checks.model_names("alexnet, vgg16", 224) == ["alexnet", "vgg16"]


def test_run_config_builds_the_cli_and_refuses_bad_combinations():
    base = dict(model="tiny_cnn", image_size=16, num_classes=10, nodes=3, global_batch=6, steps=2, link_mbit=100.0)
    c = RunConfig(**base, strategy="stanza", fc_workers=1)
    args = c.train_args("m.json")
    assert c.label == "stanza k=1" and args[args.index("--fc-workers") + 1] == "1"
    assert "--compute" not in args and "--ps-servers" not in args  # defaults stay off the command line
    r = RunConfig(**base, strategy="ddp", compute="replay", replay_device="v100", dilation=20.0)
    a = r.train_args("m.json")
    assert a[a.index("--compute") + 1] == "replay" and a[a.index("--dilation") + 1] == "20.0"
    assert RunConfig(**base, strategy="ps", ps_servers=1).cluster_nodes == 4
    for change, msg in [({"strategy": "ddp", "fc_workers": 1}, "fc_workers 1 applies to stanza only, not ddp"),
                        ({"strategy": "ddp", "ps_overlap": True}, "ps_overlap applies to ps only, not ddp"),
                        ({"strategy": "ddp", "compute": "replay"}, "compute 'replay' needs a replay_device"),
                        ({"strategy": "ddp", "compute": "fake"}, "compute must be one of real, replay")]:
        with pytest.raises(ValueError, match="^" + msg):
            RunConfig(**{**base, **change})


BASE = dict(model="tiny_cnn", image_size=16, num_classes=10, nodes=4, global_batch=24, steps=2, link_mbit=100.0)


def test_run_config_carries_stanza_options_to_the_cli_label_and_cache_key():
    c = RunConfig(**BASE, strategy="stanza", fc_workers=1, fc_conv_share=0.25, micro_batches=2)
    args = c.train_args("m.json")
    assert args[args.index("--fc-conv-share") + 1] == "0.25" and args[args.index("--micro-batches") + 1] == "2"
    assert c.label == "stanza k=1 share=0.25 M=2"
    assert {k: c.layout()[k] for k in ("fc_conv_share", "micro_batches")} == {"fc_conv_share": 0.25, "micro_batches": 2}
    assert c.cache_key()["fc_conv_share"] == 0.25 and c.cache_key()["micro_batches"] == 2
    plain = RunConfig(**BASE, strategy="stanza", fc_workers=1, fc_conv_share=0)
    a = plain.train_args("m.json")
    assert "--fc-conv-share" not in a and "--micro-batches" not in a  # defaults stay off the command line
    # the cache key of a configuration at the defaults is the key it had before these fields existed
    assert "fc_conv_share" not in plain.cache_key() and "micro_batches" not in plain.cache_key()
    assert plain.to_dict()["fc_conv_share"] == 0.0 and isinstance(plain.variant.options.fc_conv_share, float)
    # a hybrid share moves samples onto the FC worker: G = 100 on 3 CONV workers is fine with share 0.25
    hybrid = RunConfig(**{**BASE, "global_batch": 100}, strategy="stanza", fc_workers=1, fc_conv_share=0.25)
    assert hybrid.global_batch == 100


@pytest.mark.parametrize("change", [{"strategy": "ddp", "micro_batches": 2}, {"strategy": "ps", "fc_conv_share": 0.25},
                                    {"micro_batches": 0}, {"fc_conv_share": 1.0}, {"fc_conv_share": -0.1}])
def test_run_config_refuses_stanza_options_as_the_cli_does(change):
    """The same check in the same words, each in its own spelling (the CLI's flags, the API's names)."""
    opts = {"strategy": "stanza", **change}
    with pytest.raises(ValueError) as cli:
        TrainConfig(**{k: v for k, v in {**BASE, **opts}.items() if k not in ("nodes", "link_mbit")})
    with pytest.raises(ValueError) as ours:
        RunConfig(**BASE, fc_workers=1 if opts["strategy"] == "stanza" else 0, **opts)
    as_api = re.sub(r"--([a-z-]+)", lambda m: m.group(1).replace("-", "_"), str(cli.value)).replace("strategy ", "")
    assert str(ours.value) == as_api and "\n" not in str(ours.value)


@pytest.mark.parametrize("change, message", [
    ({"micro_batches": 2.5}, "micro_batches must be a positive integer, got 2.5"),  # the options' own checks
    ({"micro_batches": True}, "micro_batches must be a positive integer, got True"),
    ({"fc_conv_share": "0.25"}, "fc_conv_share must be in [0, 1), got '0.25'"),
    ({"fc_conv_share": 0.1}, "--fc-conv-share 0.1 of --global-batch 24 is 2.4 samples"),
    ({"micro_batches": 13}, "--micro-batches 13 exceeds the 12 samples of the smallest worker batch"),
    ({"fc_conv_share": 0.25, "micro_batches": 7}, "--micro-batches 7 exceeds the 6 samples"),
])
def test_run_config_stanza_layout_errors_are_one_line(change, message):
    with pytest.raises(ValueError) as e:
        RunConfig(**{**BASE, "nodes": 3}, strategy="stanza", fc_workers=1, **change)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
