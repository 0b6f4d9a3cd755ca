"""Every training flag, tried as a new user would, under each strategy and at world size 1.

Each row: the flags given, the strategy, the world size, and what must happen before any work
(before any process group forms):
  ("error", fragment)    exit 2 and one line on stderr containing fragment
  ("warning", fragment)  the flag has no effect here but harms nothing: one warning line, the run goes on
  ("ok", None)           the flag applies: no warning
A completeness check makes sure every TrainConfig field is tried at least once.

Error rows run `train.main` in-process with torchrun's environment for rank 0 (no MASTER_ADDR,
so a process group could not form); the others run `train.prepare`, which checks everything a
user can get wrong and prints the warnings, and stop there (no process group, no training).
"""
import dataclasses

import pytest
import torch.distributed as dist

from stanza_core import registry, train
from stanza_core.engine.config import TrainConfig

E, W, OK = "error", "warning", "ok"
ONLY_STANZA = "applies to --strategy stanza only"
ONLY_PS = "applies to --strategy ps only"
REPLAY = ["--compute", "replay", "--replay-device", "v100"]

CASES = [  # (flags, strategy, world size, outcome, fragment)
    # the layout
    (["--strategy", "local"], "local", 2, E, "strategy local runs in one process"),
    (["--strategy", "allreduce"], "ddp", 4, E, "unknown strategy"),
    (["--global-batch", "10"], "ps", 4, E, "not divisible by the 4 data workers"),
    (["--global-batch", "10"], "stanza", 4, E, "not divisible by the 3 data workers"),
    (["--global-batch", "0"], "local", 1, E, "--global-batch must be >= 1"),
    (["--fc-workers", "2"], "ddp", 4, E, "--fc-workers 2 applies to --strategy stanza only, not ddp"),
    (["--fc-workers", "2"], "ps", 4, E, "--fc-workers 2 applies to --strategy stanza only, not ps"),
    (["--fc-workers", "3"], "local", 1, E, "--fc-workers 3 applies to --strategy stanza only"),
    (["--fc-workers", "0"], "ddp", 4, OK, None),
    (["--fc-workers", "2"], "stanza", 4, OK, None),
    (["--fc-workers", "3"], "stanza", 4, E, "leaves an FC worker with no CONV worker"),
    (["--fc-workers", "1"], "stanza", 1, E, "stanza needs at least 2 ranks"),
    (["--ps-shards", "2"], "ddp", 4, E, "--ps-shards 2 applies to --strategy ps only, not ddp"),
    (["--ps-shards", "2"], "stanza", 4, E, "--ps-shards 2 applies to --strategy ps only, not stanza"),
    (["--ps-shards", "1"], "local", 1, E, "--ps-shards 1 applies to --strategy ps only, not local"),
    (["--ps-shards", "2"], "ps", 4, OK, None),
    (["--ps-shards", "5"], "ps", 4, E, "exceeds the 4 ranks"),
    (["--ps-servers", "1"], "ddp", 4, E, ONLY_PS),
    (["--ps-servers", "1"], "ps", 1, E, "leaves no data worker among 1 ranks"),
    (["--ps-servers", "1", "--global-batch", "12"], "ps", 4, OK, None),
    (["--ps-overlap"], "stanza", 4, E, ONLY_PS),
    (["--ps-overlap"], "local", 1, E, ONLY_PS),
    (["--ps-overlap"], "ps", 4, OK, None),
    (["--fc-conv-share", "0.25"], "ddp", 4, E, ONLY_STANZA),
    (["--fc-conv-share", "0.25"], "stanza", 4, OK, None),
    (["--micro-batches", "2"], "ps", 4, E, ONLY_STANZA),
    (["--micro-batches", "2"], "stanza", 4, OK, None),
    (["--boundary-dtype", "bf16"], "ddp", 4, E, ONLY_STANZA),
    (["--boundary-dtype", "bf16"], "stanza", 4, OK, None),
    (["--grad-compression", "fp16"], "local", 1, E, ONLY_STANZA),
    (["--grad-compression", "fp16"], "stanza", 4, OK, None),
    (["--boundary", "classifier.1"], "ddp", 4, W, "--boundary has no effect with ddp"),
    (["--boundary", "classifier.1"], "local", 1, W, "--boundary has no effect with local"),
    (["--boundary", "classifier.1"], "stanza", 4, OK, None),
    # the model and the data
    (["--model", "lenet9"], "ps", 4, E, "unknown model 'lenet9'"),
    (["--num-classes", "0"], "stanza", 4, E, "--num-classes must be >= 1"),
    (["--image-size", "0"], "ddp", 1, E, "--image-size must be >= 1"),
    (["--dataset", "mnist"], "stanza", 4, E, "unknown dataset 'mnist'"),
    (["--dataset", "digits", "--num-classes", "10"], "ddp", 4, OK, None),
    (["--bn-stats", "local"], "local", 1, W, "--bn-stats local has no effect with one data worker"),
    (["--bn-stats", "local"], "ddp", 1, W, "--bn-stats local has no effect with one data worker"),
    (["--bn-stats", "local"], "stanza", 2, W, "--bn-stats local has no effect with one data worker"),
    (["--bn-stats", "local"], "ps", 4, OK, None),
    # steps and the throughput
    (["--steps", "0"], "ddp", 4, E, "--steps must be >= 1"),
    (["--steps", "1"], "local", 1, E, "--warmup 1 leaves no timed step of --steps 1"),
    (["--steps", "3", "--warmup", "3"], "ddp", 4, E, "leaves no timed step"),
    (["--steps", "3", "--warmup", "5"], "ps", 4, E, "leaves no timed step"),
    (["--steps", "2", "--warmup", "2"], "stanza", 4, E, "expected --warmup < --steps"),
    (["--steps", "1", "--warmup", "0"], "local", 1, OK, None),
    (["--warmup", "-1"], "stanza", 4, E, "--warmup must be >= 0"),
    (["--log-every", "0"], "ddp", 4, E, "--log-every must be >= 1"),
    (["--log-every", "4"], "stanza", 4, OK, None),
    # the optimizer
    (["--lr", "0"], "ddp", 4, E, "--lr must be > 0"),
    (["--momentum", "1"], "ps", 4, E, "--momentum must be in [0, 1)"),
    (["--weight-decay", "-1"], "local", 1, E, "--weight-decay must be >= 0"),
    (["--seed", "-1"], "stanza", 4, E, "--seed must be in [0, "),
    (["--seed", "7", "--lr", "0.1", "--momentum", "0", "--weight-decay", "1e-4"], "stanza", 4, OK, None),
    # replayed compute
    (["--compute", "replay"], "ddp", 4, E, "--compute replay needs --replay-device"),
    (["--compute", "fake"], "ddp", 4, E, "unknown --compute 'fake'"),
    (["--replay-device", "v100"], "stanza", 4, E, "--replay-device, --dilation, --replay-wait and --replay-jitter need --compute replay"),
    (["--dilation", "4"], "ps", 4, E, "--replay-device, --dilation, --replay-wait and --replay-jitter need --compute replay"),
    ([*REPLAY, "--dilation", "0"], "ddp", 4, E, "--dilation must be > 0"),
    ([*REPLAY, "--dilation", "4"], "ddp", 4, OK, None),
    ([*REPLAY, "--replay-wait", "spin"], "ps", 4, OK, None),
    ([*REPLAY, "--replay-wait", "cpu"], "ps", 4, OK, None),
    ([*REPLAY, "--payload-scale", "16"], "ps", 4, OK, None),
    (["--payload-scale", "2"], "ddp", 4, E, "--payload-scale 2 needs --compute replay"),
    ([*REPLAY, "--replay-wait", "hot"], "ps", 4, E, "unknown --replay-wait 'hot'; expected one of sleep, spin, cpu"),
    (["--replay-wait", "spin"], "ddp", 4, E, "--replay-wait and --replay-jitter need --compute replay"),
    ([*REPLAY, "--replay-jitter", "/nonexistent/j.json"], "stanza", 4, E,
     "--replay-jitter /nonexistent/j.json: expected a JSON object with a list of steps"),
    (["--record-program", "{tmp}/p.json"], "stanza", 4, E, "--record-program needs --compute replay"),
    ([*REPLAY, "--record-program", "{tmp}/p.json", "--replay-jitter", "{tmp}/j.json"], "ddp", 4, E,
     "--record-program records the device profile's own times"),
    ([*REPLAY, "--record-program", "{tmp}/p.json"], "ps", 4, OK, ""),
    ([*REPLAY, "--lr", "0.1"], "ddp", 4, W, "--lr has no effect with --compute replay"),
    ([*REPLAY, "--momentum", "0.5", "--weight-decay", "0.1"], "stanza", 4, W,
     "--momentum, --weight-decay have no effect with --compute replay"),
    ([*REPLAY, "--dataset", "digits"], "ps", 4, W, "--dataset has no effect with --compute replay"),
    # the network and the process group
    (["--timeout-s", "5"], "local", 1, W, "--timeout-s has no effect on one process"),
    (["--timeout-s", "5"], "ddp", 1, W, "--timeout-s has no effect on one process"),
    (["--timeout-s", "5"], "ps", 4, OK, None),
    (["--timeout-s", "0"], "stanza", 4, E, "--timeout-s must be > 0"),
    (["--backend", "gloo"], "local", 1, W, "--backend has no effect on one process"),
    (["--backend", "gloo"], "ddp", 4, OK, None),
    (["--backend", "mpi"], "ddp", 4, E, "unknown backend 'mpi'"),
    (["--backend", "nccl", "--device", "cpu"], "stanza", 4, E, "--backend nccl needs CUDA tensors"),
    (["--bucket-mb", "1"], "local", 1, W, "--bucket-mb has no effect with local"),
    (["--bucket-mb", "1"], "ps", 4, W, "--bucket-mb has no effect with ps without --ps-overlap"),
    (["--bucket-mb", "1"], "ddp", 1, W, "--bucket-mb has no effect on one process"),
    (["--bucket-mb", "1", "--ps-overlap"], "ps", 4, OK, None),
    (["--bucket-mb", "1"], "ddp", 4, OK, None),
    (["--bucket-mb", "1"], "stanza", 4, OK, None),
    (["--bucket-mb", "0"], "ddp", 4, E, "--bucket-mb must be > 0"),
    (["--device", "tpu"], "ddp", 4, E, "unknown device 'tpu'"),
    (["--device", "cpu", "--exact"], "local", 1, W, "--exact has no effect with --device cpu"),
    (["--device", "cpu"], "stanza", 4, OK, None),
    # outputs
    (["--metrics", "/proc/stanza-x/m.json"], "ddp", 4, E, "--metrics /proc/stanza-x/m.json: "),
    (["--save", "/proc/stanza-x.pt"], "local", 1, E, "--save /proc/stanza-x.pt: "),
    (["--checkpoint-dir", "/proc/stanza-x/ck"], "stanza", 4, E, "--checkpoint-dir /proc/stanza-x/ck: "),
    (["--checkpoint-dir", "/sys/stanza-ck"], "ps", 4, E, "--checkpoint-dir /sys/stanza-ck: "),
    (["--checkpoint-every", "2"], "ddp", 4, E, "--checkpoint-every needs --checkpoint-dir"),
    (["--checkpoint-every", "20", "--checkpoint-dir", "{tmp}/ck"], "stanza", 4, W,
     "--checkpoint-every 20 >= --steps 10: only the final checkpoint"),
    (["--checkpoint-every", "5", "--checkpoint-dir", "{tmp}/ck"], "local", 1, OK, None),
    (["--resume"], "ps", 4, E, "--resume needs --checkpoint-dir"),
    (["--save-every", "2"], "local", 1, E, "--save-every needs --save"),
    (["--save-every", "10", "--save", "{tmp}/m.pt"], "ddp", 4, W, "--save-every 10 >= --steps 10"),
    (["--save-every", "5", "--save", "{tmp}/m.pt"], "ps", 4, OK, None),
    ([*REPLAY, "--save", "{tmp}/m.pt"], "ddp", 4, E, "--save is refused with --compute replay"),
    (["--overwrite"], "stanza", 4, W, "--overwrite has no effect without --save, --metrics or --checkpoint-dir"),
    (["--overwrite", "--metrics", "{tmp}/m.json"], "ddp", 4, OK, None),
    (["--save", "{tmp}/same", "--metrics", "{tmp}/same"], "local", 1, E, "--save and --metrics name the same file"),
    # the compiled step
    (["--compile"], "stanza", 4, OK, None),
    (["--compile", "--compile-mode", "max-autotune"], "local", 1, OK, None),
    (["--compile-mode", "max-autotune"], "local", 1, E, "--compile-mode max-autotune needs --compile"),
    (["--compile", "--compile-mode", "fastest"], "ddp", 4, E, "--compile-mode"),
    (["--compile", "--compile-mode", "reduce-overhead"], "ddp", 4, E, "records CUDA graphs"),
    (["--compile", *REPLAY], "ddp", 4, E, "--compile is refused with --compute replay"),
    # display
    (["--quiet"], "ddp", 1, OK, None),
    (["--verbose"], "local", 1, E, "--quiet and --verbose contradict each other"),
    (["--log-csv", "/proc/stanza-x/s.csv"], "ddp", 4, E, "--log-csv /proc/stanza-x/s.csv: "),
    (["--log-csv", "{tmp}/s.csv"], "stanza", 4, OK, None),
    (["--tensorboard", "/proc/stanza-x/tb"], "stanza", 4, E, "--tensorboard /proc/stanza-x/tb: "),
    (["--tensorboard", "{tmp}/tb"], "ps", 4, OK, None),
    (["--timeline"], "local", 1, OK, None),
    (["--timeline"], "stanza", 4, OK, None),
]


def _id(case):
    flags, strategy, world, outcome, _ = case
    return f"{strategy}x{world}:{' '.join(flags)}:{outcome}".replace("{tmp}/", "")


@pytest.mark.parametrize("flags,strategy,world,outcome,fragment", CASES, ids=[_id(c) for c in CASES])
def test_flag(as_rank0_of, capsys, tmp_path, flags, strategy, world, outcome, fragment):
    as_rank0_of(world)
    argv = ["--strategy", strategy, "--global-batch", "12", *[a.replace("{tmp}", str(tmp_path)) for a in flags]]
    if "--device" not in flags:  # named, so a GPU on the machine changes nothing
        argv += ["--device", "cpu"]
    if outcome == E:
        assert train.main(argv + ["--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: ") and fragment in err, err
    else:
        train.prepare(train.parse_config(argv + ["--quiet"]))
        err = capsys.readouterr().err.strip()
        if outcome == W:
            assert len(err.splitlines()) == 1 and err.startswith("warning: ") and fragment in err, err
        else:
            assert err == "", err
    assert not dist.is_initialized()
    assert list(tmp_path.iterdir()) == [], "nothing written before the run"


def test_every_flag_is_tried():
    tried = {a[2:].replace("-", "_") for c in CASES for a in c[0] if a.startswith("--")} | {"strategy"}
    fields = {f.name for f in dataclasses.fields(TrainConfig) if f.name != "variant"} | set(registry.option_names())
    assert fields - tried == set(), f"flags never tried: {sorted(fields - tried)}"
    strategies = {(c[1], c[2] == 1) for c in CASES}
    assert {("local", True), ("ddp", True), ("ddp", False), ("ps", False), ("stanza", False)} <= strategies


def test_a_flag_without_effect_warns_once_and_the_run_goes_on(as_rank0_of, capsys, tmp_path):
    as_rank0_of(1)
    m = tmp_path / "m.json"
    assert train.main(["--strategy", "local", "--steps", "2", "--global-batch", "4", "--bucket-mb", "2",
                       "--metrics", str(m), "--quiet", "--device", "cpu"]) == 0
    err = capsys.readouterr().err.strip()
    assert err == "warning: --bucket-mb has no effect with local: no gradient buckets are exchanged", err
    assert m.is_file()
