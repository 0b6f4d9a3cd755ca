"""notebooks/01_layer_anatomy.ipynb, executed by papermill with reproductions/anatomy.yaml's tiny
parameters (AlexNet and tiny_cnn at 64x64, timed at batch 2 on the CPU)."""
import dataclasses

import pytest

for _pkg in ("plotly", "papermill", "nbformat", "jupytext", "ipykernel"):  # the notebook stack (not on every GPU VM)
    pytest.importorskip(_pkg, reason=f"the notebook tests need {_pkg}")

import nbformat
from papermill.exceptions import PapermillExecutionError

from stanza_core import Profile, get_model, profile_model
from stanza_core.reproduce import evaluate_claims

pytestmark = pytest.mark.slow  # each test starts a kernel and imports torch: ~10 s


@pytest.fixture(scope="module")
def spec(spec_of):
    s = spec_of("anatomy")
    assert s.notebook.name == "01_layer_anatomy.ipynb"
    return s


def _untimed(p: Profile) -> Profile:
    return dataclasses.replace(p, conv=dataclasses.replace(p.conv, fwd_s=None, bwd_s=None),
                               fc=dataclasses.replace(p.fc, fwd_s=None, bwd_s=None), timed_on=None)


def test_tiny_run_writes_the_numbers_and_figures(spec, run_notebook):
    results, out, executed = run_notebook(spec, device="cpu")  # named: a GPU on the machine changes nothing
    assert spec.params["tiny"]["image_size"] == 64 and set(results["models"]) == {"alexnet", "tiny_cnn"}
    a = results["models"]["alexnet"]
    # Counts do not depend on the input size: the paper's AlexNet numbers, exactly.
    assert (a["conv_params"], a["fc_params"]) == (2_469_696, 58_631_144)
    assert a["fc_param_share"] == pytest.approx(0.960, abs=0.0005)
    assert a["fc_flops"] == 2 * (9216 * 4096 + 4096 * 4096 + 4096 * 1000)  # 2 FLOPs per MAC, no bias
    # At 64x64 the feature map is 256x1x1, smaller than the 6x6 the adaptive pool would make.
    assert a["boundary"] == "avgpool" and a["boundary_values"] == 256
    t = a["timing"]
    assert t["device"] == "cpu" and t["batch_size"] == 2
    assert t["conv_fwd_s"] > 0 and t["fc_fwd_s"] > 0 and 0 < t["fc_time_share"] < 1
    # Oracle: the notebook's profile equals one taken here directly (timings aside).
    direct = profile_model(get_model("alexnet"), (3, 64, 64), batch_size=2, name="alexnet")
    assert _untimed(Profile.from_dict(results["profiles"]["alexnet"])) == direct
    for key in ("table", "layers", "shares", "times"):
        assert (out / f"{key}.html").is_file() and (out / f"{key}.plotly.json").is_file()
    nb = nbformat.read(executed, as_version=4)
    assert not [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    rows = {r["key"]: r["status"] for r in evaluate_claims(spec, results, "tiny")[0]}
    # counted facts, judged as the project's goals (never agreement with the paper)
    assert rows["models.alexnet.fc_params"] == rows["models.alexnet.fc_param_share"] == "goal met"
    assert rows["models.alexnet.boundary_values"] == "goal missed"  # 9216 is the 224x224 figure
    assert rows["models.vgg16.fc_params"] == "not in tiny run"


def test_unknown_model_fails_at_the_first_code_cell_with_one_line(spec, run_notebook, tmp_path):
    with pytest.raises(PapermillExecutionError) as e:
        run_notebook(spec, models=["alexnet", "no_such_model"])
    err = e.value
    assert err.ename in ("ValueError", "ConfigError")
    assert "\n" not in err.evalue and err.evalue.startswith("unknown model 'no_such_model'; expected one of:")
    nb = nbformat.read(tmp_path / spec.notebook.name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]  # papermill adds markdown banners
    injected = next(i for i, c in enumerate(code) if "injected-parameters" in c.metadata.get("tags", []))
    failing, later = code[injected + 1], code[injected + 2:]  # the first cell after the parameters
    assert failing.source == err.source and failing.outputs[-1].output_type == "error"
    assert later and all(c.execution_count is None for c in later)  # nothing ran after it
    assert not (tmp_path / spec.name / "results.json").exists()
