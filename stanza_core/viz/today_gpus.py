"""Figures of notebook 09 (does layer separation still pay on today's GPUs?): stanza's modelled
speedup against bandwidth on the measured H200 profile beside the V100 table row, the
optimiser's pick over cluster size x bandwidth, and the replayed runs beside the model."""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

import math

from .. import registry
from ._style import MODEL_COLORS, STRATEGY_COLORS, finish, mark_modelled_only, note_figure


def _sub(text: str, width: int = 160) -> str:
    """A subtitle wrapped at '; ' (plotly titles do not wrap by themselves)."""
    lines, cur = [], ""
    for part in text.split("; "):
        if cur and len(cur) + len(part) + 2 > width:
            lines.append(cur)
            cur = part
        else:
            cur = f"{cur}; {part}" if cur else part
    return "".join(f"<br><sub>{ln}</sub>" for ln in lines + [cur])


def _legend_right(fig: go.Figure, top: int) -> go.Figure:
    fig.update_layout(legend=dict(orientation="v", x=1.02, xanchor="left", y=1.0, yanchor="top"),
                      margin=dict(t=top, r=200))
    return fig


def _short(best: dict[str, Any]) -> str:
    if registry.owns(best["strategy"], "fc_workers"):
        return f"k={best['fc_workers']}"
    return best["label"].replace("overlap", "ov")


def modelled_speedups(results: dict[str, Any]) -> go.Figure:
    """Per model: the best stanza's samples/s over ddp's against bandwidth, one line per N;
    solid on the measured device, dashed on the comparison device (both modelled)."""
    mod, dev, cmp_ = results["modelled"], results["device"], results["compare_device"]
    models = list(mod["by_model"])
    fig = make_subplots(rows=1, cols=len(models), subplot_titles=models, horizontal_spacing=0.08)
    for col, m in enumerate(models, start=1):
        for i, n in enumerate(mod["nodes"]):
            color = MODEL_COLORS[i % len(MODEL_COLORS)]
            for d, dash in ((dev, "solid"), (cmp_, "dash")):
                by_g = mod["by_model"][m][d][str(n)]
                gs = sorted(by_g, key=float)
                fig.add_scatter(x=[float(g) for g in gs], y=[by_g[g]["stanza_vs_ddp"] for g in gs],
                                mode="lines+markers", line=dict(color=color, dash=dash), marker=dict(color=color),
                                name=f"N={n}, {d}", legendgroup=f"{n}{d}", showlegend=(col == 1),
                                customdata=[[by_g[g]["roles"]["stanza"]["fc_workers"], by_g[g]["best"]["label"]]
                                            for g in gs],
                                hovertemplate=f"{m}, N={n}, {d}, %{{x:g}} Gb/s: stanza k=%{{customdata[0]}} "
                                              "%{y:.2f}x ddp; pick: %{customdata[1]}<extra></extra>",
                                row=1, col=col)
        fig.add_hline(y=1.0, line_color="#7f7f7f", line_width=1, row=1, col=col)
        fig.update_xaxes(type="log", title_text="Gb/s per node", tickvals=results["target_gbps"], row=1, col=col)
        fig.update_yaxes(type="log", title_text="stanza (best k) / ddp" if col == 1 else None, row=1, col=col)
    cap = "; ".join(f"{m}: {c[dev]}" for m, c in mod["device_caption"].items())
    fig = finish(fig, f"Modelled: stanza's speedup over ddp, {dev} (solid) and {cmp_} (dashed), "
                      f"{results['batch_per_worker']} samples per data worker" + _sub(cap, 110), 620)
    fig.update_layout(title_y=0.97)
    return _legend_right(fig, 210)


def choice_map(results: dict[str, Any]) -> go.Figure:
    """Per model: the optimiser's pick (text) and stanza's speedup over ddp (colour) at every N x
    bandwidth on the measured device (modelled)."""
    mod, dev = results["modelled"], results["device"]
    models = list(mod["by_model"])
    fig = make_subplots(rows=1, cols=len(models), subplot_titles=models, horizontal_spacing=0.08)
    for col, m in enumerate(models, start=1):
        grid = mod["by_model"][m][dev]
        sizes = [str(n) for n in mod["nodes"]]
        gs = sorted(grid[sizes[0]], key=float)
        ratio = [[grid[n][g]["stanza_vs_ddp"] for g in gs] for n in sizes]
        ticks = [0.25, 0.5, 1, 2, 4, 8]
        fig.add_heatmap(x=gs, y=sizes, z=[[math.log2(v) for v in row] for row in ratio], customdata=ratio,
                        text=[[_short(grid[n][g]["best"]) for g in gs] for n in sizes], texttemplate="%{text}",
                        textfont_size=11, colorscale="RdBu", zmid=0.0, zmin=-3, zmax=3,
                        showscale=(col == len(models)),
                        colorbar=dict(title="stanza / ddp", tickvals=[math.log2(t) for t in ticks],
                                      ticktext=[f"{t:g}x" for t in ticks]),
                        hovertemplate="%{y} nodes, %{x} Gb/s: pick %{text}; stanza %{customdata:.2f}x ddp"
                                      "<extra></extra>", row=1, col=col)
        fig.update_xaxes(title_text="Gb/s", type="category", row=1, col=col)
        fig.update_yaxes(title_text="nodes" if col == 1 else None, type="category", row=1, col=col)
    return finish(fig, f"Modelled on {dev}: the optimiser's pick (text: k = stanza's FC workers) and stanza's "
                       "speedup over ddp (colour)", 460)


def replayed_runs(results: dict[str, Any]) -> go.Figure:
    """Samples/s on the target cluster of every replayed configuration (bars) and the model's
    prediction for it (markers), one group per model, N and bandwidth."""
    r = results["replayed"]
    title = f"Replayed ({results['device']}): samples/s on the target cluster against the model"
    pts = [(m, n, g, pt) for m, by_n in r["by_model"].items() for n, by_g in by_n.items()
           for g, pt in by_g.items() if pt["configs"]]
    if not pts:
        why = r["unavailable"] or "replay_models, replay_nodes or replay_gbps empty"
        return note_figure(f"nothing replayed: {why}", title)
    fig = go.Figure()
    keys = sorted({k for *_, pt in pts for k in pt["configs"]})
    x = [f"{m} N={n} {g} Gb/s" for m, n, g, _ in pts]
    for k in keys:
        color = STRATEGY_COLORS[k.split("_")[0]]
        label = next(pt["labels"][k] for *_, pt in pts if k in pt["labels"])
        rep = [pt["configs"].get(k, {}).get("replayed") for *_, pt in pts]
        pred = [pt["configs"].get(k, {}).get("predicted") for *_, pt in pts]
        fig.add_bar(x=x, y=rep, name=f"{label} (replayed)", marker_color=color, offsetgroup=k, legendgroup=k,
                    opacity=0.45 if k.startswith("ps_S") else 0.9,
                    hovertemplate=f"{label} replayed: %{{y:.0f}} samples/s<extra></extra>")
        fig.add_scatter(x=x, y=pred, mode="markers", name=f"{label} (modelled)", legendgroup=k, offsetgroup=k,
                        marker=dict(symbol="diamond-open", size=12, color="black", line=dict(width=2)),
                        hovertemplate=f"{label} modelled: %{{y:.0f}} samples/s<extra></extra>")
    fig.update_layout(barmode="group", scattermode="group")
    fig.update_yaxes(title_text="samples/s on the target cluster", rangemode="tozero")
    picks = "; ".join(f"{m} N={n} {g} Gb/s: pick {pt['choice']}, "
                      f"fastest replayed {pt['labels'][pt['replayed_fastest']]}" for m, n, g, pt in pts)
    fig = finish(fig, title + _sub(r["caption"], 110) + _sub(picks, 110), 560)
    return _legend_right(fig, 170)


def today_figures(results: dict[str, Any]) -> dict[str, go.Figure]:
    """The figures of notebook 09 by key: modelled, choice, replayed."""
    replayed = mark_modelled_only({"replayed": replayed_runs(results)}, results.get("modelled_only"))
    return {"modelled": modelled_speedups(results), "choice": choice_map(results), **replayed}
