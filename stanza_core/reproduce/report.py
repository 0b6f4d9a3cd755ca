"""The report: `<out>/index.html` (one page, every experiment) and `<out>/index.json` (the same data).

Built from each experiment's `<out>/<name>/status.json`, so a run with `--only` refreshes its
experiments and keeps the others' last results. Figures are embedded from the
`<figure>.plotly.json` files the notebooks write (interactive, one shared plotly.min.js beside
the page, works offline); an experiment without them shows its PNGs, else links its HTML figures.
The page is templates/index.html.j2 (Jinja2, autoescaped); this module gathers what it shows.
"""
from __future__ import annotations

import html
import json
import time
from pathlib import Path
from typing import Any

import plotly.io as pio
import jinja2
from markupsafe import Markup

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
    """A status's CSS class (the template escapes it)."""
    return status.split(" ")[0] if status.startswith("not in") else status.replace(" ", "-")


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


def _section(out_root: Path, st: dict[str, Any]) -> dict[str, Any]:
    """What templates/index.html.j2 shows of one experiment."""
    name = st["name"]
    return {**st, "links": [(st[k], label) for k, label in (("executed", "executed notebook"), ("html", "as HTML"))
                            if st.get(k)],
            "parameters": [(k, json.dumps(v)) for k, v in (st.get("parameters") or {}).items()],
            "counts": _counts(tally(st["claims"])),
            "figures": _figures(out_root / name, name, {st.get("html") or ""})}


def _counts(t: Tally) -> tuple[str, str, str]:
    """The summary table's three count cells: paper claims agree / explained / compared, goals met /
    judged, reported only."""
    return f"{t.agree} / {t.explained} / {t.agree + t.explained + t.differ}", f"{t.met} / {t.met + t.missed}", f"{t.reported}"


def template(name: str):
    """One of templates/*.html.j2 (Jinja2: nbconvert's template engine). Every value is escaped by
    html.escape, as the pages always were (markup: only what is marked safe, such as a macro's
    output or plotly's figure HTML)."""

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).resolve().parent / "templates"),
                             autoescape=True,
                             finalize=lambda v: v if isinstance(v, Markup) else Markup(html.escape(str(v))))
    env.filters["cls"] = _cls
    return env.get_template(name)


def write_index(out_root: Path, specs: list[Spec]) -> Path:
    """Write index.html, index.json and plotly.min.js into `out_root`; return index.html's path."""
    statuses = [_status(out_root, s) for s in specs]
    for st in statuses:
        st["badge"] = section_badge(st)
    write_shared(out_root)  # plotly.min.js: every embedded figure's, and the notebooks' (reproduce.plotlyjs)
    total = tally(c for s in statuses for c in s["claims"])
    generated = time.strftime("%Y-%m-%d %H:%M:%S")
    page = template("index.html.j2").render(css=_CSS, plotlyjs=PLOTLYJS, generated=generated, total=_counts(total),
                              sections=[_section(out_root, s) for s in statuses]) + "\n"
    index = out_root / "index.html"
    index.write_text(page)
    (out_root / "index.json").write_text(json.dumps({"generated": generated, "experiments": statuses},
                                                    indent=1, default=str) + "\n")
    return index
