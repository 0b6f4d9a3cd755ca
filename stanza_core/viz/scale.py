"""Figures of notebook 10 (layer separation beyond the paper's scale): stanza's speedup over the
faster baseline against cluster size, simulated beside modelled, and the map of where layer
separation pays (simulated), with the model's boundary marked."""
from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ._style import MODEL_COLORS, finish, note_figure


def _panels(results: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m, d) for m in results["models"] for d in results["devices"]]


def speedups(results: dict[str, Any]) -> go.Figure:
    """Per model and device row: the best stanza's samples/s over the faster of ps and ddp against
    N, one colour per bandwidth; solid simulated, dashed modelled. Above 1 stanza is faster."""
    panels = _panels(results)
    cols = len(results["devices"])
    rows = len(results["models"])
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"{m}, {d} row" for m, d in panels],
                        horizontal_spacing=0.08, vertical_spacing=0.12)
    for i, (m, d) in enumerate(panels):
        r, c = i // cols + 1, i % cols + 1
        by_n = results["by_model"][m][d]
        ns = sorted(by_n, key=int)
        for j, g in enumerate(f"{x:g}" for x in results["target_gbps"]):
            color = MODEL_COLORS[j % len(MODEL_COLORS)]
            for kind, dash in (("simulated", "solid"), ("modelled", "dash")):
                ys = [by_n[n][g][f"{kind}_stanza_over_best_baseline"] for n in ns]
                fig.add_scatter(x=[int(n) for n in ns], y=ys, mode="lines+markers",
                                line=dict(color=color, dash=dash), marker=dict(color=color),
                                name=f"{g} Gb/s, {kind}", legendgroup=f"{g}{kind}", showlegend=(i == 0),
                                customdata=[[by_n[n][g]["k"], ", ".join(by_n[n][g]["simulated_baselines"]) or "none"]
                                            for n in ns],
                                hovertemplate=f"{m}, {d}, N=%{{x}}, {g} Gb/s ({kind}): stanza k=%{{customdata[0]}} "
                                              "%{y:.2f}x the faster baseline (simulated baselines: %{customdata[1]})"
                                              "<extra></extra>", row=r, col=c)
        fig.add_hline(y=1.0, line=dict(color="grey", width=1), row=r, col=c)
        fig.update_xaxes(type="log", dtick=0.30103, title_text="nodes N" if r == rows else None, row=r, col=c)
        fig.update_yaxes(type="log", title_text="stanza / faster baseline" if c == 1 else None, row=r, col=c)
    note = (f"simulated (each strategy's generated program on SimGrid, sim version {results['sim_version']}, compute "
            "from the panel's device row) solid; "
            f"modelled (perf) dashed; the sharded PS simulated up to N = {results['ps_max_nodes']}, above it the "
            "simulated line compares with ddp only")
    fig = finish(fig, f"Best stanza over the faster of ps and ddp<br><sub>{note}</sub>", 330 * rows + 120)
    fig.update_layout(legend=dict(orientation="v", x=1.02, xanchor="left", y=1.0, yanchor="top"),
                      margin=dict(t=110, r=190))
    return fig


def pays_map(results: dict[str, Any]) -> go.Figure:
    """Per model and device row: N x bandwidth coloured by the simulated speedup of the best stanza
    over the faster simulated baseline (blue above 1: layer separation pays), the simulated fastest
    as text, a ring where the model's verdict differs."""
    panels = _panels(results)
    cols = len(results["devices"])
    rows = len(results["models"])
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"{m}, {d} row" for m, d in panels],
                        horizontal_spacing=0.08, vertical_spacing=0.12)
    gs = [f"{x:g}" for x in results["target_gbps"]]
    for i, (m, d) in enumerate(panels):
        r, c = i // cols + 1, i % cols + 1
        by_n = results["by_model"][m][d]
        ns = sorted(by_n, key=int)
        ratio = [[by_n[n][g]["simulated_stanza_over_best_baseline"] for n in ns] for g in gs]
        z = [[None if v is None else math.log2(v) for v in row] for row in ratio]  # log scale, 1x white
        text = [[_short(by_n[n][g]) for n in ns] for g in gs]
        fig.add_heatmap(x=[str(n) for n in ns], y=[f"{g} Gb/s" for g in gs], z=z, text=text, customdata=ratio,
                        texttemplate="%{text}", zmid=0.0, colorscale="RdBu", zmin=-2.0, zmax=2.0,
                        showscale=(i == 0), colorbar=dict(title="stanza /<br>baseline", tickvals=[-2, -1, 0, 1, 2],
                                                          ticktext=["0.25x", "0.5x", "1x", "2x", "4x"]),
                        hovertemplate=f"{m}, {d}, N=%{{x}}, %{{y}}: %{{customdata:.2f}}x (simulated)<extra></extra>",
                        row=r, col=c)
        odd = [(n, g) for n in ns for g in gs if by_n[n][g]["simulated_pays"] is not None
               and by_n[n][g]["simulated_pays"] != by_n[n][g]["modelled_pays"]]
        if odd:
            fig.add_scatter(x=[str(n) for n, _ in odd], y=[f"{g} Gb/s" for _, g in odd], mode="markers",
                            marker=dict(symbol="circle-open", size=26, color="black", line=dict(width=2)),
                            name="model's verdict differs", showlegend=(i == 0), hoverinfo="skip", row=r, col=c)
        fig.update_xaxes(type="category", title_text="nodes N" if r == rows else None, row=r, col=c)
    note = (f"simulated (generated programs on SimGrid, sim version {results['sim_version']}, compute from the "
            "panel's device row): the best stanza's samples/s over the faster simulated baseline (ps up to N = "
            f"{results['ps_max_nodes']}, ddp); text: the simulated fastest (k = stanza's FC workers); ring: the "
            "analytic model says the opposite")
    return finish(fig, f"Where layer separation pays, simulated<br><sub>{note}</sub>", 300 * rows + 140)


def _short(cell: dict[str, Any]) -> str:
    f = cell["simulated_fastest"]
    if f is None:
        return ""
    return f if f in cell["simulated_baselines"] else f"k={cell['k']}"


def scale_figures(results: dict[str, Any]) -> dict[str, go.Figure]:
    """The notebook's figures; without a simulated point the map says why (the speedups keep the
    modelled lines)."""
    if not results["simulated_count"]:
        why = results.get("not_simulated") or "simulate=False"
        return {"speedups": speedups(results),
                "pays": note_figure(f"No simulated point: {why}.", "Where layer separation pays, simulated")}
    return {"speedups": speedups(results), "pays": pays_map(results)}
