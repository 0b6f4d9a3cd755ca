"""The tables of docs/results.md, recomputed from what the repository holds: the claims of
reproductions/*.yaml (figure, bound, rule), the full grid's stored runs (benchmarks/results/full),
the committed benchmark results (benchmarks/results/*.json) and, for counted and modelled
figures, the library itself (parameter counts and the performance model: deterministic, seconds).
Measures nothing.

    python benchmarks/results_page.py            # print the generated tables
    python benchmarks/results_page.py --write    # rewrite them in docs/results.md
    python benchmarks/results_page.py --check    # exit 1 if docs/results.md's tables differ, a link is broken,
                                                  # or a notebook's markdown cites a file that is not there
    python benchmarks/results_page.py --figure   # redraw the README's picture (docs/img/paper_scale_speedups.png)

Each table sits between `<!-- results:NAME:begin -->` and `<!-- results:NAME:end -->` in the page;
the prose around them is written by hand. A replayed figure is labelled by the device row and
measurement version of the stored runs it rests on (replayed_row, runs_label), a modelled one by the
row the model computes with (modelled_how): no label is written here by hand. Verdicts come from the claims' own bounds through
stanza_core.reproduce (spec.evaluate_claims, tally), as `make reproduce FULL=1` would print them.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from stanza_core.reproduce.spec import evaluate_claims, load_spec  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "results.md"
FULL = "make reproduce FULL=1"


def _json(rel: str) -> dict:
    return json.loads((RESULTS / rel).read_text())


def grid() -> list[dict]:
    """Every configuration of the full grid's store by its newest entry (runs.store.Store.latest:
    the current measurement version's, else an older version's, each with its "version")."""
    from stanza_core.runs.store import Store

    return Store(RESULTS / "full").latest()


# A stored run's key names the device-table row it replayed ("v100"), not the row's version, and a
# row that changed kept its name: which row a measurement version's runs used, by today's table names
# (stanza_core/perf/rows.py), where it is not the row of that name. Versions 1 and 2 replayed the V100
# row v2 (today's "v100-v2": the history of MEASUREMENT_VERSION in stanza_core/runs/store.py); from
# version 3 on "v100" is row v3. ROWS_READ_AT is the MEASUREMENT_VERSION this was last read against:
# tests/unit/test_results_labels.py fails once the version moves on, until this is read again.
RENAMED_ROWS: dict[int, dict[str, str]] = {1: {"v100": "v100-v2"}, 2: {"v100": "v100-v2"}}
ROWS_READ_AT = 4


def replayed_row(entry: dict) -> str:
    """The device a stored run's compute was replayed from, by today's name: its key's replay_device,
    or the row that name stood for at the run's measurement version (RENAMED_ROWS)."""
    device = str(entry["key"]["replay_device"])
    return RENAMED_ROWS.get(entry["version"], {}).get(device, device)


def row_name(device: str) -> str:
    """How the page names a compute source: a device-table row by its version (perf.rows.row_version:
    "v100 row v3"), anything else (a measured record such as h200-measured) as a record."""
    from stanza_core.perf.devices import DEVICE_TABLE
    from stanza_core.perf.rows import row_version

    return row_version(device).split(" (")[0] if device in DEVICE_TABLE else f"{device} record"


def modelled_how(device: str = "v100") -> str:
    """The label of a modelled figure: the row the model computes with."""
    return f"modelled ({row_name(device)})"


def _timed(e: dict) -> int:
    return len(e["run"]["steps_s"]) - e["key"]["warmup"]


def cell_runs(entries, model, nodes, gbps, labels, device="v100") -> list[dict]:
    """The stored runs of one (model, N, target, device) cell whose label is in `labels`."""
    return [e for e in entries if (e["key"]["model"], e["key"]["nodes"], e["key"]["target_gbps"],
                                   e["key"]["replay_device"]) == (model, nodes, gbps, device)
            and e["summary"]["label"] in labels]


def runs_label(used: list[dict], short: bool = False) -> str:
    """What the runs behind a replayed figure are, read from the runs themselves: each compute row
    (replayed_row) and its measurement versions, e.g. "v100 row v2, measurement version 2 (3 timed
    steps)"; short: "v100 row v2, version 2"."""
    by_row: dict[str, set] = {}
    for e in used:
        by_row.setdefault(row_name(replayed_row(e)), set()).add((e["version"], _timed(e)))
    parts = []
    for row, runs in sorted(by_row.items()):
        if short:
            parts.append(f"{row}, version " + ", ".join(str(v) for v in sorted({v for v, _ in runs})))
        else:
            parts.append(f"{row}, " + ", ".join(f"measurement version {v} ({t} timed step{'s' * (t != 1)})"
                                                for v, t in sorted(runs)))
    return "; ".join(parts)


def replayed_cell(entries, model, nodes, gbps, ks, over="ps") -> dict:
    """A replayed ratio (replayed_ratio) with the runs it rests on: {value, label, mixed}; value None
    where a run is not stored, or where its runs replayed different rows or are of different
    measurement versions (mixed: no ratio; a ratio divides runs measured alike, or it is not shown)."""
    v = replayed_ratio(entries, model, nodes, gbps, ks, over)
    used = cell_runs(entries, model, nodes, gbps, {over, *(f"stanza k={k}" for k in ks)})
    mixed = len({replayed_row(e) for e in used}) > 1 or len({e["version"] for e in used}) > 1
    return {"value": None if mixed else v, "label": runs_label(used) if v is not None else "",
            "short": runs_label(used, short=True) if v is not None else "", "mixed": v is not None and mixed}


MIXED = "no ratio: its runs are of different measurement versions"


def _throughput(entries, model, nodes, gbps, device="v100"):
    """{label: samples/s on the target} of the stored runs of one (model, N, target) cell."""
    return {e["summary"]["label"]: e["summary"]["target_throughput"]
            for e in entries if (e["key"]["model"], e["key"]["nodes"], e["key"]["target_gbps"],
                                 e["key"]["replay_device"]) == (model, nodes, gbps, device)}


def replayed_ratio(entries, model, nodes, gbps, ks, over="ps"):
    """The fastest plain stanza (k in ks) over `over`, as notebooks 03 and 05 compute it
    (runs.replayed.summary); None where a run is not stored."""
    tp = _throughput(entries, model, nodes, gbps)
    st = [tp[f"stanza k={k}"] for k in ks if f"stanza k={k}" in tp]
    return max(st) / tp[over] if st and over in tp and len(st) == len(ks) else None


def earlier_replay(model, nodes, gbps) -> float | None:
    """Stanza k=1 over the colocated ps in the replays before the grid (compute model v2.2, N = 4:
    benchmarks/paper_regime_replay.py), for a cell the grid does not hold yet."""
    runs = _json("paper_regime_replay_v2.2.json")["runs"]
    tp = {r["label"]: r["target_samples_per_s"] for r in runs
          if (r["model"], r["nodes"], r["target_gbps"]) == (model, nodes, gbps)}
    return tp["stanza k=1"] / tp["ps"] if "stanza k=1" in tp and "ps" in tp else None


def modelled(model, nodes, gbps):
    """Notebook 03's and 05's model: the best stanza over ps (sharded over all N) and ddp, the current
    V100 row (modelled_how names it), 32 samples per data worker, 224x224
    (experiments.throughput.model_curves)."""
    from stanza_core.perf import Cluster, best_assignment, device_profile, named_profile

    prof = named_profile(model)
    a = best_assignment(prof, Cluster(nodes, gbps, device=device_profile("v100", prof, 32).profile),
                        batch_per_worker=32)
    st = a.best_stanza()
    return {"vs_ps": st.throughput / a.ps.throughput, "vs_ddp": st.throughput / a.ddp.throughput,
            "k": st.fc_workers, "best_k": a.best.fc_workers if a.best.strategy == "stanza" else None}


def _set(d: dict, path: str, value) -> None:
    *head, last = path.split(".")
    for part in head:
        d = d.setdefault(part, {})
    d[last] = value


def _value(ours: str, entries, full_params):
    """A paper claim's value from the committed data (None: not stored), and how it was made."""
    p = ours.split(".")
    if p[0] == "models":
        from stanza_core.experiments.anatomy import _part_summary
        from stanza_core.perf import named_profile

        return _part_summary(named_profile(p[1]))[p[2]], "counted", "`make reproduce` (notebook 01)"
    if p[0] == "paper_model":
        from stanza_core.experiments.traffic import paper_model_curves

        n = int(p[3][1:])
        return (paper_model_curves([p[1]], nodes=[n])[p[1]]["by_nodes"][p[3]][p[4]],
                "modelled bytes (equal to the counters)", "`make reproduce` (notebook 02)")
    if p[0] == "configs":
        rows = _json(f"traffic_{p[1]}_{p[2]}.json")["rows"]
        by = {(r["strategy"], r["fc_workers"]): r["bytes_per_step"] for r in rows}
        return (by[("ps", 0)] / by[("stanza", int(p[3][-1]))], "counted (engine counters)",
                f"`python benchmarks/traffic.py --models {p[1]} --nodes {p[2][1:]} --steps 3`")
    if p[0] == "replayed":
        model, n, g = p[2], int(p[3]), float(p[4])
        ks = full_params["paper_fc_workers"] if n in full_params["paper_nodes"] else [full_params["fc_workers"]]
        cell = replayed_cell(entries, model, n, g, ks)
        value = MIXED if cell["mixed"] else cell["value"]
        return value, f"replayed ({cell['label']})" if cell["label"] else None, f"`{FULL}` (grid)"
    if p[0] in ("modelled", "paper_scale") and p[-1] in ("vs_ps", "stanza_vs_ps"):
        model, g, n = (p[2], float(p[3]), int(p[5])) if p[0] == "modelled" else (p[2], float(p[3]), 16)
        return modelled(model, n, g)["vs_ps"], modelled_how(), "`make reproduce` (notebooks 03, 05)"
    raise KeyError(ours)


def _how(c: dict, label: str | None) -> str:
    """The claim's own kind (reproductions/*.yaml), or this page's label where it says more."""
    kind = c.get("kind")
    if kind is None or label is None:
        return kind or label or "-"
    return label if label.startswith(kind.split(" (")[0]) and label != kind else kind


def _fmt_bound(c: dict) -> str:
    e = c["expect"]
    e = e.get("full", e.get("quick")) if isinstance(e, dict) else e
    if isinstance(e, list):
        return f"[{e[0]:g}, {e[1]:g}]"
    return f"{e:g} ± {c['tolerance']:g}" if c.get("tolerance") else f"{e:g}, exact"


_PS_CACHE: dict = {}


def paper_ps() -> dict:
    """Notebook 05's paper_ps results under the stated PS of bandwidth_sweep.yaml (modelled, seconds)."""
    if not _PS_CACHE:
        from stanza_core.experiments.paper_ps import PsAssumption
        from stanza_core.experiments.paper_ps_report import results

        f = load_spec(ROOT / "reproductions" / "bandwidth_sweep.yaml").params["full"]
        stated = PsAssumption(server_share=f["paper_ps_share"], placement=f["paper_ps_placement"],
                              overlap=f["paper_ps_overlap"], batch_per_worker=f["paper_ps_batch"],
                              goodput=f["paper_ps_goodput"])
        _PS_CACHE.update(results(stated, f["paper_nodes"], 100.0, "v100"))
    return _PS_CACHE


def _lookup(d, path: str):
    for part in path.split("."):
        d = d[part]
    return d


def _figure_value(ours: str):
    """A counted paper-figure claim's value (and its sharded twin): (value, how, command)."""
    p = ours.split(".")
    if p[0] == "paper_ps":
        return _lookup(paper_ps(), ".".join(p[1:])), modelled_how(), "`make reproduce` (notebook 05)"
    if p[0] == "paper_model" and p[2] == "ratio_vs_n":
        from stanza_core.experiments.traffic import paper_model_curves

        return (paper_model_curves([p[1]])[p[1]]["ratio_vs_n"], "modelled bytes (equal to the counters)",
                "`make reproduce` (notebook 02)")
    return _value(ours, grid(), load_spec(ROOT / "reproductions" / "throughput.yaml").params["full"])


def _fmt_figure_bound(c: dict) -> str:
    if "figure" not in c:
        return "none: shown, no verdict"
    if c.get("rel_tolerance") is not None:
        lo, hi = c["expect"]
        r = c["rel_tolerance"]
        return f"each end ± {r:.0%}: [{lo * (1 - r):.3g}, {lo * (1 + r):.3g}], [{hi * (1 - r):.3g}, {hi * (1 + r):.3g}]"
    return _fmt_bound(c)


def _replayed_sharded(figure_id: str) -> str:
    """The replayed 16-node ratio against the sharded PS at 100 Gb/s, where the grid holds it."""
    model = {"alexnet_100gbps": "alexnet", "vgg16_100gbps": "vgg16"}.get(figure_id)
    if model is None:
        return ""
    full = load_spec(ROOT / "reproductions" / "throughput.yaml").params["full"]
    entries = grid()
    cell = replayed_cell(entries, model, 16, 100.0, full["paper_fc_workers"])
    if not cell["label"]:
        return ""
    return f"; replayed ({cell['label']}): " + (MIXED if cell["mixed"] else f"{cell['value']:.2f}x")


def paper_rows() -> list[dict]:
    """One report row per paper figure (tally.PAPER_FIGURES, in order), from the one claim that counts
    it, evaluated by spec.evaluate_claims under the claim's own bound: the row's `status`, `ours`,
    `sharded`, `ps` and `paper_figure` (what tally.figure_lines reads), plus `text` (the figure as the
    paper states it), `how`, `bound`, `command`, `evidence` and `sharded_shown` (the table's cell)."""
    from stanza_core.reproduce.tally import PAPER_FIGURES, counts_figure

    counted = {}
    for path in sorted((ROOT / "reproductions").glob("*.yaml")):
        spec = load_spec(path)
        for c in spec.claims:
            if counts_figure(c):
                counted[c["paper_figure"]] = (path, c)
    out = []
    for fid, text in PAPER_FIGURES.items():
        path, c = counted[fid]
        value, how, command = _figure_value(c["ours"])
        results = {}
        _set(results, c["ours"], value)
        if "sharded" in c:
            _set(results, c["sharded"], _figure_value(c["sharded"])[0])
        one = load_spec(path)
        one.claims = [c]
        (r,), _ = evaluate_claims(one, results, "full")
        if "figure" not in c:
            r["status"] = "not judged"
        r.update(text=text, how=_how(c, how), bound=_fmt_figure_bound(c), command=command, evidence=c["evidence"],
                 sharded_shown=(r.get("sharded", "-") + (" (modelled)" if "sharded" in c else "")) + _replayed_sharded(fid))
        out.append(r)
    return out


def stated_lines() -> list[str]:
    """What the stated PS gives, from notebook 05's paper_ps results (modelled): the rule's pick, each
    100 Gb/s figure's distance from the paper's and from its bound, and the 10 Gb/s range's low end
    at the batch the YAML fixed for it and at the stated set's own batch."""
    from stanza_core.experiments.paper_ps import PsAssumption, Speedups
    from stanza_core.experiments.paper_ps_report import LOW_END_MODELS, LOW_END_NODES, PAPER_RANGE, RANGE_GBPS

    pp = paper_ps()
    tol = pp["tolerance"]
    figs = []
    for m, a in pp["at_100"].items():
        d = a["stated"] - a["paper"]
        figs.append(f"{m} {a['stated']:.2f}x against {a['paper']}x ({d:+.2f}, {_pct(d / a['paper'], True)}; "
                    + (f"{abs(d) - tol:.2f} outside its bound of ± {tol:g})" if abs(d) > tol else f"inside ± {tol:g})"))
    f = load_spec(ROOT / "reproductions" / "bandwidth_sweep.yaml").params["full"]
    stated = PsAssumption(server_share=f["paper_ps_share"], placement=f["paper_ps_placement"],
                          overlap=f["paper_ps_overlap"], batch_per_worker=f["paper_ps_batch"],
                          goodput=f["paper_ps_goodput"])
    low = pp["range_10"]["low"]
    sp = Speedups(list(LOW_END_MODELS), LOW_END_MODELS, pp["device"])
    own = {m: sp.of(m, stated, LOW_END_NODES, RANGE_GBPS)["speedup"] for m in LOW_END_MODELS}
    m_own = min(own, key=own.get)
    lo, r = PAPER_RANGE[0], pp["range_10"]["within"][0]
    rel = next(c["rel_tolerance"] for c in load_spec(ROOT / "reproductions" / "bandwidth_sweep.yaml").claims
               if c.get("paper_figure") == "range_10gbps" and "figure" in c)
    side = lambda e: "inside" if e <= rel else "outside"  # noqa: E731  the claim's bound on each end
    return [f"- Under the stated PS ({pp['rule_pick'] or 'no pick'}; some searched set holds both figures: "
            f"{'yes' if pp['both_hold_anywhere'] else 'no'}), {pp['nodes']} workers at {pp['gbps']:g} Gb/s: "
            + "; ".join(figs) + ".",
            f"- The 10 Gb/s range's low end at {low['batch_per_worker']} samples per worker, the batch "
            f"`reproductions/bandwidth_sweep.yaml` fixed for it before it was computed: {low['model']} "
            f"{low['speedup']:.2f}x ({_pct(r)} from {lo}x, {side(r)} the claim's ± {rel:.0%}); at the stated set's "
            f"own {stated.batch_per_worker} samples per worker: {m_own} {own[m_own]:.2f}x "
            f"({_pct(abs(own[m_own] / lo - 1))} from {lo}x, {side(abs(own[m_own] / lo - 1))} it; reported only, the "
            f"claim keeps its batch)."]


SIM_PAPER = "benchmarks/results/sim_paper.json"


def simulated_cell(fid: str) -> str:
    """The paper figure's configurations simulated (benchmarks/sim_paper.py): under the stated PS,
    then (in brackets) under the sharded PS, all at one simulator version."""
    path = ROOT / SIM_PAPER
    if not path.is_file():
        return "not simulated"
    d = json.loads(path.read_text())
    f = d["figures"]

    def both(key, what="speedup"):
        return f"{f[key + '/stated'][what]:.2f}x ({f[key + '/sharded'][what]:.2f}x)"

    if fid == "range_10gbps":
        lo = min(f[f"{m}@10/stated"]["speedup"] for m in ("alexnet", "vgg16"))
        hi = max(f[f"{m}@10/stated"]["speedup"] for m in ("alexnet", "vgg16"))
        slo = min(f[f"{m}@10/sharded"]["speedup"] for m in ("alexnet", "vgg16"))
        shi = max(f[f"{m}@10/sharded"]["speedup"] for m in ("alexnet", "vgg16"))
        cell = f"{lo:.2f}x-{hi:.2f}x ({slo:.2f}x-{shi:.2f}x), AlexNet and VGG-16"
    elif fid == "traffic_vgg16":
        cell = both("vgg16@10", "traffic_ratio") + " less per step"
    elif fid == "alexnet_100gbps":
        cell = both("alexnet@100")
    else:
        cell = both("vgg16@100")
    return f"{cell}, simulated v{d['sim_version']} (V100 row), N={d['nodes']}"


def paper_table() -> list[str]:
    """One row per paper figure (paper_rows): ours under the PS it states, ours against the
    workbench's sharded PS, the same configurations simulated, how, the bound, the verdict."""
    rows = ["| paper figure | PS it is judged under | ours, that PS | ours, the sharded PS | simulated, that PS (sharded) | "
            "how | bound | verdict | command | shown in |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r, fid in zip(paper_rows(), PAPER_FIGURE_IDS()):
        rows.append(f"| {r['text']} | {r['ps']} | {r['ours']} | {r['sharded_shown']} | {simulated_cell(fid)} | "
                    f"{r['how']} | {r['bound']} | **{r['status']}** | {r['command']} | {', '.join(r['evidence'])} |")
    return rows


def PAPER_FIGURE_IDS() -> list[str]:  # noqa: N802 (the tally's figure ids, in its order)
    from stanza_core.reproduce.tally import PAPER_FIGURES

    return list(PAPER_FIGURES)


def sim_validation_table() -> list[str]:
    """The simulator against the emulation (benchmarks/results/sim_validation.json), both halves,
    the analytic model beside it."""
    path = ROOT / "benchmarks" / "results" / "sim_validation.json"
    if not path.is_file():
        return ["- not run: `sudo .venv/bin/python benchmarks/sim_validation.py measure`, then `... report`"]
    d = json.loads(path.read_text())
    rows = ["| configuration | half | emulated step | simulated | error | model | error | emulation's retransmits / queue drops |",
            "|---|---|---|---|---|---|---|---|"]
    for r in d["rows"]:
        if "missing" in r:
            rows.append(f"| {r['label']} | {r['half']} | {r['missing']} | | | | | |")
            continue
        rows.append(f"| {r['label']} | {r['half']} | {r['emulated_step_s'] * 1e3:.2f} ms | {r['simulated_step_s'] * 1e3:.2f} ms | "
                    f"{r['sim_error']:+.1%} | {r['model_step_s'] * 1e3:.2f} ms | {r['model_error']:+.1%} | "
                    f"{r['losses'].get('retrans_segs')} / {r['losses'].get('queue_drops')} |")
    fit = d["fitted"]
    rows.append("")
    rows.append(f"- Fitted on the fit half only ({len(fit['fitted_on'])} configurations): per-message cost "
                f"{fit['value'] * 1e6:g} us ({fit['criterion']}; grid {', '.join(f'{v * 1e6:g}' for v in fit['grid'])} us).")
    for name, v in (("fit half", d["fit_half"]), ("held-out half", d["held_out"])):
        rows.append(f"- {name}, {v['configurations']} configurations: simulator median |error| {v['sim_median_abs_error']:.1%}, "
                    f"worst {v['sim_worst_abs_error']:.1%}; analytic model median {v['model_median_abs_error']:.1%}, worst "
                    f"{v['model_worst_abs_error']:.1%}.")
    h = d["held_out"]
    rows.append(f"- Goals on the held-out half (median <= {h['goals']['median']:.0%}, worst <= {h['goals']['worst']:.0%}): "
                f"median {'met' if h['median_met'] else 'missed'}, worst {'met' if h['worst_met'] else 'missed'}; the "
                f"simulator is {'closer to the emulation than the model by the median' if h['sim_closer_than_model'] else 'not closer to the emulation than the model'}.")
    return rows


def sim_grid_line() -> list[str]:
    from stanza_core.sim.run import SIM_VERSION

    files = list((ROOT / "benchmarks" / "results" / "sim").glob("*.json"))
    cur = sum(1 for f in files if json.loads(f.read_text()).get("sim_version") == SIM_VERSION)
    return [f"- {cur} of 125 configurations simulated at simulator version {SIM_VERSION} (benchmarks/results/sim; "
            "`python -m stanza_core.sim grid`)."]


def evidence_table() -> list[str]:
    """Every other claim that shows one of the paper's figures (evidence: reported, no verdict)."""
    from stanza_core.reproduce.tally import PAPER_FIGURES, counts_figure

    entries = grid()
    full_params = load_spec(ROOT / "reproductions" / "throughput.yaml").params["full"]
    rows = ["| paper figure | claim | ours | how | command | reproductions/ |", "|---|---|---|---|---|---|"]
    for path in sorted((ROOT / "reproductions").glob("*.yaml")):
        for c in load_spec(path).claims:
            if "paper_figure" not in c or counts_figure(c):
                continue
            try:
                value, how, command = _value(c["ours"], entries, full_params)
            except (KeyError, IndexError, ValueError):  # a value only a notebook run holds
                value, how, command = None, None, "`make reproduce`"
            ours = ("not in committed data" if value is None else value if isinstance(value, str)  # MIXED
                    else c.get("format", "{}").format(value))
            if value is None and c["ours"].startswith("replayed."):
                q = c["ours"].split(".")
                early = earlier_replay(q[2], int(q[3]), float(q[4]))
                ours = "not measured in the grid" + (f" (an earlier replay, `paper_regime_replay_v2.2.json`: "
                                                     f"{early:.2f}x)" if early else "")
            rows.append(f"| {PAPER_FIGURES[c['paper_figure']]} | {c['claim']} | {ours} | {_how(c, how)} | {command} | "
                        f"{path.stem} |")
    return rows


def _goal_value(ours: str):
    """A goal's value from committed data: (value, mode, how, command), or None where the value
    exists only in a notebook run's results.json (reproductions/out/, not committed)."""
    p = ours.split(".")
    if p[0] == "models":  # the anatomy's counted facts
        from stanza_core.experiments.anatomy import _part_summary
        from stanza_core.perf import named_profile

        return _part_summary(named_profile(p[1]))[p[2]], "full", "counted", "`make reproduce` (notebook 01)"
    if p[0] == "strategies" and p[2].startswith("max_loss_diff"):
        conv = _json("convergence_spread_quick_window.json")["strategies"]
        if p[1] in conv:
            return (conv[p[1]][p[2]], "quick", "measured, CPU (the quick configuration)",
                    "`python benchmarks/convergence_spread.py`")
    if ours == "paper_scale.results.vgg16.10.best_k":
        return modelled("vgg16", 16, 10.0)["best_k"], "full", modelled_how(), "`make reproduce` (notebook 04)"
    if ours == "configs.alexnet.n4.ps.bytes_per_step":
        text = (RESULTS / "traffic_alexnet_n4_n8_vgg16_n4.txt").read_text()
        mb = float(re.search(r"^alexnet\s+N=4 ps\s+k=0:\s+([\d.]+) MB/step", text, re.M).group(1))
        return mb * 1e6, "full", "counted (engine counters)", "`python benchmarks/traffic.py --models alexnet`"
    return None


def goals_table() -> list[str]:
    """Every project goal (claims with `goal`): its target, and its value where committed data holds it."""
    rows = ["| goal | ours | how | bound | verdict | command | reproductions/ |", "|---|---|---|---|---|---|---|"]
    for path in sorted((ROOT / "reproductions").glob("*.yaml")):
        spec = load_spec(path)
        for c in spec.claims:
            if "goal" not in c:
                continue
            found = _goal_value(c["ours"])
            e = c["expect"]
            mode = found[1] if found else "full" if not isinstance(e, dict) or "full" in e else next(iter(e))
            b = e.get(mode) if isinstance(e, dict) else e
            bound = ("none in this mode" if b is None else f"[{b[0]:g}, {b[1]:g}]" if isinstance(b, list)
                     else f"{b:g} ± {c['tolerance']:g}" if c.get("tolerance") else f"{b:g}")
            if found is None:
                rows.append(f"| {c['claim']} | not in committed data | {_how(c, None)} | {bound} | not judged | "
                            f"`make reproduce` | "
                            f"{spec.name} |")
                continue
            value, mode, how, command = found
            results = {}
            _set(results, c["ours"], value)
            one = load_spec(path)
            one.claims = [c]
            (r,), _ = evaluate_claims(one, results, mode)
            rows.append(f"| {c['claim']} | {r['ours']} | {_how(c, how)} | {bound} | **{r['status']}** | {command} | "
                        f"{spec.name} |")
    return rows


def range_table() -> list[str]:
    """The paper's 10 Gb/s range beside each configuration's own figure (reported only: the paper
    gives a range over its configurations, no figure for any one of them)."""
    entries = grid()
    rows = ["| model | N | stanza over ps (colocated), replayed (row, version) | over ddp, replayed | over ps on one "
            f"dedicated server, replayed | {modelled_how()} over ps | stanza's k, replayed / modelled |",
            "|---|---|---|---|---|---|---|"]
    for model in ("alexnet", "vgg16"):
        for n in (4, 8, 16):
            ks = [1, 2] if n == 16 else [1]
            cells = []
            for over in ("ps", "ddp", "ps S=1"):
                cell = replayed_cell(entries, model, n, 10.0, ks, over=over)
                shown = MIXED if cell["mixed"] else _x(cell["value"])
                cells.append(shown + (f" ({cell['short']})" if cell["short"] else ""))
            m = modelled(model, n, 10.0)
            rows.append(f"| {model} | {n} | {' | '.join(cells)} | {m['vs_ps']:.2f}x | "
                        f"best of {', '.join(map(str, ks))} / {m['k']} |")
    return rows


def _x(v) -> str:
    return "not measured" if v is None else f"{v:.2f}x"


def _pct(v: float, sign: bool = False) -> str:
    return f"{100 * v:+.1f} %" if sign else f"{100 * v:.1f} %"


def grid_numbers() -> dict:
    from full_grid_table import rows as grid_rows

    rs = grid_rows(RESULTS / "full")
    errs = [r["error"] for r in rs]
    entries = grid()
    timed = [len(e["run"]["steps_s"]) - e["key"]["warmup"] for e in entries]
    per_version = {}
    for v in sorted({r["version"] for r in rs}, reverse=True):  # each version's runs judged apart
        e = [r["error"] for r in rs if r["version"] == v]
        mine = [r for r in rs if r["version"] == v]
        per_version[v] = {"n": len(e), "median": statistics.median(abs(x) for x in e), "bias": statistics.fmean(e),
                          "worst": max(e, key=abs),
                          "bytes_equal": sum(r["bytes_per_step"] == r["expected_bytes_per_step"] for r in mine),
                          "slipped": sum(bool(r["slipped"]) for r in mine),
                          "rows": sorted({row_name(replayed_row(x)) for x in entries if x["version"] == v})}
    return {"n": len(rs), "per_version": per_version,
            "by_version": {v: sum(r["version"] == v for r in rs) for v in sorted({r["version"] for r in rs})},
            "median": statistics.median(abs(x) for x in errs), "bias": statistics.fmean(errs),
            "worst": max(errs, key=abs), "bytes_equal": sum(r["bytes_per_step"] == r["expected_bytes_per_step"]
                                                          for r in rs),
            "one_step": sum(t == 1 for t in timed), "slipped": sum(bool(r["slipped"]) for r in rs)}


def _fidelity(rel: str) -> str:
    d = _json(rel)
    within = sum(abs(r["error"]) <= 0.05 for r in d["table"])
    cells = ", ".join(f"{r['config']} {_pct(r['error'], True)}" for r in d["table"])
    return f"{cells} ({within} of {len(d['table'])} within 5 %)"


def _stanza1_reference() -> str:
    """The spread of stanza k=1's real step across every committed anchor run of one configuration
    (N = 4, 0.5 MiB buckets): what a 5 % bound on its replay would have to beat."""
    real = sorted(1e3 * r["real_s"] for p in sorted(RESULTS.glob("replay_fidelity*.json"))
                  for d in [json.loads(p.read_text())] if d["args"].get("bucket_mb") == 0.5 and d["args"]["nodes"] == 4
                  for r in d["table"] if r["config"] == "stanza k=1")
    mid = statistics.median(real)
    return (f"| stanza k=1's real step, every committed anchor run ({len(real)} runs of 3-5 repeats) | median of the "
            f"repeats {real[0]:.1f} to {real[-1]:.1f} ms ({100 * (real[-1] - real[0]) / mid:.0f} % of their middle) | "
            f"measured, CPU | - | reported: the reference moves more than 5 % | `python benchmarks/replay_fidelity.py` |")


GPU_H100 = "gpu/h100-2026-12-05/results.json"  # `make gpu-check` on an H100 (fit_compute_model.py reads it too)
# The V100 row v3's goal per kernel pass, as tests/unit/test_v100_deepbench.py asserts it (GOALS)
V100_KERNEL_GOALS = {"gemm": 0.15, "fwd": 0.20, "dgrad": 0.20, "wgrad": 0.20}
_PASS = {"gemm": "GEMMs", "fwd": "convolution forward", "dgrad": "data gradient", "wgrad": "weight gradient"}


def v100_kernel_rows() -> list[str]:
    """The V100 row v3 beside its fit: DeepBench's held-out kernels per pass against the project's
    goal (benchmarks/results/deepbench_v100_fit.json)."""
    d = _json("deepbench_v100_fit.json")
    held, train = d["errors"]["held_out"], d["errors"]["train"]
    missed = [p for p, goal in V100_KERNEL_GOALS.items() if held[p]["median_abs_error"] > goal]
    cells = ", ".join(f"{_PASS[p]} {_pct(held[p]['median_abs_error'])} (n = {held[p]['n']}; train half "
                      f"{_pct(train[p]['median_abs_error'])})" for p in V100_KERNEL_GOALS)
    goals = ", ".join(f"{_PASS[p]} <= {goal:.0%}" for p, goal in V100_KERNEL_GOALS.items())
    verdict = f"goal missed** ({len(missed)} of {len(V100_KERNEL_GOALS)} passes)" if missed else "goal met**"
    return [f"| {row_name('v100')} against the DeepBench V100 kernels it was not fitted to ({d['parameters']} "
            f"parameters fitted to the {d['train_points']} kernel times of the train half) | held-out medians: {cells} | "
            f"modelled against measured V100 kernels | median {goals} (project goal) | **{verdict} | `{d['command']}` |"]


def published_row(held: list[dict]) -> str:
    """The device table against the published training steps no fit saw (compute_model_fit.json's
    held-out figures), each priced by the row that now stands for its device: a V100 figure by the
    V100 row v3 (deepbench_v100_fit.json's published_steps), the others as compute_model_fit.json has them."""
    v3 = {(p["model"], p["batch"], p["source"]): p for p in _json("deepbench_v100_fit.json")["published_steps"]["v3"]}
    cells, errors = [], []
    for p in held:
        q = v3[(p["model"], p["batch"], p["source"])] if p["device"] == "v100" else p
        errors.append(q["error"])
        cells.append(f"{row_name(p['device'])}: {p['model']} {p['images_per_s']:.0f} img/s published, "
                     f"{q['predicted']:.0f} modelled ({_pct(q['error'], True)})")
    return ("| compute model against published training steps held out | " + "; ".join(cells)
            + " | modelled | within 15 % | **" + ("met" if all(abs(e) <= 0.15 for e in errors) else "missed")
            + "** | `python benchmarks/fit_compute_model.py --write`, `python benchmarks/fit_v100_deepbench.py --write` |")


def validation_table() -> list[str]:
    fit = _json("compute_model_fit.json")
    lomo, lo = fit["lomo_summary"], fit["lomo"]
    cross = fit["cross_gpu"]["h200_records"]
    held = [p for p in fit["published"] if p["used"] == "held out"]
    g = grid_numbers()
    ops = _json("engine_step_overhead/opcount_table.json")["rows"]
    gpu = _json(GPU_H100)
    ratios = [r["ratio"] for r in gpu["engine_vs_plain"]]
    rvr = gpu["replay_vs_real"]["replayed_over_real"]
    per_model = "; ".join(f"{m} {_pct(v['median_abs_error'])} / {_pct(v['worst_abs_error'])}" for m, v in lo.items())
    rows = ["| figure | ours | how | bound | verdict | command |", "|---|---|---|---|---|---|",
            f"| compute model, leave one model out ({lomo['points']} H200 steps) | median {_pct(lomo['median_abs_error'])}, "
            f"worst {_pct(lomo['worst_abs_error'])} ({per_model}) | modelled against measured H200 steps | median <= 10 %, "
            f"worst <= 20 % (project goal) | **goal missed** | `python benchmarks/fit_compute_model.py --write` |",
            f"| compute model, same architecture (Hopper): fitted on H200 records only, predicting {cross['points']} "
            f"H100 steps | median {_pct(cross['median_abs_error'])}, worst {_pct(cross['worst_abs_error'])} | modelled "
            f"against measured H100 steps (`make gpu-check`: `benchmarks/results/{GPU_H100}`) | none: H200 to H100 is one architecture (the "
            f"rows differ in memory bandwidth only), not a cross-architecture prediction such as Habitat's | "
            f"reported only | the same |",
            *v100_kernel_rows(),
            published_row(held),
            *[f"| model against replay, full grid, measurement version {v} ({s['n']} configuration{'s' * (s['n'] != 1)}"
              f"{', at least 3 timed steps' if v >= 2 else ', 1 timed step'}) | median {_pct(s['median'])}, bias "
              f"{_pct(s['bias'], True)}, worst {_pct(s['worst'], True)}; bytes equal the model in {s['bytes_equal']} of "
              f"{s['n']}; links slipped in {s['slipped']} | replayed ({', '.join(s['rows'])}) against modelled | median <= 5 %, "
              f"worst <= 15 % (project goal) | **" + ("goal met" if s["median"] <= 0.05 and abs(s["worst"]) <= 0.15
                                                      else "goal missed")
              + f"** | `python benchmarks/full_grid_table.py` |" for v, s in g["per_version"].items()],
            f"| replay against real compute, one bucket (`replay_fidelity.json`, 2 repeats) | "
            f"{_fidelity('replay_fidelity.json')}; stanza k=2 re-measured: {_fidelity('replay_fidelity_stanza2.json')} "
            f"| measured, CPU | within 10 % | reported | `python benchmarks/replay_fidelity.py` |",
            f"| the same, 0.5 MiB buckets, 3 repeats of 6 timed steps | {_fidelity('replay_fidelity_buckets.json')} | "
            f"measured, CPU | within 5 % | reported | the same, `--bucket-mb 0.5` |",
            f"| the same, 5 repeats of 10 timed steps | {_fidelity('replay_fidelity_buckets_timeline.json')} | "
            f"measured, CPU | within 5 % | reported | the same, `--timeline` |",
            f"| the same, CPU-time waits, 5 repeats of 30 timed steps | "
            f"{_fidelity('replay_fidelity_buckets_cpu_30steps.json')} | measured, CPU | within 5 % | reported | "
            f"the same, `--wait cpu` |",
            _stanza1_reference(),
            f"| the engine's operator calls against plain PyTorch's ({len(ops)} strategy, role and model rows) | "
            f"{min(r['ratio'] for r in ops):.3f}x to {max(r['ratio'] for r in ops):.3f}x | counted, CPU | <= 1.05x | **"
            + ("met" if max(r["ratio"] for r in ops) <= 1.05 else "missed")
            + "** | `python benchmarks/opcount_table.py` |",
            f"| the engine's step against a plain loop on an H100 (before the operator-call change) | "
            f"{min(ratios):.2f}x to {max(ratios):.2f}x, {sum(r['within_goal'] for r in gpu['engine_vs_plain'])} of "
            f"{len(ratios)} within 5 % | measured, one H100 | within 1.05x | **missed**, not re-measured | "
            f"`make gpu-check` |",
            f"| VGG-16 replayed at D = 1 against its real step on the H100 | {rvr:.2f}x | measured, one H100 | "
            f"none set (the check passed whatever the ratio) | reported only | `make gpu-check` |"]
    return rows


def grid_status() -> list[str]:
    from stanza_core.runs.store import MEASUREMENT_VERSION, MIN_TIMED_STEPS

    g, entries = grid_numbers(), grid()
    dev = {}
    for e in entries:
        dev[e["key"]["replay_device"]] = dev.get(e["key"]["replay_device"], 0) + 1
    cur = g["by_version"].get(MEASUREMENT_VERSION, 0)
    old = {v: n for v, n in g["by_version"].items() if v != MEASUREMENT_VERSION}
    return [f"- {g['n']} of 125 configurations stored ({', '.join(f'{v} on the {k} profile' for k, v in sorted(dev.items()))}); "
            f"{cur} at measurement version {MEASUREMENT_VERSION} (at least {MIN_TIMED_STEPS} timed steps)"
            + "".join(f", {n} only at version {v} (shown here, to measure again)" for v, n in sorted(old.items()))
            + f"; {125 - g['n']} never measured;",
            f"- {g['one_step']} of {g['n']} shown time a single step (version 1: 3 steps, 2 of them warm-up); "
            + spread_line(),
            f"- what is left to measure and the time it takes: `{FULL} LIST=1` (the listing's estimate, "
            f"corrected by each model's measured factor)."]


def spread_line() -> str:
    """The step-to-step spread of replayed runs (benchmarks/grid_spread.py's results), or that it is not measured."""
    path = ROOT / "benchmarks" / "results" / "grid_spread.json"
    if not path.exists():
        return "the step-to-step spread of a replayed run is not measured."
    s = json.loads(path.read_text())["summary"]
    return (f"the step-to-step spread (max - min over the median of 5 timed steps, measured, "
            f"`benchmarks/grid_spread.py`) of {s['measured']} stored configurations re-run on their plans: median "
            f"{s['median_spread']:.2%}, worst {s['worst_spread']:.2%} ({s['worst_label']}), over "
            f"{s['threshold']:.0%} in {s['over_threshold']}: a single timed step carries that much, so measurement "
            f"version 2 times at least 3.")


TABLES = {"sim_validation": sim_validation_table, "sim_grid": sim_grid_line, "stated": stated_lines, "paper": paper_table, "evidence": evidence_table, "range": range_table, "goals": goals_table, "validation": validation_table, "grid": grid_status}


def render(page: str) -> str:
    for name, make in TABLES.items():
        begin, end = f"<!-- results:{name}:begin -->", f"<!-- results:{name}:end -->"
        pat = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
        if not pat.search(page):
            raise SystemExit(f"error: {PAGE} has no {begin} ... {end} block")
        page = pat.sub(lambda _: begin + "\n" + "\n".join(make()) + "\n" + end, page)
    return page


def slug(heading: str) -> str:
    """The anchor GitHub gives a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip("# ").strip().lower())
    return text.replace(" ", "-")


def broken_links(page: str, base: Path = ROOT / "docs") -> list[str]:
    """Links of a page in folder `base` (docs/results.md's by default) to a markdown file of the
    repository (x.md, ../lab/LOG.md) that is not there, or to an #anchor whose heading the file
    does not have."""
    out = []
    for doc, anchor in re.findall(r"\]\(((?:\.\./)?(?:[\w\-]+/)*[\w\-]+\.md)(?:#([^)]+))?\)", page):
        path = base / doc
        if not path.is_file():
            out.append(doc + (f"#{anchor}" if anchor else ""))
        elif anchor and anchor not in {slug(h) for h in re.findall(r"^#+ .*$", path.read_text(), re.M)}:
            out.append(f"{doc}#{anchor}")
    return out


NOTEBOOKS = ROOT / "notebooks"
# A repository path with a file suffix, as a notebook's markdown cites one (`benchmarks/results/x.json`,
# ../reproductions/x.yaml: from the repository root, or from the notebook's folder with ../)
CITED = re.compile(r"(?<![\w/.\-])((?:\.\./)?(?:benchmarks|stanza_core|reproductions|notebooks|tutorials|docs|lab|tests|"
                   r"scripts)/[\w./\-]*\w\.(?:json|py|yaml|md|txt|ipynb|csv|npz))(?![\w/])")


def markdown_cells(ipynb: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(ipynb.read_text())["cells"] if c["cell_type"] == "markdown"]


def missing_citations(text: str, base: Path = NOTEBOOKS) -> list[str]:
    """The files `text` cites (CITED) that do not exist: from the repository root, or, written with
    ../, from `base` (the notebook's folder)."""
    return [p for p in CITED.findall(text) if not ((base / p) if p.startswith("../") else (ROOT / p)).exists()]


def notebook_citations(folder: Path = NOTEBOOKS) -> list[str]:
    """"NN_x.ipynb: path" for every file a notebook's markdown cell cites that is not there."""
    return [f"{nb.name}: {p}" for nb in sorted(folder.glob("*.ipynb")) for text in markdown_cells(nb)
            for p in missing_citations(text, nb.parent)]


def headline_figure(out: Path = ROOT / "docs" / "img" / "paper_scale_speedups.png") -> Path:
    """The README's picture: notebook 05's paper-scale figure (experiments.sweep.paper_scale, drawn by
    viz.sweep.paper_scale_speedups) at the parameters `make reproduce` runs it with (bandwidth_sweep.yaml's
    quick set over SweepParams' defaults), written as a PNG by kaleido (needs a Chromium)."""
    import dataclasses
    import types

    import plotly.io as pio

    from stanza_core.experiments import sweep
    from stanza_core.experiments.throughput import PAPER
    from stanza_core.viz.sweep import paper_scale_speedups

    defaults = {f.name: f.default for f in dataclasses.fields(sweep.SweepParams)
                if f.default is not dataclasses.MISSING}
    p = types.SimpleNamespace(**{**defaults, **load_spec(ROOT / "reproductions" / "bandwidth_sweep.yaml").params["quick"]})
    results = {"paper_scale": {"nodes": p.paper_nodes, "device": p.paper_device, "batch_per_worker": p.batch_per_worker,
                               "image_size": p.paper_image_size, "results": sweep.paper_scale(p)}, "paper": PAPER}
    fig = paper_scale_speedups(results)
    pio.write_image(fig, out, width=1000, scale=1)  # the figure's own height (viz.sweep)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the tables in docs/results.md")
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/results.md's tables or links are stale, or "
                                                         "a notebook's markdown cites a file that is not there")
    ap.add_argument("--figure", action="store_true", help="redraw the README's picture, docs/img/paper_scale_speedups.png")
    args = ap.parse_args(argv)
    if args.figure:
        print(f"wrote {headline_figure()}")
        return 0
    if not (args.write or args.check):
        for name, make in TABLES.items():
            print(f"\n{name}:\n" + "\n".join(make()))
        return 0
    page = PAGE.read_text()
    new = render(page)
    if args.write:
        PAGE.write_text(new)
    elif args.check:
        bad, cited = broken_links(page), notebook_citations()
        if new != page or bad or cited:
            print("docs/results.md is stale: run python benchmarks/results_page.py --write" if new != page
                  else "docs/results.md's tables equal the committed data")
            if bad:
                print(f"broken links: {', '.join(bad)}")
            if cited:
                print(f"cited in a notebook's markdown, not in the repository: {', '.join(cited)}")
            return 1
        print("docs/results.md: every table equals the committed data; every link resolves; every file the "
              "notebooks' markdown cites exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
