"""Reproduction specs: load and check the YAML files, evaluate their claims against results.json.

The schema is documented in `stanza_core.reproduce`; its structure (keys, types, bounds) is the
JSON Schema `spec.schema.json` beside this file, checked with jsonschema. What a schema cannot
say is checked here after it: the notebook exists and declares every parameter a mode sets, a
claim's kind names its compute source, its format formats, its category (tally).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .tally import bounds, category_problem, counts_figure, figure_problems, inside_bound, is_number, category_of, verdict

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER = ".stanza-reproduce"
MODES = ("quick", "full", "tiny")
REQUIREMENTS = ("linux", "root", "tc", "cuda")
SCHEMA_PATH = Path(__file__).with_name("spec.schema.json")
NOT_MEASURED = "not measured (modelled only)"  # a measured or calibrated claim of a run that measured nothing
# What a claim's number is (its `kind`, written in the YAML, never read from the claim's text):
#   measured  timed or trained on this machine (real compute, emulated links)
#   replayed  run on the emulated cluster with each layer's compute waited from a device
#             profile: "replayed (<device> profile)", the device as perf names it (v100, h200-measured)
#   modelled  the performance model's prediction, no run
#   counted   counted exactly: parameters, FLOPs, bytes on the engine's counters
#   simulated the engine's program timed on SimGrid (stanza_core.sim), compute from a device row:
#             "simulated (<device> row)"
KINDS = ("measured", "replayed", "modelled", "counted", "simulated")
_REPLAYED = re.compile(r"replayed \((?P<device>[\w.-]+) profile\)")
_SIMULATED = re.compile(r"simulated \((?P<device>[\w.-]+) row\)")


def kind_problem(kind: Any) -> str | None:
    """Why `kind` is not a claim kind (one line), or None: one of KINDS, a replayed one naming
    its compute source as "replayed (<device> profile)", a simulated one as "simulated (<device> row)"."""
    if kind in ("measured", "modelled", "counted"):
        return None
    if isinstance(kind, str) and (_REPLAYED.fullmatch(kind) or _SIMULATED.fullmatch(kind)):
        return None
    return (f"kind must be measured, modelled, counted, 'replayed (<device> profile)' or 'simulated (<device> "
            f"row)' (the compute source, e.g. 'replayed (v100 profile)'), got {kind!r}")


def replayed_device(kind: str) -> str | None:
    """The device profile a replayed claim's compute follows ('v100' for 'replayed (v100 profile)'), else None."""
    m = _REPLAYED.fullmatch(kind) if isinstance(kind, str) else None
    return m["device"] if m else None


class SpecError(ValueError):
    """A reproduction YAML is malformed (one line: file and problem)."""


@functools.lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))


def schema_problem(d: Any) -> str | None:
    """The first problem jsonschema finds in a spec (its most relevant error), as one line: where
    (`claim 2 expect`, or `top level`) and what, in the schema's own words where a node of
    spec.schema.json says them (`message`); None when the spec fits the schema."""
    err = jsonschema.exceptions.best_match(_validator().iter_errors(d))
    if err is None:
        return None
    parts = list(err.absolute_path)
    if parts[:1] == ["claims"] and len(parts) > 1:  # "claim 3 expect", as the rest of the checks name a claim
        parts = [f"claim {parts[1]}", *parts[2:]]
    where = " ".join(map(str, parts))
    node, message = _validator().schema, None
    for part in err.absolute_schema_path:  # the deepest node on the failing path that words its rule
        node = node.get(part) if isinstance(node, dict) else node[part] if isinstance(node, list) else None
        if isinstance(node, dict) and "$ref" in node:
            node = _validator().schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
        if isinstance(node, dict) and "message" in node:
            message = node["message"]
    detail = err.message.splitlines()[0][:160]
    return f"{where or 'top level'}: {message + f' ({detail})' if message else detail}"


@dataclasses.dataclass(kw_only=True)
class Spec:
    name: str  # file stem; also the output folder's name
    path: Path  # the YAML file
    title: str
    notebook: Path  # absolute
    paper: str
    params: dict[str, dict[str, Any]]  # mode -> parameters ("tiny" defaults to "quick")
    claims: list[dict[str, Any]]
    requires: list[str] = dataclasses.field(default_factory=list)
    timeout_s: int | None = None


def load_spec(path: str | os.PathLike, root: Path | None = None) -> Spec:
    """Read and check one reproduction YAML; `root` (default: the YAML folder's parent) anchors
    the notebook path."""
    path = Path(path)
    root = path.resolve().parent.parent if root is None else root

    def bad(msg: str):
        raise SpecError(f"{path}: {msg}")

    try:
        d = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        bad(f"not valid YAML ({str(e).splitlines()[0]})")
    if not isinstance(d, dict):
        bad("expected a mapping at the top level")
    if problem := schema_problem(d):
        bad(problem)
    notebook = (root / d["notebook"]).resolve()
    if not notebook.is_file():
        bad(f"notebook {d['notebook']!r} does not exist under {root}")
    import papermill as pm  # slow import: only once a spec is worth checking

    declared = set(pm.inspect_notebook(str(notebook)))
    if "out_dir" not in declared:
        bad(f"{d['notebook']} has no out_dir parameter")
    params = {}
    for mode in MODES:
        p = d.get(mode, d.get("quick"))
        if undeclared := sorted(set(p) - declared):
            bad(f"{mode} sets {undeclared}, not parameters of {d['notebook']} ({sorted(declared)})")
        if "out_dir" in p:
            bad(f"{mode} sets out_dir: it is chosen by the runner")
        params[mode] = dict(p)
    requires, claims = d.get("requires", []), d["claims"]
    for i, c in enumerate(claims):
        if problem := kind_problem(c["kind"]):
            bad(f"claim {i} ({c['claim']}): {problem}")
        try:
            c.get("format", "{}").format(1.0)
        except (ValueError, IndexError, KeyError) as err:
            bad(f"claim {i}: bad format {c.get('format')!r} ({err})")
        if problem := category_problem(c):
            bad(f"claim {i} ({c['claim']}): {problem}")
    timeout = d.get("timeout_s")
    return Spec(name=path.stem, path=path, title=str(d["title"]), notebook=notebook, paper=str(d["paper"]),
                params=params, claims=claims, requires=requires, timeout_s=timeout)


def load_specs(specs_dir: Path) -> list[Spec]:
    paths = sorted(Path(specs_dir).glob("*.yaml"))
    if not paths:
        raise SpecError(f"{specs_dir}: no reproduction YAML files")
    specs = [load_spec(p) for p in paths]
    if problems := figure_problems({s.name: s.claims for s in specs}, complete=False):  # a subset may leave some out
        raise SpecError(f"{specs_dir}: {problems[0]}")
    return specs


# ---------------------------------------------------------------------------------------------
# Claims


def lookup(results: Any, key: str) -> Any:
    """results['a']['b'][0] for key 'a.b.0'; KeyError naming the first missing part."""
    obj = results
    for part in key.split("."):
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and part.lstrip("-").isdigit() and -len(obj) <= int(part) < len(obj):
            obj = obj[int(part)]
        else:
            raise KeyError(f"{key!r}: no {part!r}")
    return obj


def _fmt(c: dict[str, Any], value: Any) -> str:
    """A value in the claim's format (after its scale); a [low, high] pair as "low to high"."""
    fmt = c.get("format", "{}")
    if isinstance(value, list) and len(value) == 2 and all(map(is_number, value)):
        return " to ".join(fmt.format(v * c.get("scale", 1)) for v in value)
    return fmt.format(value * c.get("scale", 1) if is_number(value) else value)


def evaluate_claims(spec: Spec, results: dict | None, mode: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Report rows (claim, kind, category, paper, ours, value, status, deviation) and the keys that
    are missing. kind: what the number is (the YAML's `kind`: measured, replayed (...), modelled,
    counted); category: tally.category_of (paper, goal, reported). status: a verdict of
    tally.verdict (agrees / differs, goal met / goal missed, reported), or why there is no value
    (missing, not in <mode> run, not measured)."""
    rows, missing = [], []
    modelled_only = (results or {}).get("modelled_only")
    for c in spec.claims:
        category = category_of(c)
        row = {"claim": c["claim"], "kind": c.get("kind", ""), "category": category, "paper": str(c["paper"]),
               "key": c["ours"],
               "deviation": c.get("deviation", ""), "ours": "not measured", "value": None, "status": "missing"}
        row.update({k: c[k] for k in ("figure", "bound_rule", "goal", "paper_figure", "explained", "ps") if k in c})
        row["counted"] = counts_figure(c)  # the one claim that counts its paper figure
        gated = c.get("measured") or c.get("calibrated")  # needs the measured runs: no root or tc, or measuring off
        if modelled_only and gated:  # gated, not failed
            rows.append({**row, "status": NOT_MEASURED})
            continue
        try:
            value = lookup(results if results is not None else {}, c["ours"])
            if value is None:  # a figure the run could not compute (e.g. nothing to fit): not measured
                raise KeyError(c["ours"])
        except KeyError:
            if mode in c.get("modes", ["quick", "full"]):
                missing.append(c["ours"])
            else:
                row["status"] = f"not in {mode} run"
            rows.append(row)
            continue
        row["value"], row["ours"] = value, _fmt(c, value)
        if "sharded" in c:  # the same figure against the workbench's sharded PS, shown beside
            try:
                row["sharded"] = _fmt(c, lookup(results or {}, c["sharded"]))
            except KeyError:
                row["sharded"] = "not in this run"
        if is_number(value):
            value = row["value"] = value * c.get("scale", 1)
        b = bounds(c)
        lohi = b.get("any", b.get(mode))  # a bound per mode: each set from that mode's measured spread
        inside = None if lohi is None else inside_bound(c, value, lohi)
        row["status"] = verdict(category, inside)
        rows.append(row)
    return rows, missing
