"""The report: `<out>/index.html` (one page, every experiment) and `<out>/index.json` (the same data).

Built from each experiment's `<out>/<name>/status.json`, so a run with `--only` refreshes its
experiments and keeps the others' last results. Figures are embedded from the
`<figure>.plotly.json` files the notebooks write (interactive, one shared plotly.min.js beside
the page, works offline); an experiment without them shows its PNGs, else links its HTML figures.
"""
from __future__ import annotations

import html
import json
import time
from pathlib import Path
from typing import Any

import plotly.io as pio

from .plotlyjs import PLOTLYJS, write_shared
from .spec import Spec
from .tally import Tally, badge, tally

FIGURE_SUFFIX = ".plotly.json"  # as written by stanza_core.nbtools.save_figures
FIGURES_FILE = "figures.json"  # the figures' order, ditto
_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1250px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
.ok, .agrees, .goal-met { color: #1a7f37; font-weight: 600; }
.failed, .differs, .goal-missed, .missing { color: #c62828; font-weight: 600; }
.skipped, .reported, .not-run, .modelled { color: #8a6d00; }
.ran { color: #555; font-weight: 600; } .kind { white-space: nowrap; color: #444; }
section { border-top: 2px solid #ddd; margin-top: 2em; padding-top: 0.5em; }
code { background: #f6f6f6; padding: 0 0.2em; } img { max-width: 100%; }
td, p, code { overflow-wrap: anywhere; }  /* a long path or number breaks instead of widening the page */
table { max-width: 100%; } .plotly-graph-div { max-width: 100%; }
"""


def _status(out_root: Path, spec: Spec) -> dict[str, Any]:
    path = out_root / spec.name / "status.json"
    if path.is_file():
        return json.loads(path.read_text())
    return {"name": spec.name, "title": spec.title, "paper": spec.paper, "status": "not run", "claims": [],
            "error": None, "mode": None, "duration_s": None, "executed": None, "html": None, "parameters": {}}


def section_badge(st: dict[str, Any]) -> str:
    """What a section's badge says: its run status when the notebook did not run cleanly (failed,
    skipped, not run), else what its claims say (tally.badge: ran, agrees, goal missed, differs)."""
    return st["status"] if st["status"] != "ok" else badge(st.get("claims") or [])


def _cls(status: str) -> str:
    return html.escape(status.split(" ")[0] if status.startswith("not in") else status.replace(" ", "-"))


def _source(c: dict[str, Any]) -> str:
    """Where a row's bound comes from: the paper figure's bound_rule, or the project's goal."""
    if c.get("goal"):
        return f"<br><i>project goal:</i> {html.escape(c['goal'])}"
    if c.get("bound_rule"):
        return f"<br><i>bound:</i> {html.escape(c['bound_rule'])}"
    return ""


def _claims_table(claims: list[dict[str, Any]]) -> str:
    if not claims:
        return "<p>No claims evaluated.</p>"
    rows = "".join(
        f"<tr><td>{html.escape(c['claim'])}</td><td class='kind'>{html.escape(c.get('kind') or '')}</td>"
        f"<td>{html.escape(c['paper'])}{_source(c)}</td>"
        f"<td>{html.escape(str(c['ours']))}</td><td class='{_cls(c['status'])}'>{html.escape(c['status'])}</td>"
        f"<td>{html.escape(c.get('deviation') or '')}</td></tr>" for c in claims)
    return ("<table><tr><th>claim</th><th>kind</th><th>paper</th><th>ours</th><th>check</th><th>deviation</th></tr>"
            f"{rows}</table>")


def _figures(folder: Path, name: str, skip: set[str]) -> str:
    parts = []
    specs = sorted(folder.glob(f"*{FIGURE_SUFFIX}"))
    if (folder / FIGURES_FILE).is_file():
        order = json.loads((folder / FIGURES_FILE).read_text())["figures"]
        rank = {k: i for i, k in enumerate(order)}
        specs.sort(key=lambda p: rank.get(p.name[: -len(FIGURE_SUFFIX)], len(rank)))
    for path in specs:
        fig = pio.from_json(path.read_text())
        parts.append(fig.to_html(full_html=False, include_plotlyjs=False, default_width="100%"))
    if not specs:
        parts += [f"<img src='{html.escape(name)}/{html.escape(p.name)}' alt='{html.escape(p.stem)}'>"
                  for p in sorted(folder.glob("*.png"))]
    if not parts:
        links = [p for p in sorted(folder.glob("*.html")) if p.name not in skip]
        parts += [f"<p><a href='{html.escape(name)}/{html.escape(p.name)}'>{html.escape(p.stem)}</a></p>"
                  for p in links]
    return "\n".join(parts) or "<p>No figures.</p>"


def _section(out_root: Path, st: dict[str, Any]) -> str:
    name = st["name"]
    links = [f"<a href='{html.escape(name)}/{html.escape(st[k])}'>{label}</a>"
             for k, label in (("executed", "executed notebook"), ("html", "as HTML")) if st.get(k)]
    params = ", ".join(f"<code>{html.escape(k)}={html.escape(json.dumps(v))}</code>"
                       for k, v in (st.get("parameters") or {}).items())
    error = f"<p class='failed'>{html.escape(st['error'])}</p>" if st.get("error") else ""
    if st.get("modelled_only"):  # the measured cells did not run: say so above the figures
        error += f"<p class='modelled'>Modelled only: {html.escape(st['modelled_only'])}</p>"
    return (f"<section id='{html.escape(name)}'><h2>{html.escape(st['title'])}</h2>"
            f"<p>Paper: {html.escape(st['paper'])}</p>"
            f"<p>Status: <span class='{_cls(section_badge(st))}'>{html.escape(section_badge(st))}</span>"
            + (f" ({html.escape(st['mode'])} run, {st['duration_s']} s, {html.escape(st.get('started', ''))})"
               if st.get("mode") else "") + "</p>" + error
            + (f"<p>{' · '.join(links)}</p>" if links else "")
            + (f"<p>Parameters: {params}</p>" if params else "")
            + _claims_table(st["claims"])
            + _figures(out_root / name, name, {st.get("html") or ""}) + "</section>")


def _counts(t: Tally) -> tuple[str, str, str]:
    """The summary table's three count cells: paper agree / compared, goals met / judged, reported only."""
    return f"{t.agree} / {t.agree + t.differ}", f"{t.met} / {t.met + t.missed}", f"{t.reported}"


def write_index(out_root: Path, specs: list[Spec]) -> Path:
    """Write index.html, index.json and plotly.min.js into `out_root`; return index.html's path."""
    statuses = [_status(out_root, s) for s in specs]
    for st in statuses:
        st["badge"] = section_badge(st)
    write_shared(out_root)  # plotly.min.js: every embedded figure's, and the notebooks' (reproduce.plotlyjs)
    summary = "".join(
        f"<tr><td><a href='#{html.escape(s['name'])}'>{html.escape(s['name'])}</a></td>"
        f"<td>{html.escape(s['title'])}</td><td>{html.escape(s.get('mode') or '')}</td>"
        f"<td class='{_cls(s['badge'])}'>{html.escape(s['badge'])}"
        + (" <span class='modelled'>(modelled only)</span>" if s.get("modelled_only") else "") + "</td>"
        + "".join(f"<td>{n}</td>" for n in _counts(tally(s["claims"]))) + "</tr>"
        for s in statuses)
    total = tally(c for s in statuses for c in s["claims"])
    summary += "<tr><th colspan='4'>all experiments</th>" + "".join(f"<th>{n}</th>" for n in _counts(total)) + "</tr>"
    generated = time.strftime("%Y-%m-%d %H:%M:%S")
    page = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Stanza workbench: reproductions</title>"
        f"<style>{_CSS}</style><script src='{PLOTLYJS}'></script></head><body>"
        "<h1>Stanza workbench: reproductions</h1>"
        "<p>Wu et al., <i>Stanza: Layer Separation for Distributed Training in Deep Learning</i>, "
        f"arXiv 1812.10624. Generated {generated}.</p>"
        "<p><a href='gallery.html'>Gallery</a>: every executed notebook and tutorial rendered to HTML, with its "
        "figures. Each claim's <i>kind</i> says what its number is: <i>measured</i> (timed or trained here), "
        "<i>replayed</i> (run on the emulated cluster with compute waited from the named device profile), "
        "<i>modelled</i> (the performance model, no run) or <i>counted</i> (parameters, FLOPs, bytes counted "
        "exactly). A section's badge says what its claims say: <i>agrees</i> (every paper claim compared agrees), "
        "<i>differs</i> (one differs), <i>goal missed</i>, or <i>ran</i> (the notebook ran; nothing was compared). "
        "Claims fall in three categories, set in each YAML: <i>paper</i> claims have the paper's figure for "
        "their configuration and a bound around it (agree / agree + differ); <i>goals</i> are targets the project "
        "set itself where the paper gives no figure (met / met + missed), never counted as agreement with the "
        "paper; <i>reported only</i> are our figures with neither (no verdict).</p>"
        "<table><tr><th>experiment</th><th>title</th><th>run</th><th>status</th><th>paper: agree / compared</th>"
        "<th>goals: met / judged</th><th>reported only</th></tr>"
        f"{summary}</table>" + "".join(_section(out_root, s) for s in statuses) + "</body></html>\n")
    index = out_root / "index.html"
    index.write_text(page)
    (out_root / "index.json").write_text(json.dumps({"generated": generated, "experiments": statuses},
                                                    indent=1, default=str) + "\n")
    return index
