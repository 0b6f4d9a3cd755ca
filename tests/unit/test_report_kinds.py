"""Every claim says what its number is (`kind`: measured, replayed (<device> profile), modelled,
counted), written in its YAML and shown in the report's claim table. A replayed claim names the
device profile its notebook replays with. No notebook runs: seconds."""
import ast
import json
from pathlib import Path

import pytest
import yaml

from stanza_core.reproduce.spec import (KINDS, REPO_ROOT, Spec, SpecError, evaluate_claims, kind_problem, load_spec,
                                        replayed_device)

SPECS = REPO_ROOT / "reproductions"
YAMLS = sorted(SPECS.glob("*.yaml"))


def _claims():
    return [(p.name, c) for p in YAMLS for c in yaml.safe_load(p.read_text())["claims"]]


def test_every_claim_of_every_reproduction_has_a_valid_kind():
    assert YAMLS, "no reproductions/*.yaml found"
    bad = [f"{name}: {c['claim']}: {kind_problem(c.get('kind'))}" for name, c in _claims()
           if kind_problem(c.get("kind"))]
    assert bad == []
    used = {c["kind"].split(" (")[0] for _, c in _claims()}
    assert used == set(KINDS)  # not vacuous: every kind is in use


@pytest.mark.parametrize("kind, problem", [
    ("measured", False), ("modelled", False), ("counted", False),
    ("replayed (v100 profile)", False), ("replayed (h200-measured profile)", False),
    ("replayed", True),  # no compute source
    ("replayed ()", True), ("replayed (v100)", True), ("Measured", True), ("model", True), (None, True), (1, True),
])
def test_kind_problem(kind, problem):
    assert (kind_problem(kind) is not None) == problem


def _notebook_defaults(notebook: Path) -> dict:
    import papermill as pm

    return {n: ast.literal_eval(p["default"]) for n, p in pm.inspect_notebook(str(notebook)).items()
            if p.get("default") not in (None, "None")}


def test_a_replayed_claim_names_the_profile_its_notebook_replays_with():
    """The device in "replayed (<device> profile)" is the notebook's replay device in every mode
    the claim runs in (the parameter `replay_device`, or `device` where the notebook has no other)."""
    checked, wrong = 0, []
    for path in YAMLS:
        spec = load_spec(path)
        replayed = [c for c in spec.claims if replayed_device(c["kind"])]
        if not replayed:
            continue
        defaults = _notebook_defaults(spec.notebook)
        param = "replay_device" if "replay_device" in defaults else "device"
        for c in replayed:
            for mode in c.get("modes", ["quick", "full"]):
                device = spec.params[mode].get(param, defaults[param])
                checked += 1
                if device != replayed_device(c["kind"]):
                    wrong.append(f"{path.name}: {c['claim']} ({mode}): {c['kind']}, but {param} = {device!r}")
    assert wrong == []
    assert checked > 0


def _write_spec(tmp_path: Path, claim: dict) -> Path:
    path = tmp_path / "reproductions" / "planted.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({"title": "planted", "notebook": str(REPO_ROOT / "notebooks" / "08_explorer.ipynb"),
                                    "paper": "-", "quick": {}, "full": {}, "claims": [claim]}))
    return path


@pytest.mark.parametrize("change, message", [
    ({"kind": None}, "needs claim, kind, paper and ours"),
    ({"kind": "replayed"}, "kind must be measured, modelled, counted, 'replayed (<device> profile)' or 'simulated (<device> row)'"),
    ({"kind": "simulated (v100)"}, "got 'simulated (v100)'"),
    ({"kind": "simulated"}, "got 'simulated'"),
])
def test_a_claim_without_a_valid_kind_is_refused(tmp_path, change, message):
    claim = {k: v for k, v in {"claim": "x", "kind": "modelled", "paper": "-", "ours": "a", **change}.items()
             if v is not None}
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_spec(_write_spec(tmp_path, claim))
    load_spec(_write_spec(tmp_path, {"claim": "x", "kind": "replayed (v100 profile)", "paper": "-", "ours": "a"}))
    load_spec(_write_spec(tmp_path, {"claim": "x", "kind": "simulated (h100 row)", "paper": "-", "ours": "a"}))


def test_the_report_shows_each_claims_kind_in_its_own_column(tmp_path):
    pytest.importorskip("plotly", reason="the report embeds plotly figures")
    from stanza_core.reproduce.report import write_index

    claims = [{"claim": "planted replayed", "kind": "replayed (v100 profile)", "paper": "-", "ours": "a"},
              {"claim": "planted counted", "kind": "counted", "paper": "-", "ours": "b"}]
    spec = Spec(name="planted", path=Path("planted.yaml"), title="planted", notebook=Path("planted.ipynb"),
                paper="-", params={}, claims=claims)
    rows = evaluate_claims(spec, {"a": 1.5, "b": 3}, "quick")[0]
    assert [r["kind"] for r in rows] == ["replayed (v100 profile)", "counted"]
    (tmp_path / "planted").mkdir()
    (tmp_path / "planted" / "status.json").write_text(json.dumps(
        {"name": "planted", "title": "planted", "paper": "-", "mode": "quick", "status": "ok", "error": None,
         "duration_s": 0.1, "executed": None, "html": None, "parameters": {}, "claims": rows}))
    page = write_index(tmp_path, [spec]).read_text()
    assert "<th>claim</th><th>kind</th><th>paper</th>" in page
    assert "<td>planted replayed</td><td class='kind'>replayed (v100 profile)</td>" in page
    assert "<td>planted counted</td><td class='kind'>counted</td>" in page
    index = json.loads((tmp_path / "index.json").read_text())
    assert [c["kind"] for c in index["experiments"][0]["claims"]] == ["replayed (v100 profile)", "counted"]


def test_the_schema_is_valid_and_names_the_checks_values():
    """spec.schema.json is a valid JSON Schema whose enums are the code's (REQUIREMENTS, MODES)
    and every committed reproduction fits it."""
    import json

    import jsonschema

    from stanza_core.reproduce.spec import MODES, REQUIREMENTS, SCHEMA_PATH, schema_problem
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["requires"]["items"]["enum"] == list(REQUIREMENTS)
    assert schema["$defs"]["claim"]["properties"]["modes"]["items"]["enum"] == list(MODES)
    assert set(schema["required"]) | {"requires", "timeout_s", "tiny"} == set(schema["properties"])
    for path in sorted((REPO_ROOT / "reproductions").glob("*.yaml")):
        assert schema_problem(yaml.safe_load(path.read_text())) is None, path.name
    assert schema_problem({"title": "t"}) == "top level: 'notebook' is a required property"
