"""Figures of notebook 05's section "What the paper must have assumed" (experiments.paper_ps):
the 16-node step decomposed per strategy, stanza's speedup against the PS assumption (servers,
batch per worker, goodput), and the region where both 100 Gb/s figures hold. All modelled."""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ._style import MODEL_COLORS, finish, note_figure

ACTIVITY_COLORS = {"compute": "#1f77b4", "PS push": "#ff7f0e", "PS pull": "#ffbb78", "PS update": "#c49c94",
                   "activation exchange": "#2ca02c", "FC worker": "#d62728", "CONV allreduce": "#9467bd",
                   "FC allreduce": "#e377c2"}
PAPER_COLOR = "#9467bd"


def decomposition(pp: dict[str, Any]) -> go.Figure:
    """Per model: each strategy's step as compute on the critical path + exposed communication
    (top), and each activity's busy seconds on its busiest node (bottom; activities overlap, so
    they do not add up to the step)."""
    models = list(pp["decomposition"])
    fig = make_subplots(rows=2, cols=len(models), subplot_titles=[*models, *[""] * len(models)],
                        vertical_spacing=0.12, horizontal_spacing=0.08, shared_xaxes=True)
    shown = set()
    for col, m in enumerate(models, start=1):
        bars = pp["decomposition"][m]
        x = [b["label"] for b in bars]
        for key, name, color in (("critical_compute_s", "step with free communication", "#1f77b4"),
                                 ("exposed_comm_s", "exposed communication", "#ff7f0e")):
            fig.add_bar(x=x, y=[1e3 * b[key] for b in bars], name=name, marker_color=color, legendgroup=name,
                        showlegend=name not in shown, row=1, col=col,
                        hovertemplate="%{x}: %{y:.1f} ms " + name + "<extra></extra>")
            shown.add(name)
        for act, color in ACTIVITY_COLORS.items():
            y = [1e3 * b["activities"].get(act, 0.0) for b in bars]
            if any(y):
                fig.add_bar(x=x, y=y, name=act, marker_color=color, legendgroup=act, showlegend=act not in shown,
                            row=2, col=col, hovertemplate="%{x}: " + act + " busy %{y:.1f} ms<extra></extra>")
                shown.add(act)
        fig.update_yaxes(title_text="step, ms" if col == 1 else None, row=1, col=col)
        fig.update_yaxes(title_text="busy, ms (overlapping)" if col == 1 else None, row=2, col=col)
    fig.update_layout(barmode="stack")
    return finish(fig, f"Modelled: one step on {pp['nodes']} {pp['device']} nodes at {pp['gbps']:g} Gb/s, under the "
                       f"sharded PS and the stated PS ({pp['stated']['label']})", 720)


def _rows(pp, **fixed):
    return [r for r in pp["search"] if all(r["assumption"][k] == v for k, v in fixed.items())]


def assumption_sweep(pp: dict[str, Any]) -> go.Figure:
    """Stanza over the PS for each model against S (colocated solid, dedicated dashed), against
    samples per worker and against goodput, each at the stated set's other values; the paper's
    figures as bands of +- the claims' tolerance."""
    st, n = pp["stated"], pp["nodes"]
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.07,
                        subplot_titles=("servers S (16 workers)", "samples per worker", "goodput (share of line rate)"))
    base = {"overlap": st["overlap"], "batch_per_worker": st["batch_per_worker"], "goodput": st["goodput"]}
    for i, m in enumerate(pp["at_100"]):
        color = MODEL_COLORS[i % len(MODEL_COLORS)]
        for pl, dash in (("colocated", "solid"), ("dedicated", "dash")):
            rows = _rows(pp, placement=pl, **base)
            fig.add_scatter(x=[round(r["assumption"]["server_share"] * n) for r in rows], y=[r[m] for r in rows],
                            mode="lines+markers", name=f"{m}, {pl}", line=dict(color=color, dash=dash), row=1, col=1)
        for col, key in ((2, "batch_per_worker"), (3, "goodput")):
            fixed = {k: v for k, v in base.items() if k != key}
            rows = sorted(_rows(pp, placement=st["placement"], server_share=st["server_share"], **fixed),
                          key=lambda r: r["assumption"][key])
            fig.add_scatter(x=[r["assumption"][key] for r in rows], y=[r[m] for r in rows], mode="lines+markers",
                            name=m, showlegend=False, line=dict(color=color), row=1, col=col)
        f = pp["at_100"][m]["paper"]
        for col in (1, 2, 3):
            fig.add_hrect(y0=f - pp["tolerance"], y1=f + pp["tolerance"], fillcolor=color, opacity=0.12, line_width=0,
                          row=1, col=col)
    fig.update_xaxes(autorange="reversed", title_text="S", row=1, col=1)
    fig.update_xaxes(type="log", title_text="samples", row=1, col=2)
    fig.update_xaxes(title_text="goodput", row=1, col=3)
    fig.update_yaxes(type="log", title_text="stanza / ps", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_yaxes(type="log", row=1, col=3)
    return finish(fig, f"Modelled: stanza (best k) over the PS at {pp['gbps']:g} Gb/s against the PS assumption; "
                       "bands: the paper's 1.55x / 1.72x +- 0.25", 460)


def region(pp: dict[str, Any]) -> go.Figure:
    """Where both 100 Gb/s figures hold: per placement and push, S (columns) x samples per worker
    and goodput (rows); a cell shows AlexNet / VGG-16, a tick where both lie within the bound,
    a star on the stated set."""
    if not pp["search"]:
        return note_figure("no search", "Where both 100 Gb/s figures hold")
    n, st = pp["nodes"], pp["stated"]
    panels = [(pl, o) for o in (False, True) for pl in ("colocated", "dedicated")]
    fig = make_subplots(rows=2, cols=2, horizontal_spacing=0.1, vertical_spacing=0.14,
                        subplot_titles=[f"{pl}, {'overlapped' if o else 'blocking'} push" for pl, o in panels])
    ys = sorted({(r["assumption"]["batch_per_worker"], r["assumption"]["goodput"]) for r in pp["search"]},
                key=lambda t: (-t[1], t[0]))
    shares = sorted({r["assumption"]["server_share"] for r in pp["search"]}, reverse=True)
    for i, (pl, o) in enumerate(panels):
        cell = {(r["assumption"]["server_share"], r["assumption"]["batch_per_worker"], r["assumption"]["goodput"]): r
                for r in _rows(pp, placement=pl, overlap=o)}
        z, text = [], []
        for b, g in ys:
            rz, rt = [], []
            for s in shares:
                r = cell[(s, b, g)]
                star = (s, b, g, pl, o) == (st["server_share"], st["batch_per_worker"], st["goodput"],
                                            st["placement"], st["overlap"])
                rz.append(1.0 if r["both"] else 0.0)
                rt.append(f"{r['alexnet']:.2f}/{r['vgg16']:.2f}" + (" ✓" if r["both"] else "") + (" ★" if star else ""))
            z.append(rz)
            text.append(rt)
        fig.add_heatmap(x=[str(round(s * n)) for s in shares], y=[f"{b}/worker, {g:.0%}" for b, g in ys], z=z,
                        text=text, texttemplate="%{text}", textfont_size=8, zmin=0, zmax=1, showscale=False,
                        colorscale=[[0, "#f7f7f7"], [1, "#c5b0d5"]],
                        hovertemplate="S=%{x}, %{y}: AlexNet / VGG-16 %{text}<extra></extra>",
                        row=i // 2 + 1, col=i % 2 + 1)
    for r in (1, 2):
        for c in (1, 2):
            fig.update_xaxes(type="category", title_text="S servers" if r == 2 else None, row=r, col=c)
            fig.update_yaxes(type="category", row=r, col=c)
    return finish(fig, f"Modelled: where both 1.55x and 1.72x hold (shaded, ✓; ★ the stated set), {n} workers at "
                       f"{pp['gbps']:g} Gb/s", 820)


def paper_ps_figures(pp: dict[str, Any] | None) -> dict[str, go.Figure]:
    """The section's figures by key (a note in each when it did not run: AlexNet and VGG-16 not
    both among the paper models)."""
    if not pp:
        why = "not computed: the section needs alexnet and vgg16 among paper_models"
        return {k: note_figure(why, "What the paper must have assumed") for k in
                ("ps_decomposition", "ps_sweep", "ps_region")}
    return {"ps_decomposition": decomposition(pp), "ps_sweep": assumption_sweep(pp), "ps_region": region(pp)}
