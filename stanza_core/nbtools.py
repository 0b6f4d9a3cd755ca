"""A notebook's boundary: its parameters in (`experiment_params`: the parameters cell as the
experiment's checked dataclass), its results and figures out (`write_results`, `save_figures`).

Notebooks hold parameters and calls only; every loop, branch and check lives in the library
(stanza_core.experiments; notebook 01's profiles: experiments.anatomy). Each notebook writes `<out_dir>/results.json` (the numbers its reproduction YAML's claims point
into, see `stanza_core.reproduce`) and `<out_dir>/<figure>.html` (+ `.png` where a Chromium is
available for kaleido).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from . import atomic

if "ipykernel" in sys.modules:
    # In a kernel, figures carry plotly's own mimetype (JupyterLab draws it) and an HTML version
    # with plotly.js inlined once, so executed notebooks and their nbconvert HTML show them offline.
    pio.renderers.default = "plotly_mimetype+notebook"

RESULTS_FILE = "results.json"
FIGURE_JSON_SUFFIX = ".plotly.json"  # the report (stanza_core.reproduce) embeds figures from these
FIGURES_FILE = "figures.json"  # figure keys in the order they were saved: the report's order
PNG_WIDTH = 1200  # pixels; the figures' heights come from their layouts


# ---------------------------------------------------------------------------------------------
# Parameters in


def experiment_params(cls: type, namespace: Mapping[str, Any]) -> Any:
    """An experiment's parameters dataclass (e.g. `throughput.ThroughputParams`, checked on
    creation) from a notebook's `globals()`: every field the `parameters` cell names, by the same
    name; fields the cell does not name keep their defaults, names that are no field (out_dir,
    png, cache_dir) stay with the notebook. A parameter renamed since a release (the class's
    RENAMED: old name -> (new name, what it is)) is a one-line error naming the new one: papermill
    passes an unknown parameter on with a warning, and it would otherwise be dropped unseen."""
    for old, (new, what) in getattr(cls, "RENAMED", {}).items():
        if old in namespace:
            raise ValueError(f"the parameter {old} is now {new} ({what}): set {new}: {namespace[old]!r}")
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    return cls(**{n: namespace[n] for n in names if n in namespace})


# ---------------------------------------------------------------------------------------------
# Results and figures out


def write_results(results: Mapping[str, Any], out_dir: str | os.PathLike) -> Path:
    """Write `results` as `<out_dir>/results.json` (strict JSON: NaN or infinity is an error)."""
    path = Path(out_dir) / RESULTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_finite(results, "results")
    atomic.write_text(path, json.dumps(results, indent=1, allow_nan=False) + "\n")
    print(f"results: {path}")
    return path


def _check_finite(obj: Any, where: str) -> None:
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"{where} is {obj}: results must be finite numbers")
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            _check_finite(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_finite(v, f"{where}.{i}")


def png_unavailable_reason() -> str | None:
    """None when kaleido can export PNG here; otherwise why not, in one line.

    kaleido 1.x drives a headless Chrome/Chromium; it finds one on PATH (Debian: `chromium`,
    see scripts/install_chromium.sh) or at $BROWSER_PATH."""
    try:
        import kaleido  # noqa: F401  (only its presence matters here)
        from choreographer.browsers.chromium import Chromium  # choreographer: ~45 more modules; only asked when a PNG is wanted
    except ImportError as e:
        return f"kaleido is not installed ({e})"
    path = Chromium.find_browser(skip_local=False)
    if not path:
        return "no Chrome/Chromium found (install one with scripts/install_chromium.sh, or set BROWSER_PATH)"
    if not os.access(path, os.X_OK):
        return f"browser {path} is not an executable file"
    return None


def save_figures(figs: Mapping[str, go.Figure], out_dir: str | os.PathLike, png: bool = True) -> list[Path]:
    """Write each figure as `<out_dir>/<key>.html`, `<key>.plotly.json` and, when possible, `<key>.png`.

    The HTML files load plotly.js from one `plotly.min.js` beside them, so they work offline
    without each carrying 4 MB. PNG export needs a Chromium; without one it is skipped with a
    printed note (HTML is always written)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for key, fig in figs.items():
        path = out / f"{key}.html"
        fig.write_html(path, include_plotlyjs="directory", full_html=True)
        spec = out / f"{key}{FIGURE_JSON_SUFFIX}"
        spec.write_text(fig.to_json())
        written += [path, spec]
    manifest = out / FIGURES_FILE  # several save_figures calls in one notebook add up
    keys = json.loads(manifest.read_text())["figures"] if manifest.is_file() else []
    keys += [k for k in figs if k not in keys]
    atomic.write_text(manifest, json.dumps({"figures": keys}) + "\n")
    if png:
        reason = png_unavailable_reason()
        if reason is None:
            pngs = [out / f"{key}.png" for key in figs]
            try:  # one browser for all figures: much faster than write_image per figure
                pio.write_images(list(figs.values()), pngs, width=PNG_WIDTH,
                                 height=[f.layout.height or 500 for f in figs.values()])
                written += pngs
            except Exception as e:  # a browser that fails to start must not lose the HTML figures
                reason = f"kaleido failed: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"
        if reason is not None:
            print(f"PNG export skipped: {reason}")
    print(f"figures: {', '.join(p.name for p in written)} in {out}")
    return written
