"""Figures of the bandwidth sweep (notebook 05): throughput against bandwidth on the emulated
cluster (measured points, model lines), stanza's speedups at the paper's scale beside the
paper's numbers, and the best assignment over 1-400 Gb/s x 2-1,024 nodes."""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .. import registry
from ._style import MODEL_COLORS, STRATEGY_COLORS, finish, mark_modelled_only, note_figure
from .throughput import replayed_throughput
from .paper_ps import paper_ps_figures


def _strategy(label: str) -> str:
    return label.split("_")[0]


def emulated_throughput(results: dict[str, Any]) -> go.Figure:
    """Samples/s against the target bandwidth on the emulated cluster: the model's prediction
    with this machine's profile (lines) and the measured runs (markers)."""
    e = results["emulated"]
    title = f"Emulated cluster: {e['model']} on {e['nodes']} nodes against the target bandwidth"
    if e["unavailable"] or not e["by_gbps"]:
        return note_figure(f"not measured: {e['unavailable'] or 'no measured target (measure_gbps is empty)'}", title)
    pts = sorted(e["by_gbps"].values(), key=lambda d: d["target_gbps"])
    labels = sorted({lab for d in pts for lab in d["predicted"]})
    fig = go.Figure()
    for lab in labels:
        color = STRATEGY_COLORS[_strategy(lab)]
        name = e.get("labels", {}).get(lab, lab)
        fig.add_scatter(x=[d["target_gbps"] for d in pts], y=[d["predicted"][lab] for d in pts], mode="lines",
                        name=f"{name} (model)", legendgroup=lab, line=dict(color=color, dash="dash"),
                        customdata=[d["link_mbit"] for d in pts],
                        hovertemplate=f"{name} model: %{{y:.2f}} samples/s at %{{x:g}} Gb/s "
                                      "(%{customdata:.0f} Mbit/s here)<extra></extra>")
        got = [d for d in pts if lab in d["measured"]]
        fig.add_scatter(x=[d["target_gbps"] for d in got], y=[d["measured"][lab] for d in got], mode="markers",
                        name=f"{name} (measured)", legendgroup=lab, marker=dict(color=color, size=11),
                        customdata=[[d["link_mbit"], d["error"][lab]] for d in got],
                        hovertemplate=f"{name} measured: %{{y:.2f}} samples/s (%{{customdata[0]:.0f}} Mbit/s); "
                                      "model error %{customdata[1]:+.1%}<extra></extra>")
    fig.update_xaxes(type="log", title_text="target bandwidth, Gb/s (mapped to this machine's speed)",
                     tickvals=[d["target_gbps"] for d in pts])
    fig.update_yaxes(type="log", title_text="samples/s")
    return finish(fig, title, 460)


def paper_scale_speedups(results: dict[str, Any]) -> go.Figure:
    """Stanza's (best k) speedup over ps and ddp against bandwidth at the paper's scale, with
    the paper's 10 Gb/s range and 100 Gb/s simulation figures."""
    ps_, paper = results["paper_scale"], results["paper"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("over ps (S = N shards)", "over ddp"), horizontal_spacing=0.1)
    for i, (model, by_g) in enumerate(ps_["results"].items()):
        g = sorted(by_g, key=float)
        color = MODEL_COLORS[i % len(MODEL_COLORS)]  # one model, one colour in both panels
        for col, key in ((1, "stanza_vs_ps"), (2, "stanza_vs_ddp")):
            fig.add_scatter(x=[float(x) for x in g], y=[by_g[x][key] for x in g], mode="lines+markers",
                            name=model, legendgroup=model, showlegend=(col == 1), line=dict(color=color),
                            marker=dict(color=color),
                            customdata=[by_g[x]["fc_workers"] for x in g],
                            hovertemplate=f"{model} %{{x:g}} Gb/s, k=%{{customdata}}: %{{y:.2f}}x<extra></extra>",
                            cliponaxis=False, row=1, col=col)  # a marker at the axis' end drawn whole
    lo, hi = paper["speedup_vs_ps_10gbps"]
    fig.add_scatter(x=[10, 10], y=[lo, hi], mode="lines+markers", name=f"paper, 10 Gb/s: {lo}x-{hi}x over PS",
                    line=dict(color="#9467bd", width=6), marker_symbol="line-ew", row=1, col=1)
    fig.add_scatter(x=[100, 100], y=[paper["alexnet_speedup_vs_ps_100gbps"], paper["vgg16_speedup_vs_ps_100gbps"]],
                    mode="markers+text", text=["AlexNet 1.55x", "VGG-16 1.72x"], textposition="middle left",
                    marker=dict(symbol="x", size=11, color="#9467bd"), name="paper, 100 Gb/s (simulation)",
                    cliponaxis=False, row=1, col=1)  # 100 Gb/s is the axis' end: labels to its left
    for col in (1, 2):
        fig.add_hline(y=1.0, line_color="#7f7f7f", line_width=1, row=1, col=col)
        fig.update_xaxes(type="log", title_text="Gb/s per node", row=1, col=col)
        fig.update_yaxes(type="log", title_text="speedup" if col == 1 else None, row=1, col=col)
    return finish(fig, f"Stanza's speedup at the paper's scale ({ps_['nodes']} {ps_['device']} nodes, "
                       f"{ps_['batch_per_worker']} samples per data worker)", 460)


def _short(best: dict[str, Any]) -> str:
    return f"k={best['fc_workers']}" if registry.owns(best["strategy"], "fc_workers") else best["strategy"]


def sweep_heatmaps(results: dict[str, Any]) -> go.Figure:
    """Per paper model: the best assignment (text) and its speedup over ddp (colour, log) at
    every bandwidth and cluster size of the sweep."""
    sw = results["sweep"]
    models = list(sw)
    if not models:
        return note_figure("no sweep (paper_models is empty)", "Best assignment")
    fig = make_subplots(rows=1, cols=len(models), subplot_titles=models, horizontal_spacing=0.08)
    for col, model in enumerate(models, start=1):
        s = sw[model]
        cell = {(r["nodes"], r["bandwidth_gbps"]): r for r in s["rows"]}
        sizes, bws = s["sizes"], s["bandwidths_gbps"]
        z = [[cell[(n, g)]["speedup_vs_ddp"] if (n, g) in cell else None for g in bws] for n in sizes]
        text = [[_short(cell[(n, g)]["best"]) if (n, g) in cell else "" for g in bws] for n in sizes]
        fig.add_heatmap(x=[f"{g:g}" for g in bws], y=[str(n) for n in sizes], z=z, text=text,
                        texttemplate="%{text}", textfont_size=9, colorscale="Purples", zmin=1.0,
                        coloraxis=None, showscale=(col == len(models)),
                        colorbar=dict(title="best / ddp"),
                        hovertemplate="%{y} nodes, %{x} Gb/s: %{text}, %{z:.2f}x ddp<extra></extra>",
                        row=1, col=col)
        fig.update_xaxes(title_text="Gb/s", type="category", row=1, col=col)
        fig.update_yaxes(title_text="nodes" if col == 1 else None, type="category", row=1, col=col)
    return finish(fig, "Best assignment (text) and its speedup over ddp (colour), V100 table, 1-400 Gb/s x "
                       "2-1,024 nodes", 520)


def sweep_figures(results: dict[str, Any]) -> dict[str, go.Figure]:
    """The figures of notebook 05 by key: replayed, emulated, paper_scale, sweep, and the paper's PS
    section's ps_decomposition, ps_sweep, ps_region (viz.paper_ps)."""

    figs = mark_modelled_only({"replayed": replayed_throughput(results.get("replayed"), "Paper regime, replayed compute"),
                               "emulated": emulated_throughput(results), "paper_scale": paper_scale_speedups(results),
                               "sweep": sweep_heatmaps(results)}, results.get("modelled_only"))
    return {**figs, **paper_ps_figures(results.get("paper_ps"))}  # modelled, whatever was measured
