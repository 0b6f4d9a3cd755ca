"""The course's tutorials in `make reproduce`, and the gallery: one page showing every executed
notebook and tutorial rendered to HTML, with their figures.

    run_tutorials(out_root)   papermill-run tutorials/t*_*.ipynb into <out>/tutorials/<stem>/
                              (executed notebook, its HTML, figures, results.json, status.json)
    write_gallery(out_root)   <out>/gallery.html: a card per experiment and per tutorial, each
                              linking its rendered notebook and showing its PNG figures (or
                              links to the interactive HTML figures where no PNG was made)

Lectures (tutorials/lectures/l*_*.ipynb) run with the tutorials and are also rendered as
reveal.js slides (nbconvert's SlidesExporter, code hidden: `<stem>.slides.html`).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .report import section_badge, template
from .spec import REPO_ROOT, Spec
from .execute import execute, export_html as _export_html, one_line as _one_line
from .plotlyjs import share_plotlyjs
from .offline import slides_config, vendor, without_widget_state

TUTORIALS_DIR = REPO_ROOT / "tutorials"
TUTORIALS_OUT = "tutorials"  # <out>/tutorials/<stem>/
GALLERY = "gallery.html"
FIGURES_FILE = "figures.json"  # written by stanza_core.nbtools.save_figures: the figures' order


def tutorial_notebooks(folder: Path = TUTORIALS_DIR) -> list[Path]:
    return sorted(folder.glob("t[0-9]_*.ipynb"))


def lecture_notebooks(folder: Path = TUTORIALS_DIR) -> list[Path]:
    """The lecture decks: <tutorials>/lectures/l*_*.ipynb (cells carry reveal.js slide types)."""
    return sorted((folder / "lectures").glob("l[0-9]_*.ipynb"))


def _export_slides(ipynb: Path, out_root: Path) -> Path | None:
    """The deck beside `ipynb`, loading reveal.js, require.js and MathJax from `<out_root>/_static`."""
    try:
        import nbformat  # nbformat: nbconvert's; only the slides export needs it
        from nbconvert import SlidesExporter  # nbconvert: ~500 more modules; only the export needs it


        vendor(out_root)
        nb = without_widget_state(nbformat.read(str(ipynb), as_version=4))
        body, _ = SlidesExporter(exclude_input=True, **slides_config(ipynb.parent, out_root)).from_notebook_node(nb)
    except Exception as e:  # a convenience, like the HTML export
        print(f"  slides export of {ipynb.name} skipped: {_one_line(e)}")
        return None
    out = ipynb.with_suffix(".slides.html")
    out.write_text(body)
    return out


def _title(ipynb: Path) -> str:
    """The notebook's first markdown heading (a deck may open with an empty code cell), else its stem."""
    for cell in json.loads(ipynb.read_text())["cells"]:
        text = "".join(cell["source"]).strip()
        if cell["cell_type"] == "markdown" and text.startswith("#"):
            return text.splitlines()[0].lstrip("# ").strip()
    return ipynb.stem


def run_tutorials(out_root: Path, *, html_export: bool = True, folder: Path = TUTORIALS_DIR) -> list[dict[str, Any]]:
    """Execute every tutorial (its own default parameters, figures into its folder); statuses."""

    statuses = []
    notebooks = tutorial_notebooks(folder) + lecture_notebooks(folder)
    for i, nb in enumerate(notebooks, start=1):
        out = out_root / TUTORIALS_OUT / nb.stem
        out.mkdir(parents=True, exist_ok=True)
        print(f"[tutorial {i}/{len(notebooks)}] {nb.stem}", flush=True)
        st: dict[str, Any] = {"name": nb.stem, "title": _title(nb), "status": "ok", "error": None,
                              "executed": None, "html": None, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        t0 = time.perf_counter()
        executed = out / nb.name
        try:
            execute(nb, executed, {"out_dir": str(out.resolve())}, timeout_s=900)
        except Exception as e:  # reported; the other tutorials still run
            st.update(status="failed", error=_one_line(e))
        share_plotlyjs(out, out_root)  # as the experiments': one plotly.min.js for the whole folder
        if executed.exists():
            st["executed"] = executed.name
            if html_export and (h := _export_html(executed, out_root)):
                st["html"] = h.name
            if html_export and nb.parent.name == "lectures" and (sl := _export_slides(executed, out_root)):
                st["slides"] = sl.name
        st["duration_s"] = round(time.perf_counter() - t0, 1)
        (out / "status.json").write_text(json.dumps(st, indent=1) + "\n")
        print(f"[tutorial {i}/{len(notebooks)}] {nb.stem}: {st['status']} in {st['duration_s']} s"
              + (f" - {st['error']}" if st["error"] else ""), flush=True)
        statuses.append(st)
    return statuses


def _figure_names(folder: Path) -> list[str]:
    if (folder / FIGURES_FILE).is_file():
        return json.loads((folder / FIGURES_FILE).read_text())["figures"]
    return sorted(p.name[: -len(".plotly.json")] for p in folder.glob("*.plotly.json"))


def _card(rel: str, st: dict[str, Any], folder: Path, kind: str) -> dict[str, Any]:
    """What templates/gallery.html.j2 shows of one notebook: its status, links and figures."""
    figs = []
    for name in _figure_names(folder):
        if (folder / f"{name}.png").is_file():
            figs.append({"name": name, "png": True})
        elif (folder / f"{name}.html").is_file():
            figs.append({"name": name, "png": False})
    return {"rel": rel, "title": st.get("title") or st["name"], "kind": kind, "status": st.get("status", "not run"),
            "dur": f", {st['duration_s']} s" if st.get("duration_s") is not None else "",
            "html": st.get("html"), "slides": st.get("slides"), "error": st.get("error"), "figs": figs}


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1500px; padding: 0 1em; color: #222; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(440px, 1fr)); gap: 1em; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.6em 0.9em; background: #fafafa; }
.card h3 { margin: 0.2em 0; font-size: 1.02em; } .meta { color: #555; font-size: 0.88em; margin: 0.3em 0; }
.figs { display: flex; flex-wrap: wrap; gap: 6px; } .figs img { width: 200px; border: 1px solid #e4e4e4; background: white; }
.fig { font-size: 0.85em; margin-right: 0.8em; }
.ok, .agrees { color: #1a7f37; font-weight: 600; } .failed, .differs, .goal { color: #c62828; font-weight: 600; }
.skipped, .not { color: #8a6d00; } .ran { color: #555; font-weight: 600; }
"""


def write_gallery(out_root: Path, specs: list[Spec], tutorials: list[Path] | None = None) -> Path:
    """Write <out>/gallery.html from the experiments' and tutorials' status.json files."""
    cards_exp, cards_tut = [], []
    for spec in sorted(specs, key=lambda s: s.notebook.name):  # notebook order: 01, 02, ...
        folder = out_root / spec.name
        path = folder / "status.json"
        st = json.loads(path.read_text()) if path.is_file() else {"name": spec.name, "title": spec.title,
                                                                   "status": "not run", "claims": []}
        st["status"] = section_badge(st)  # as in the report: what the claims say, not only that it ran
        cards_exp.append(_card(spec.name, st, folder, spec.notebook.name))
    tutorials = tutorial_notebooks() if tutorials is None else tutorials
    lectures = lecture_notebooks(tutorials[0].parent if tutorials else TUTORIALS_DIR)
    for nb in tutorials + lectures:
        folder = out_root / TUTORIALS_OUT / nb.stem
        path = folder / "status.json"
        st = json.loads(path.read_text()) if path.is_file() else {"name": nb.stem, "title": _title(nb),
                                                                   "status": "not run"}
        where = f"tutorials/lectures/{nb.name} (slides)" if nb.parent.name == "lectures" else f"tutorials/{nb.name}"
        cards_tut.append(_card(f"{TUTORIALS_OUT}/{nb.stem}", st, folder, where))
    page = template("gallery.html.j2").render(css=_CSS, generated=time.strftime("%Y-%m-%d %H:%M:%S"), tutorials=cards_tut,
                              experiments=cards_exp) + "\n"
    out = out_root / GALLERY
    out.write_text(page)
    return out
