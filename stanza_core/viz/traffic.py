"""Figures of the traffic per training step: bytes per node by category and role, measured
counters beside the performance model, and the PS / Stanza ratio against cluster size.

Inputs are the results dict of `stanza_core.experiments.traffic.results` (notebook 02) or, for
`node_bytes`, plain rows of per-rank bytes (the explorer passes the model's rows). Bars carry
exact bytes as their y values; the axes format them with SI prefixes.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..labels import run_key
from ._style import finish, note_figure, si

# One colour per byte category, in the order they are stacked (bottom first).
CATEGORY_COLORS = {
    "grads": "#2ca02c", "params": "#ff7f0e",  # ddp / ps: whole-model gradients and parameters
    "conv_grads": "#1f77b4", "fc_grads": "#d62728",  # stanza: allreduce inside each group
    "activations": "#9467bd", "activation_grads": "#c5b0d5", "labels": "#8c564b",
}
CATEGORY_LABELS = {
    "grads": "gradients", "params": "parameters", "conv_grads": "CONV gradients (allreduce)",
    "fc_grads": "FC gradients (allreduce)", "activations": "boundary activations",
    "activation_grads": "activation gradients", "labels": "labels",
}
ROLE_LABELS = {"worker": "worker", "conv_worker": "CONV worker", "fc_worker": "FC worker", "local": "local"}
PAPER_COLOR = "#444444"


def _categories(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    seen = {c for e in entries for d in ("sent", "recv") for c in e[d]}
    return [c for c in CATEGORY_COLORS if c in seen] + sorted(seen - set(CATEGORY_COLORS))


def add_node_bytes(fig: go.Figure, entries: Sequence[Mapping[str, Any]], *, row: int | None = None,
                   col: int | None = None, legend: bool = True) -> None:
    """Stacked bars, one per entry {"label", "role", "sent": {cat: bytes}, "recv": {...}}: the
    bytes through that node's link per step (sent + received), one segment per category.
    An entry with "model_bytes" also gets a black diamond at that total (the model's figure)."""
    x = [[e["label"] for e in entries], [ROLE_LABELS.get(e["role"], e["role"]) for e in entries]]
    where = {} if row is None else {"row": row, "col": col}
    for cat in _categories(entries):
        y = [e["sent"].get(cat, 0) + e["recv"].get(cat, 0) for e in entries]
        fig.add_bar(x=x, y=y, name=CATEGORY_LABELS.get(cat, cat), legendgroup=cat, showlegend=legend,
                    marker_color=CATEGORY_COLORS.get(cat, "#999999"),
                    customdata=[[e["sent"].get(cat, 0), e["recv"].get(cat, 0), si(v, "B")] for e, v in zip(entries, y)],
                    hovertemplate="%{x}<br>" + CATEGORY_LABELS.get(cat, cat)
                                  + ": %{customdata[2]}<br>sent %{customdata[0]:,} B, received %{customdata[1]:,} B"
                                  "<extra></extra>", **where)
    if any("model_bytes" in e for e in entries):
        fig.add_scatter(x=x, y=[e.get("model_bytes") for e in entries], mode="markers", name="performance model",
                        legendgroup="model", showlegend=legend,
                        marker=dict(symbol="diamond", size=9, color="black"),
                        hovertemplate="%{x}<br>model: %{y:,} B<extra></extra>", **where)
    fig.update_yaxes(tickformat="~s", ticksuffix="B", **where)


def node_bytes(entries: Sequence[Mapping[str, Any]], title: str = "Bytes per step through each node's link",
               height: int = 420) -> go.Figure:
    """One panel of `add_node_bytes`."""
    if not entries:
        return note_figure("no configurations to show", title)
    fig = go.Figure()
    add_node_bytes(fig, entries)
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text="bytes per step (sent + received)")
    return _side_legend(finish(fig, title, height))


def _entries(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The busiest rank of each role of one measured run, with the model's bytes of that rank."""
    out = []
    model_ranks = {r["rank"]: r for r in run["model_bytes"]["ranks"]}
    for role, v in run["measured"]["roles"].items():
        m = model_ranks[v["rank"]]
        out.append({"label": run["label"], "role": role, "sent": v["sent"], "recv": v["recv"],
                    "model_bytes": sum(m["sent"].values()) + sum(m["recv"].values())})
    return out


def traffic_bytes(results: Mapping[str, Any]) -> go.Figure:
    """Grouped, stacked bars per (model, N): bytes per step through the busiest node of each role,
    measured by the engine's counters, with the model's figure as a diamond on top."""
    runs = results["runs"]
    title = "Bytes per step through the busiest node of each role: measured (bars) and model (diamonds)"
    if not runs:
        return note_figure("no runs", title)
    groups = list(dict.fromkeys((r["model"], r["nodes"]) for r in runs))
    titles = [f"{m}, N = {n} nodes, {next(r['per_worker'] for r in runs if r['model'] == m)} samples per data worker"
              for m, n in groups]
    fig = make_subplots(rows=len(groups), cols=1, subplot_titles=titles, vertical_spacing=min(0.3 / len(groups), 0.12))
    for i, (m, n) in enumerate(groups, start=1):
        entries = [e for r in runs if (r["model"], r["nodes"]) == (m, n) for e in _entries(r)]
        add_node_bytes(fig, entries, row=i, col=1, legend=(i == 1))
        fig.update_yaxes(title_text="bytes per step", row=i, col=1)
    fig.update_layout(barmode="stack")
    return _side_legend(finish(fig, title, 150 + 330 * len(groups)))


def ratio_figure(results: Mapping[str, Any]) -> go.Figure:
    """PS bytes / Stanza (k = 1) bytes per step against N, from the model (lines: cluster total,
    solid; busiest node, dotted), the measured runs (markers) and the paper's "up to 10x"."""
    title = "Data moved per step: parameter server over Stanza (k = 1 FC worker)"
    curves = results["paper_model"]
    fig = go.Figure()
    palette = ["#9467bd", "#17becf", "#bcbd22", "#e377c2", "#7f7f7f"]
    for i, (m, c) in enumerate(curves.items()):
        color = palette[i % len(palette)]
        for key, dash, what in (("total", "solid", "cluster total"), ("busiest", "dot", "busiest node")):
            fig.add_scatter(x=c["nodes"], y=c[key], mode="lines+markers", name=f"{m} model, {what}",
                            line=dict(color=color, dash=dash), marker=dict(size=5),
                            hovertemplate=f"{m}, {what}<br>N = %{{x}}<br>PS / Stanza = %{{y:.2f}}x<extra></extra>")
        meas = [(n, v["stanza_k1"]) for n, v in results["configs"].get(m, {}).items() if "stanza_k1" in v]
        if meas:
            xs = [int(n[1:]) for n, _ in meas]
            for key, symbol, what in (("ps_over_this_total", "circle-open", "cluster total"),
                                      ("ps_over_this_busiest", "square-open", "busiest node")):
                fig.add_scatter(x=xs, y=[v[key] for _, v in meas], mode="markers", name=f"{m} measured, {what}",
                                marker=dict(color=color, symbol=symbol, size=13, line_width=2),
                                hovertemplate=f"{m} measured, {what}<br>N = %{{x}}<br>%{{y:.2f}}x<extra></extra>")
    # A trace, not add_hline: an hline's annotation on a log axis is placed at 10**y.
    xs = sorted({n for c in curves.values() for n in c["nodes"]})
    fig.add_scatter(x=[xs[0], xs[-1]], y=[results.get("paper_ratio", 10.0)] * 2, mode="lines",
                    name="paper: up to 10x less data than PS (VGG-16)", line=dict(color=PAPER_COLOR, dash="dash"),
                    hoverinfo="skip")
    fig.update_xaxes(title_text="nodes N (k = 1 FC worker, N - 1 CONV workers)", type="log",
                     tickvals=xs)
    fig.update_yaxes(title_text="PS bytes / Stanza bytes per step", type="log",
                     tickvals=[1, 2, 5, 10, 20, 50, 100, 200, 500, 1000])
    return _side_legend(finish(fig, title, 480))


def _side_legend(fig: go.Figure) -> go.Figure:
    """Long legends go to the right of the plot, where they cannot cover the title."""
    fig.update_layout(legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"),
                      margin=dict(r=300, t=80))
    return fig


def traffic_table(results: Mapping[str, Any]) -> go.Figure:
    """Every run: cluster bytes per step measured and modelled, their largest per-rank,
    per-category difference, the busiest node, PS's bytes over this run's, step time."""
    runs = results["runs"]
    cfg = results["configs"]
    rows = [[r["model"], r["nodes"], r["label"], f"{r['global_batch']}",
             f"{r['measured']['bytes_per_step']:,}", f"{r['model_bytes']['bytes_per_step']:,}",
             f"{r['max_abs_diff_bytes']:,}", si(r["measured"]["max_node_bytes"], "B"),
             f"{cfg[r['model']]['n' + str(r['nodes'])][_key(r)]['ps_over_this_total']:.2f}x",
             f"{r['step_time_median_s']:.3f}"] for r in runs]
    head = ["model", "N", "strategy", "global batch", "measured bytes/step", "model bytes/step",
            "max |diff| (B)", "busiest node", "PS / this", "step s (loopback)"]
    fig = go.Figure(go.Table(header=dict(values=head, fill_color="#eeeeee", align="left"),
                             cells=dict(values=list(zip(*rows)) if rows else [[] for _ in head], align="left",
                                        height=26)))
    fig = finish(fig, "Traffic per step: measured counters against the performance model", 190 + 26 * max(len(rows), 1))
    return fig.update_layout(margin=dict(t=60, b=20))


def _key(run: Mapping[str, Any]) -> str:
    return run_key(run)


def traffic_figures(results: Mapping[str, Any]) -> dict[str, go.Figure]:
    """Every figure of notebook 02, by file name."""
    return {"table": traffic_table(results), "bytes": traffic_bytes(results), "ratio": ratio_figure(results)}
