"""What the notebooks call besides the figure builders: validated experiment runs, results JSON,
figure files.

Notebooks hold parameters and calls only; every loop, branch and check lives in the library.
Each notebook writes `<out_dir>/results.json` (the numbers its reproduction YAML's claims point
into, see `stanza_core.reproduce`) and `<out_dir>/<figure>.html` (+ `.png` where a Chromium is
available for kaleido).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
import torch
from tqdm import tqdm

from .anatomy import Profile, profile_model
from .models import get_model
from .split import SplitError

if "ipykernel" in sys.modules:
    # In a kernel, figures carry plotly's own mimetype (JupyterLab draws it) and an HTML version
    # with plotly.js inlined once, so executed notebooks and their nbconvert HTML show them offline.
    pio.renderers.default = "plotly_mimetype+notebook"

RESULTS_FILE = "results.json"
FIGURE_JSON_SUFFIX = ".plotly.json"  # the report (stanza_core.reproduce) embeds figures from these
FIGURES_FILE = "figures.json"  # figure keys in the order they were saved: the report's order
PNG_WIDTH = 1200  # pixels; the figures' heights come from their layouts


# ---------------------------------------------------------------------------------------------
# Parameter checks (one-line errors before any work starts)


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'cpu'; 'cuda' without a GPU is an error."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be one of auto, cpu, cuda; got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA device; use device='cpu' or 'auto'")
    return device


def check_models(models: Sequence[str] | str, image_size: int | None = None) -> list[str]:
    """The model names as a list (a comma-separated string, as `papermill -p` gives, is accepted);
    `checks.model_names`, the one place these checks live."""
    from .checks import model_names

    return model_names(models, image_size)


def experiment_params(cls: type, namespace: Mapping[str, Any]) -> Any:
    """An experiment's parameters dataclass (e.g. `throughput.ThroughputParams`, checked on
    creation) from a notebook's `globals()`: every field the `parameters` cell names, by the same
    name; fields the cell does not name keep their defaults, names that are no field (out_dir,
    png, cache_dir) stay with the notebook."""
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    return cls(**{n: namespace[n] for n in names if n in namespace})


# ---------------------------------------------------------------------------------------------
# Notebook 01: layer anatomy


def profile_models(models: Sequence[str] | str, *, image_size: int = 224, num_classes: int = 1000,
                   batch_size: int = 32, time: bool = False, device: str = "auto", reps: int = 5) -> list[Profile]:
    """Build each zoo model (random init) and profile it at a square `image_size` input.

    All parameters are checked before the first model is built, so bad input fails at once."""
    if not isinstance(image_size, int) or image_size < 1:
        raise ValueError(f"image_size must be a positive integer, got {image_size!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    names = check_models(models, image_size)
    dev = resolve_device(device) if time else "cpu"
    profiles = []
    for name in tqdm(names, desc="profiling", unit="model"):
        model = get_model(name, num_classes)
        try:
            profiles.append(profile_model(model, (3, image_size, image_size), batch_size, time=time,
                                          name=name, device=dev, reps=reps))
        except (RuntimeError, SplitError) as e:  # e.g. a feature map shrinking to zero at a small image_size
            first = str(e).strip().splitlines()[0]
            raise ValueError(f"{name} cannot run at image_size={image_size}: {first}") from None
        del model  # VGG holds ~0.5 GB of parameters: free it before building the next
    return profiles


def _part_summary(p: Profile) -> dict[str, Any]:
    out: dict[str, Any] = {
        "conv_params": p.conv.params, "fc_params": p.fc.params, "params": p.params,
        "fc_param_share": p.fc_param_share(),
        "conv_flops": p.conv.flops, "fc_flops": p.fc.flops, "fc_flop_share": p.fc_flop_share(),
        "boundary": p.boundary, "boundary_values": p.boundary_values, "boundary_bytes": p.boundary_bytes,
        # What one step of data parallelism syncs, per part (fp32 gradients).
        "conv_grad_bytes": 4 * p.conv.params, "fc_grad_bytes": 4 * p.fc.params, "grad_bytes": 4 * p.params,
        "timing": None,
    }
    if p.conv.fwd_s is not None:
        conv_s, fc_s = p.conv.fwd_s + p.conv.bwd_s, p.fc.fwd_s + p.fc.bwd_s
        out["timing"] = {"device": p.timed_on, "batch_size": p.batch_size,
                         "conv_fwd_s": p.conv.fwd_s, "conv_bwd_s": p.conv.bwd_s,
                         "fc_fwd_s": p.fc.fwd_s, "fc_bwd_s": p.fc.bwd_s,
                         "fc_time_share": fc_s / (conv_s + fc_s) if conv_s + fc_s > 0 else 0.0}
    return out


def anatomy_results(profiles: Sequence[Profile]) -> dict[str, Any]:
    """results.json of notebook 01: per model the key numbers (`models.<name>.<key>`) and the
    full profiles (`profiles.<name>`, loadable with Profile.from_dict) for later notebooks."""
    first = profiles[0]
    return {
        "experiment": "anatomy",
        "input_shape": list(first.input_shape),
        "batch_size": first.batch_size,
        "models": {p.model: _part_summary(p) for p in profiles},
        "profiles": {p.model: p.to_dict() for p in profiles},
    }


# ---------------------------------------------------------------------------------------------
# Output files


def write_results(results: Mapping[str, Any], out_dir: str | os.PathLike) -> Path:
    """Write `results` as `<out_dir>/results.json` (strict JSON: NaN or infinity is an error)."""
    path = Path(out_dir) / RESULTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_finite(results, "results")
    path.write_text(json.dumps(results, indent=1, allow_nan=False) + "\n")
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
        from choreographer.browsers.chromium import Chromium
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
    manifest.write_text(json.dumps({"figures": keys}) + "\n")
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
