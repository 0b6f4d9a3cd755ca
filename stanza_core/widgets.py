"""Interactive node-assignment explorer: ipywidgets controls driving the performance model.

    from stanza_core.widgets import Explorer
    Explorer(model="vgg16", nodes=8, bandwidth_gbps=10)   # the last line of a cell shows it

Controls: model, nodes N, link bandwidth (Gb/s per direction), per-message latency (us),
global batch, device (a row of the device table or a measured device such as h200-measured,
resolved by `perf.device_profile` at the global batch / N; the status names its source), k FC workers and the strategy whose
communication the diagram draws; beyond the paper, the chosen stanza's FC share (each FC worker
also runs the CONV body on this share of the global batch, snapped to a share giving whole
samples), micro-batches M and compression (boundary dtype | CONV gradient compression), and
whether the optimiser searches k x share x M (off: the paper's k only) and may recommend compression. Every change re-runs `perf.best_assignment` and `perf.predict`
(closed form, milliseconds) and redraws five views: throughput against k, the time breakdown of
one step, bytes per node by category, the optimiser's recommendation, and who sends what to
whom. Figures are plain plotly figures (`viz.assignment`) written into `ipywidgets.Output`s in
plotly's mimetype, so the explorer needs nothing beyond ipywidgets and plotly (JupyterLab,
Notebook 7 and VS Code render that mimetype; plotly's FigureWidget would also need anywidget).

k runs over 1..N//2: the training engine refuses an FC worker that would serve no CONV worker,
so these are the assignments that can actually be run.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import ipywidgets as W
import plotly.graph_objects as go
from IPython.display import display

from . import checks, registry
from .perf import Cluster, best_assignment, check_device, device_names, device_profile, named_profile, predict
from .perf.optimize import COMPRESSIONS, MICRO_BATCHES, PAPER, share_grid
from .topology import fc_worker_choices
from .variant import Variant
from .viz import assignment as va

DEFAULT_MODELS = ("alexnet", "vgg16", "vgg19", "resnet50")
FIGURES = ("throughput", "breakdown", "bytes", "diagram")


def _check(models: Sequence[str], model: str, nodes: int, max_nodes: int, bandwidth_gbps: float, latency_us: float,
           global_batch: int, device: str, fc_workers: int, strategy: str, image_size: int) -> None:
    """One-line ValueError for the first bad argument (before any widget exists)."""
    for m in models:
        checks.model_fits(m, None)
    if model not in models:
        raise ValueError(f"model {model!r} is not among models {list(models)}")
    checks.positive_int("max_nodes", max_nodes, 2)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 2 <= nodes <= max_nodes:
        raise ValueError(f"nodes must be an integer in 2..{max_nodes}, got {nodes!r}")
    checks.number("bandwidth_gbps", bandwidth_gbps, above=0)
    checks.number("latency_us", latency_us, above=0)
    checks.positive_int("global_batch", global_batch, nodes, what="nodes")
    check_device(device)
    fits = fc_worker_choices(nodes)
    if isinstance(fc_workers, bool) or not isinstance(fc_workers, int) or fc_workers not in (0, *fits):
        raise ValueError(f"fc_workers must be 0 (the optimiser's k) or in 1..{len(fits)} for {nodes} nodes "
                         f"(every FC worker serves a CONV worker), got {fc_workers!r}")
    checks.one_of("strategy", strategy, registry.compared())
    checks.positive_int("image_size", image_size, 32)


PLOTLY_MIME = "application/vnd.plotly.v1+json"


def figure_output(fig: go.Figure) -> dict[str, Any]:
    """A figure as one display_data output in plotly's own mimetype, set straight into an
    Output widget's `outputs`. Unlike `with out: display(fig)`, this needs no output capture
    (which headless executors such as nbclient follow only unreliably) and carries no copy of
    plotly.js, so every redraw sends just the figure's JSON."""
    title = fig.layout.title.text or "figure"
    return {"output_type": "display_data", "metadata": {},
            "data": {PLOTLY_MIME: {**json.loads(fig.to_json()), "config": {"displaylogo": False}},
                     "text/plain": f"<plotly figure: {title}>"}}


class Explorer:
    """Controls in `controls`, current figures in `figures`, the model's answers in
    `assignment` (best_assignment) and `chosen` (the prediction of the selected strategy/k)."""

    def __init__(self, *, models: Sequence[str] = DEFAULT_MODELS, model: str = "vgg16", nodes: int = 8,
                 bandwidth_gbps: float = 10.0, latency_us: float = 50.0, global_batch: int = 256,
                 device: str = "v100", fc_workers: int = 0, strategy: str = "stanza", image_size: int = 224,
                 max_nodes: int = 64, fc_conv_share: float = 0.0, micro_batches: int = 1,
                 compression: str = "fp32|none", allow_compression: bool = False, search_beyond: bool = False):
        models = list(models)
        _check(models, model, nodes, max_nodes, bandwidth_gbps, latency_us, global_batch, device, fc_workers,
               strategy, image_size)
        if isinstance(fc_conv_share, bool) or not isinstance(fc_conv_share, (int, float)) or not 0 <= fc_conv_share <= 0.5:
            raise ValueError(f"fc_conv_share must be a number in [0, 0.5], got {fc_conv_share!r}")
        checks.one_of("micro_batches", micro_batches, MICRO_BATCHES)
        checks.one_of("compression", compression, [f"{d}|{c}" for d, c in COMPRESSIONS])
        self.image_size = image_size
        style = {"description_width": "150px"}
        layout = W.Layout(width="460px")
        self.controls: dict[str, W.ValueWidget] = {
            "model": W.Dropdown(options=models, value=model, description="model", style=style, layout=layout),
            "nodes": W.IntSlider(value=nodes, min=2, max=max_nodes, description="nodes N", style=style,
                                 layout=layout, continuous_update=False),
            "bandwidth_gbps": W.FloatLogSlider(value=bandwidth_gbps, base=10, min=-1, max=3, step=0.05,
                                               description="bandwidth (Gb/s)", readout_format=".3g", style=style,
                                               layout=layout, continuous_update=False),
            "latency_us": W.FloatLogSlider(value=latency_us, base=10, min=0, max=4, step=0.05,
                                           description="latency (us)", readout_format=".3g", style=style,
                                           layout=layout, continuous_update=False),
            "global_batch": W.BoundedIntText(value=global_batch, min=2, max=1 << 20, description="global batch",
                                             style=style, layout=layout),
            "device": W.Dropdown(options=list(dict.fromkeys([*device_names(), device])), value=device,
                                 description="device profile",
                                 style=style, layout=layout),
            "fc_workers": W.IntSlider(value=max(fc_workers, 1), min=1, max=len(fc_worker_choices(nodes)),
                                      description="k FC workers",
                                      style=style, layout=layout, continuous_update=False),
            "strategy": W.ToggleButtons(options=list(registry.compared()), value=strategy, description="diagram of",
                                        style=style),
            "fc_conv_share": W.FloatSlider(value=float(fc_conv_share), min=0.0, max=0.5, step=0.005, readout_format=".3f",
                                           description="FC share of batch", style=style, layout=layout,
                                           continuous_update=False),
            "micro_batches": W.Dropdown(options=list(MICRO_BATCHES), value=micro_batches, description="micro-batches M",
                                        style=style, layout=layout),
            "compression": W.Dropdown(options=[f"{d}|{c}" for d, c in COMPRESSIONS], value="fp32|none",
                                      description="boundary|grad compr.", style=style, layout=layout),
            "search_beyond": W.Checkbox(value=bool(search_beyond), description="optimiser searches share x M",
                                        style=style, layout=layout),
            "allow_compression": W.Checkbox(value=bool(allow_compression), description="optimiser may compress", style=style,
                                            layout=layout),
        }
        self.status = W.HTML()
        self.outputs = {key: W.Output() for key in FIGURES}
        self.figures: dict[str, go.Figure] = {}
        self.assignment = None
        self.chosen = None
        self.device = None  # the resolved perf.Device of the last redraw (its caption names its source)
        self.updates = 0  # how many times the views were recomputed (tests, debugging)
        self.last_update_ms = None  # wall time of the last redraw (model + figures)
        self._follow_k = fc_workers == 0  # k follows the optimiser until someone moves it
        self._busy = False
        for name, w in self.controls.items():
            w.observe(self._on_change, names="value")
        self.update()
        if self._follow_k:
            self._set_k(self.assignment.best_stanza().fc_workers)

    # -----------------------------------------------------------------------------------------

    def values(self) -> dict[str, Any]:
        return {name: w.value for name, w in self.controls.items()}

    def _set_k(self, k: int) -> None:
        self._busy = True
        try:
            self.controls["fc_workers"].value = k
        finally:
            self._busy = False
        self.update()

    def _on_change(self, change) -> None:
        if self._busy:
            return
        w = change["owner"]
        if w is self.controls["fc_workers"]:
            self._follow_k = False
        if w is self.controls["nodes"]:
            k = self.controls["fc_workers"]
            self._busy = True
            try:  # the slider's range follows N; its value is clamped into it
                k.max = max(1, len(fc_worker_choices(change["new"])))
            finally:
                self._busy = False
        self.update()
        if self._follow_k and self.assignment is not None and self.assignment.best_stanza() is not None:
            best_k = self.assignment.best_stanza().fc_workers
            if best_k != self.controls["fc_workers"].value:
                self._set_k(best_k)

    def compute(self) -> tuple[Any, list, Any]:
        """(best_assignment, [ps, ddp, stanza k] predictions, the diagram's prediction) for the
        controls' values; ValueError for a combination the model refuses."""
        v = self.values()
        profile = named_profile(v["model"], self.image_size, 1000)
        g, n, k = v["global_batch"], v["nodes"], v["fc_workers"]
        self.device = device_profile(v["device"], profile, g / n)  # a measured record: at the batch per worker
        cluster = Cluster(v["nodes"], float(v["bandwidth_gbps"]), float(v["latency_us"]) * 1e-6, self.device.profile)
        if g < n:
            raise ValueError(f"global batch {g} is smaller than the {n} nodes: every data worker needs a sample")
        wide = v["search_beyond"]
        a = best_assignment(profile, cluster, g, shares="auto" if wide else (0.0,),
                            micro_batches=MICRO_BATCHES if wide else (1,),
                            compressions=COMPRESSIONS if v["allow_compression"] else PAPER)
        valid = share_grid(g, n, Variant("stanza", fc_workers=k), limit=1 << 30)  # the share the engine can run nearest to the slider
        share = min(valid, key=lambda x: abs(x - v["fc_conv_share"])) if v["fc_conv_share"] > 0 else 0.0
        dtype, comp = v["compression"].split("|")
        chosen = Variant.parse("stanza", {"fc_workers": k, "fc_conv_share": share, "micro_batches": v["micro_batches"],
                                          "boundary_dtype": dtype, "grad_compression": comp})
        stanza = predict(profile, cluster, chosen, global_batch=g)
        preds = {s: predict(profile, cluster, Variant(s), global_batch=g) for s in registry.compared()
                 if not registry.owns(s, "fc_workers")}
        preds["stanza"] = stanza
        return a, list(preds.values()), preds[v["strategy"]]

    def update(self) -> None:
        """Recompute everything and redraw; a refused combination is shown, not raised (a widget
        callback's exception would only reach the browser's log)."""
        t0 = time.perf_counter()
        try:
            a, preds, chosen = self.compute()
            model_ms = 1e3 * (time.perf_counter() - t0)
        except ValueError as e:
            self.status.value = f"<span style='color:#b00'>Cannot predict this configuration: {e}</span>"
            return
        self.assignment, self.chosen, self.predictions = a, chosen, preds
        self.figures = {
            "throughput": va.throughput_vs_k(a, chosen_k=self.controls["fc_workers"].value),
            "breakdown": va.step_breakdown(preds),
            "bytes": va.bytes_per_node(preds),
            "diagram": va.assignment_diagram(chosen),
        }
        self.status.value = (va.recommendation_html(a, preds[-1])
                             + f"<br><small>compute: {self.device.caption}; optimiser and model: {model_ms:.0f} ms "
                             "this redraw "
                             f"({len(a.ranking)} configurations).</small>")
        for key, out in self.outputs.items():
            out.outputs = (figure_output(self.figures[key]),)
        self.updates += 1
        self.last_update_ms = 1e3 * (time.perf_counter() - t0)  # model + figures of one redraw

    def results(self) -> dict[str, Any]:
        """The current settings and the model's answers (for results.json)."""
        a = self.assignment
        return {"experiment": "explorer", "settings": self.values(), "image_size": self.image_size,
                "device": self.device.caption, "device_source": self.device.source,
                "best": {"strategy": a.best.strategy, "fc_workers": a.best.fc_workers,
                         "throughput": a.best.throughput, "iteration_s": a.best.iteration_s},
                "speedup_vs_ddp": a.speedup_vs_ddp, "speedup_vs_ps": a.speedup_vs_ps,
                "throughput": {va.describe(p): p.throughput for p in a.ranking},
                "chosen": {k: v for k, v in self.chosen.to_dict().items() if k != "ranks"},
                "last_update_ms": self.last_update_ms,
                "predictions": [{k: v for k, v in p.to_dict().items() if k != "ranks"} for p in self.predictions]}

    @property
    def ui(self) -> W.Widget:
        c = self.controls
        left = W.VBox([c["model"], c["device"], c["nodes"], c["fc_workers"]])
        right = W.VBox([c["bandwidth_gbps"], c["latency_us"], c["global_batch"], c["strategy"]])
        beyond = W.HBox([W.VBox([c["fc_conv_share"], c["micro_batches"]]),
                         W.VBox([c["compression"], c["search_beyond"], c["allow_compression"]])])
        o = self.outputs
        return W.VBox([W.HBox([left, right]), beyond, self.status, o["throughput"], o["diagram"], o["bytes"], o["breakdown"]])

    def _ipython_display_(self) -> None:
        display(self.ui)
