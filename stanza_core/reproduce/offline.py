"""The report works with no network: MathJax, require.js and reveal.js served from the output folder.

nbconvert's templates load them from CDNs (cdnjs, unpkg). Every page the report writes loads them
from `<out>/_static/` by relative path instead, copied there once per output folder:

    <out>/_static/mathjax/      MathJax 2.7 from the installed jupyter-server-mathjax package
                                (its translations left out: English is built in), plus
                                config/stanza.js (its STIX-Web fonts for the HTML-CSS output)
    <out>/_static/require.js    RequireJS and jQuery (the decks' template uses it), shipped in
    <out>/_static/jquery.min.js stanza_core/reproduce/static/
    <out>/_static/reveal.js/    reveal.js 4.0.2, shipped there too (static/README.md says what
                                was taken and changed)

`exporter_config(page_dir, out_root)` gives an nbconvert exporter the relative URLs for a page
written into `page_dir` (`slides_config` a SlidesExporter: reveal.js too, and a template without
the mermaid loader that the reveal template imports from a CDN on every deck). A notebook's saved widget state is dropped before its export: the static
page would fetch the widget renderer (@jupyter-widgets/html-manager) from a CDN, and the widgets
need a live kernel all the same (the notebook runs in JupyterLab, `make lab`).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

STATIC = "_static"
SHIPPED = Path(__file__).resolve().parent / "static"
SLIDES_TEMPLATE = Path(__file__).resolve().parent / "templates" / "slides.html.j2"
# The configuration jupyter-server-mathjax ships, then ours: it ships the STIX-Web fonts only, so the
# HTML-CSS output must use them (as Jupyter's own MathJax settings do) instead of its default TeX fonts.
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe,stanza"
STANZA_CONFIG = """MathJax.Hub.Config({"HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web",
                                   imageFont: null}});
MathJax.Ajax.loadComplete("[MathJax]/config/stanza.js");
"""


def mathjax_source() -> Path:
    """The installed MathJax (jupyter-server-mathjax's static folder, found without importing it:
    importing would import jupyter_server)."""
    spec = importlib.util.find_spec("jupyter_server_mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the report's MathJax comes from the package jupyter-server-mathjax, a dependency of "
                           "stanza-core that is not installed: pip install jupyter-server-mathjax")
    return Path(list(spec.submodule_search_locations)[0]) / "static"


def vendor(out_root: Path) -> Path:
    """Copy MathJax, require.js and reveal.js into `<out_root>/_static/` (what is there already and
    has the same size is kept); return that folder."""
    dest = out_root / STATIC
    _sync(SHIPPED, dest, skip=("README.md",))
    _sync(mathjax_source(), dest / "mathjax", skip=("localization",))
    config = dest / "mathjax" / "config" / "stanza.js"
    if not config.is_file() or config.read_text() != STANZA_CONFIG:
        config.write_text(STANZA_CONFIG)
    return dest


def _sync(src: Path, dest: Path, skip: tuple[str, ...]) -> None:
    for path in src.rglob("*"):
        rel = path.relative_to(src)
        if rel.parts[0] in skip or not path.is_file():
            continue
        target = dest / rel
        if not target.is_file() or target.stat().st_size != path.stat().st_size:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def exporter_config(page_dir: Path, out_root: Path) -> dict:
    """Keyword arguments of an nbconvert HTMLExporter / SlidesExporter whose page goes into `page_dir`."""
    rel = Path(os.path.relpath(out_root / STATIC, page_dir)).as_posix()
    return {"mathjax_url": f"{rel}/mathjax/MathJax.js?config={MATHJAX_CONFIG}",
            "require_js_url": f"{rel}/require.js", "jquery_url": f"{rel}/jquery.min.js"}


def slides_config(page_dir: Path, out_root: Path) -> dict:
    """As exporter_config, for a SlidesExporter: reveal.js from the folder too, and the reveal
    template without its mermaid loader (templates/slides.html.j2)."""
    rel = Path(os.path.relpath(out_root / STATIC / "reveal.js", page_dir)).as_posix()
    return {**exporter_config(page_dir, out_root), "reveal_url_prefix": rel, "template_file": str(SLIDES_TEMPLATE)}


def without_widget_state(nb):
    """The notebook (nbformat node) without saved widget state (see the module docstring)."""
    nb.metadata.pop("widgets", None)
    return nb
