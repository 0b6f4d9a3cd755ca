"""One plotly.js for the whole output folder: `<out>/plotly.min.js`, loaded by relative path.

plotly.js is 4.8 MB. A notebook run would carry it three times: beside its HTML figures
(nbtools.save_figures writes them with a `plotly.min.js` in their folder, so they also work
outside a reproduce run), inlined once in the executed notebook (plotly's notebook renderer) and
again in that notebook's HTML export. After each notebook runs, `share_plotlyjs` points all of
them at the one copy at the output folder's root, so every page works offline from the folder:

    <out>/plotly.min.js                      the one copy (write_shared)
    <out>/<name>/<figure>.html               <script src="../plotly.min.js">
    <out>/<name>/<notebook>.ipynb (+ .html)  the inlined library replaced by the same tag
    <out>/tutorials/<stem>/...               "../../plotly.min.js"

The renderer's output also loads MathJax 3 from a CDN; that tag is dropped (the pages' MathJax
is served from the folder, reproduce.offline).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import plotly.io as pio
from plotly.offline import get_plotlyjs

from ..nbtools import FIGURE_JSON_SUFFIX as FIGURE_SUFFIX

PLOTLYJS = "plotly.min.js"


def write_shared(out_root: Path) -> Path:
    """`<out_root>/plotly.min.js`, written unless it already holds this plotly's library."""
    path = out_root / PLOTLYJS
    js = get_plotlyjs()
    if not path.is_file() or path.stat().st_size != len(js.encode()) or path.read_text() != js:
        path.write_text(js)
    return path


def _script(src: str) -> str:
    return f'<script charset="utf-8" src="{src}"></script>'


def share_plotlyjs(folder: Path, out_root: Path) -> str:
    """Point `folder`'s HTML figures and executed notebooks at `<out_root>/plotly.min.js` (written
    if missing) and remove the folder's own copy; return the relative path they now load."""
    write_shared(out_root)
    src = Path(os.path.relpath(out_root / PLOTLYJS, folder)).as_posix()
    for spec in folder.glob(f"*{FIGURE_SUFFIX}"):  # each HTML figure, written again from its spec
        html = spec.with_name(spec.name[: -len(FIGURE_SUFFIX)] + ".html")
        if html.is_file():
            pio.write_html(json.loads(spec.read_text()), html, include_plotlyjs=src, full_html=True,
                           validate=False)
    for ipynb in folder.glob("*.ipynb"):
        _share_in_notebook(ipynb, src)
    if (own := folder / PLOTLYJS).is_file():
        own.unlink()
    return src


# The MathJax 3 that plotly's notebook renderer loads from a CDN before every figure; the notebook's
# HTML page loads MathJax 2 from the output folder already (reproduce.offline), which plotly.js uses.
MATHJAX_CDN_TAG = re.compile(r'<script src="https://cdnjs\.cloudflare\.com/ajax/libs/mathjax/[^"]*"></script>')


def _share_in_notebook(ipynb: Path, src: str) -> None:
    """Replace the library plotly's notebook renderer inlines (one `<script>` in an HTML output)
    with a tag loading `src`, and drop its MathJax CDN tag; a notebook without them is left as it is."""
    inline = f"<script>{get_plotlyjs()}</script>"
    nb = json.loads(ipynb.read_text())
    changed = False
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            data = out.get("data") or {}
            text = data.get("text/html")
            if text is None:
                continue
            joined = "".join(text) if isinstance(text, list) else text
            new = MATHJAX_CDN_TAG.sub("", joined.replace(inline, _script(src)))
            if new != joined:
                data["text/html"] = new
                changed = True
    if changed:
        ipynb.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
