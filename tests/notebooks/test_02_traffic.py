"""notebooks/02_traffic.ipynb, executed by papermill with reproductions/traffic.yaml's tiny
parameters: cifar_alexnet on 4 ranks (ps, ddp, stanza k = 1 and 2), 2 samples per data worker,
real torchrun jobs whose counted bytes must equal the performance model's to the byte."""
import pytest

for _pkg in ("plotly", "papermill", "nbformat", "jupytext", "ipykernel"):  # the notebook stack (not on every GPU VM)
    pytest.importorskip(_pkg, reason=f"the notebook tests need {_pkg}")

import nbformat
from papermill.exceptions import PapermillExecutionError

from stanza_core import get_model
from stanza_core.reproduce import evaluate_claims

pytestmark = pytest.mark.slow  # a kernel plus four 4-process torchrun jobs


@pytest.fixture(scope="module")
def spec(spec_of):
    s = spec_of("traffic")
    assert s.notebook.name == "02_traffic.ipynb"
    return s


def _ring(nbytes, n):  # what one member of an n-rank ring allreduce sends
    return 2 * (n - 1) * nbytes / n


def test_tiny_run_counts_what_the_model_says(spec, run_notebook):
    results, out, executed = run_notebook(spec, device="cpu")  # named: a GPU on the machine changes nothing
    tiny = spec.params["tiny"]
    assert (tiny["models"], tiny["nodes"], tiny["fc_workers"], tiny["per_worker"]) == (["cifar_alexnet"], [4], [1, 2], 2)
    # Exact equality, every rank, direction and category: the accounting contract.
    assert results["max_abs_diff_bytes"] == 0
    assert [r["max_abs_diff_bytes"] for r in results["runs"]] == [0, 0, 0, 0]
    cfg = results["configs"]["cifar_alexnet"]["n4"]
    assert set(cfg) == {"ps", "ddp", "stanza_k1", "stanza_k2"}
    # Independent oracle from the textbook formulas (not from stanza_core.perf):
    model = get_model("cifar_alexnet", 10)
    P = sum(p.numel() for p in model.parameters())
    Pf = sum(p.numel() for p in model.classifier.parameters())
    Pc, A, N, b = P - Pf, 96 * 4 * 4, 4, 2  # boundary "flatten": the 96x4x4 adaptive-pool output
    assert cfg["ps"]["bytes_per_step"] == 2 * (N - 1) * 4 * P  # each rank's own shard stays local
    assert cfg["ddp"]["bytes_per_step"] == round(N * _ring(4 * P, N))
    for k in (1, 2):
        nc, G = N - k, b * (N - k)
        expect = 2 * 4 * A * G + 8 * G + nc * _ring(4 * Pc, nc) + k * _ring(4 * Pf, k)
        assert cfg[f"stanza_k{k}"]["bytes_per_step"] == pytest.approx(expect, abs=nc + k)  # whole-byte rounding
    assert cfg["stanza_k1"]["ps_over_this_total"] == pytest.approx(2 * 3 * 4 * P / cfg["stanza_k1"]["bytes_per_step"])
    assert cfg["stanza_k1"]["ps_over_this_total"] > 10  # 3.8 M FC params stay put
    # VGG-16's curve at the paper's 224x224 counts, from the model.
    v = results["paper_model"]["vgg16"]
    assert v["counts"] == {"conv_params": 14_714_688, "fc_params": 123_642_856, "boundary_values": 25088}
    P16, Pc16, A16 = 14_714_688 + 123_642_856, 14_714_688, 25088
    for n in (4, 8, 16):
        G = b * (n - 1)
        st = 2 * 4 * A16 * G + 8 * G + (n - 1) * _ring(4 * Pc16, n - 1)
        assert v["by_nodes"][f"n{n}"]["total"] == pytest.approx(2 * (n - 1) * 4 * P16 / st, rel=1e-6)
    for key in ("table", "bytes", "ratio"):
        assert (out / f"{key}.html").is_file() and (out / f"{key}.plotly.json").is_file()
    nb = nbformat.read(executed, as_version=4)
    assert not [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    rows = {r["key"]: r["status"] for r in evaluate_claims(spec, results, "tiny")[0]}
    assert rows["max_abs_diff_bytes"] == "goal met"
    assert rows["configs.alexnet.n4.ps.bytes_per_step"] == "not in tiny run"


def test_too_many_fc_workers_fail_at_the_first_code_cell(spec, run_notebook, tmp_path):
    with pytest.raises(PapermillExecutionError) as e:
        run_notebook(spec, fc_workers=[1, 3])
    assert e.value.ename in ("ValueError", "ConfigError") and "\n" not in e.value.evalue
    assert e.value.evalue.startswith("fc_workers 3 needs nodes >= 6")
    nb = nbformat.read(tmp_path / spec.notebook.name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    injected = next(i for i, c in enumerate(code) if "injected-parameters" in c.metadata.get("tags", []))
    assert code[injected + 1].outputs[-1].output_type == "error"
    assert all(c.execution_count is None for c in code[injected + 2:])
