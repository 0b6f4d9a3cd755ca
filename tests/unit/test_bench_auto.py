"""bench --fc-workers auto: the optimiser's k on the device --target-device names, resolved by
perf.device_profile (table rows, measured devices such as h200-measured, PATH.json)."""
import argparse

import pytest

from stanza_core.bench import auto_fc_workers, main
from stanza_core.perf import Cluster, best_assignment, device_profile, named_profile


def _args(device: str) -> argparse.Namespace:
    return argparse.Namespace(model="alexnet", image_size=224, num_classes=1000, nodes=4, global_batch=96,
                              target_gbps="100", link_mbit=None, target_device=device)


@pytest.mark.parametrize("device", ["h200-measured", "v100"])
def test_auto_fc_workers_takes_every_device_the_checks_accept(device):
    profile = named_profile("alexnet", 224, 1000, 24)
    dev = device_profile(device, profile, 24).profile
    expected = best_assignment(profile, Cluster(4, 100.0, device=dev), 96).best_stanza().fc_workers
    assert auto_fc_workers(_args(device)) == expected and expected in (1, 2)


def test_auto_fc_workers_on_a_model_the_record_lacks_fails_in_one_line(capsys):
    rc = main(["--model", "tiny_cnn", "--image-size", "32", "--fc-workers", "auto", "--target-gbps", "10",
               "--target-device", "h200-measured"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert err.startswith("error: --target-device h200-measured has no measured record of tiny_cnn")
