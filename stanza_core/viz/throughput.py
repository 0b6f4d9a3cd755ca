"""Figures of throughput against cluster size (notebook 03): measured on the emulated cluster and
modelled at the paper's scale, with stanza's speedups over ps and ddp beside the paper's."""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .. import registry
from ..labels import run_label
from ._style import STRATEGY_COLORS, finish, mark_modelled_only, note_figure

PAPER_BAND_COLOR = "rgba(148, 103, 189, 0.12)"


def measured_throughput(results: dict[str, Any]) -> go.Figure:
    """Grouped bars: measured samples/s per strategy at each emulated cluster size."""
    m = results["measured"]
    title = "Fidelity anchor, real compute on the emulated cluster"
    if m["model"]:
        title += (f": {m['model']} at {m['image_size']}x{m['image_size']}, {m['target_gbps']:g} Gb/s on "
                  f"{m['target_device']} mapped to this machine")
    if m["unavailable"]:
        return note_figure(f"not measured: {m['unavailable']}", title)
    benches = [b for b in m["benches"] if b["summary"]]
    if not benches:
        return note_figure("no measured runs (measured_nodes is empty)", title)
    fig = go.Figure()
    seen = set()
    for b in benches:
        n = b["spec"]["nodes"]
        for row in b["summary"]:
            name = run_label(row)
            text = "" if not registry.owns(row["strategy"], "fc_workers") else (
                f"{row['speedup_vs_ps']:.2f}x ps<br>{row['speedup_vs_ddp']:.2f}x ddp"
                if row["speedup_vs_ps"] and row["speedup_vs_ddp"] else "")
            slip = (f" (links slipped in {row['slipped_runs']} of {row['repeats']} runs: below 95 % of their rate)"
                    if row.get("slipped_runs") else "")
            text += "<br>links slipped" if slip else ""
            fig.add_bar(x=[f"{n} nodes ({row['link_mbit']:.0f} Mbit/s)"], y=[row["throughput"]], name=name,
                        legendgroup=name, showlegend=name not in seen, text=[text], textposition="outside",
                        marker_color=STRATEGY_COLORS[row["strategy"]],
                        error_y=dict(type="data", symmetric=False, array=[row["throughput_max"] - row["throughput"]],
                                     arrayminus=[row["throughput"] - row["throughput_min"]]),
                        hovertemplate=f"{name}: %{{y:.2f}} samples/s{slip}<extra></extra>")
            seen.add(name)
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="samples/s (median over repeats; bars: min-max)", rangemode="tozero")
    return finish(fig, title, 460)


def replayed_throughput(section: dict[str, Any] | None, title: str = "Paper regime") -> go.Figure:
    """Grouped bars of samples/s per configuration for every (model, N, target) of a replayed
    section (runs.replayed.summary); the caption says what is measured and what replayed."""
    title = (f"{title}: {section['image_size']}x{section['image_size']}, {section['num_classes']} classes, "
             f"{section['batch_per_worker']} samples per data worker" if section else title)
    if not section or not section["by_model"]:
        why = (section or {}).get("unavailable") or "no replayed runs (replay_models or replay_nodes is empty)"
        return note_figure(f"not measured: {why}", title)
    fig = go.Figure()
    cats = [(m, n, g) for m, by_n in section["by_model"].items() for n, by_g in by_n.items() for g in by_g]
    for key, label in sorted(section["labels"].items()):
        strategy = key.split("_")[0]
        cells = [section["by_model"][m][n][g] for m, n, g in cats]
        fig.add_bar(x=[f"{m}, N={n}, {g} Gb/s" for m, n, g in cats], y=[c["throughput"].get(key) for c in cells],
                    name=label, marker_color=STRATEGY_COLORS[strategy],
                    customdata=[c["dilation"].get(key) for c in cells],
                    hovertemplate=f"{label}: %{{y:.1f}} samples/s (target scale), D = %{{customdata:g}}<extra></extra>")
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="samples/s on the target cluster (measured x D)", rangemode="tozero")
    fig.add_annotation(text=section["caption"], xref="paper", yref="paper", x=0.0, y=1.0, yshift=4,
                       xanchor="left", yanchor="bottom", showarrow=False, font=dict(size=11))
    return finish(fig, title, 480)


def modelled_throughput(results: dict[str, Any]) -> go.Figure:
    """Predicted samples/s against cluster size, one panel per model and bandwidth (log-log)."""
    md = results["modelled"]
    rows = md["rows"]
    gbps = sorted({r["bandwidth_gbps"] for r in rows})
    models = md["models"]
    fig = make_subplots(rows=len(models), cols=len(gbps), shared_xaxes=True,
                        subplot_titles=[f"{m}, {g:g} Gb/s" for m in models for g in gbps],
                        vertical_spacing=0.12, horizontal_spacing=0.08)
    for i, model in enumerate(models, start=1):
        for j, g in enumerate(gbps, start=1):
            for s in [name for name in registry.compared() if any(r["strategy"] == name for r in rows)]:
                sel = [r for r in rows if r["model"] == model and r["bandwidth_gbps"] == g and r["strategy"] == s]
                fig.add_scatter(x=[r["nodes"] for r in sel], y=[r["throughput"] for r in sel], mode="lines+markers",
                                name=s + (" (best k)" if registry.owns(s, "fc_workers") else ""), legendgroup=s,
                                showlegend=(i == 1 and j == 1), line_color=STRATEGY_COLORS[s],
                                customdata=[[r["fc_workers"], r["speedup_vs_ps"], r["speedup_vs_ddp"]] for r in sel],
                                hovertemplate=f"{s} N=%{{x}}"
                                + (" k=%{customdata[0]}" if registry.owns(s, "fc_workers") else "")
                                + ": %{y:.0f} samples/s<br>%{customdata[1]:.2f}x ps, %{customdata[2]:.2f}x ddp"
                                  "<extra></extra>", row=i, col=j)
            fig.update_xaxes(type="log", title_text="nodes" if i == len(models) else None, row=i, col=j)
            fig.update_yaxes(type="log", title_text="samples/s" if j == 1 else None, row=i, col=j)
    title = (f"Modelled at the paper's scale: {md['image_size']}x{md['image_size']}, {md['device']} table, "
             f"{md['batch_per_worker']} samples per data worker")
    return finish(fig, title, 120 + 330 * len(models))


MODEL_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#8c564b", "#e377c2"]


def stanza_speedups(results: dict[str, Any]) -> go.Figure:
    """Stanza's (best k) speedup over ps and over ddp against cluster size; the paper's figures
    as a band (10 Gb/s: 1.34x-13.9x over PS) and as dotted levels (100 Gb/s)."""
    md, paper = results["modelled"], results["paper"]
    rows = [r for r in md["rows"] if registry.owns(r["strategy"], "fc_workers")]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("speedup over ps (S = N shards)", "speedup over ddp"),
                        horizontal_spacing=0.1)
    dashes = ["solid", "dash", "dot", "dashdot"]
    gbps = sorted({r["bandwidth_gbps"] for r in rows})
    nodes = sorted({r["nodes"] for r in rows})
    lo, hi = paper["speedup_vs_ps_10gbps"]
    # Paper band and levels as traces (shapes on log axes would need log coordinates).
    fig.add_scatter(x=[nodes[0], nodes[-1]], y=[lo, lo], mode="lines", line_width=0, showlegend=False,
                    hoverinfo="skip", row=1, col=1)
    fig.add_scatter(x=[nodes[0], nodes[-1]], y=[hi, hi], mode="lines", line_width=0, fill="tonexty",
                    fillcolor=PAPER_BAND_COLOR, name=f"paper, 10 Gb/s: {lo}x-{hi}x over PS", hoverinfo="skip",
                    row=1, col=1)
    for name, key in (("AlexNet", "alexnet_speedup_vs_ps_100gbps"), ("VGG-16", "vgg16_speedup_vs_ps_100gbps")):
        fig.add_scatter(x=[nodes[0], nodes[-1]], y=[paper[key]] * 2, mode="lines",
                        line=dict(color="#9467bd", dash="dot", width=1), name=f"paper {name}, 100 Gb/s: {paper[key]}x",
                        hoverinfo="name", row=1, col=1)
    for col, key in ((1, "speedup_vs_ps"), (2, "speedup_vs_ddp")):
        for mi, model in enumerate(md["models"]):
            for gi, g in enumerate(gbps):
                sel = [r for r in rows if r["model"] == model and r["bandwidth_gbps"] == g]
                fig.add_scatter(x=[r["nodes"] for r in sel], y=[r[key] for r in sel], mode="lines+markers",
                                name=f"{model}, {g:g} Gb/s", legendgroup=f"{model}{g}", showlegend=(col == 1),
                                line=dict(color=MODEL_COLORS[mi % len(MODEL_COLORS)], dash=dashes[gi % len(dashes)]),
                                customdata=[r["fc_workers"] for r in sel],
                                hovertemplate="N=%{x}, k=%{customdata}: %{y:.2f}x<extra></extra>", row=1, col=col)
        fig.add_scatter(x=[nodes[0], nodes[-1]], y=[1.0, 1.0], mode="lines", line=dict(color="#7f7f7f", width=1),
                        showlegend=False, hoverinfo="skip", row=1, col=col)
        fig.update_xaxes(type="log", title_text="nodes", row=1, col=col)
        fig.update_yaxes(type="log", title_text="x" if col == 1 else None, row=1, col=col)
    meas = results["measured"]
    pts = [(int(n), v["stanza_speedup_vs_ps"], v["stanza_speedup_vs_ddp"])
           for n, v in meas["by_nodes"].items() if v.get("stanza_speedup_vs_ps")]
    if pts:
        for col, idx in ((1, 1), (2, 2)):
            fig.add_scatter(x=[p[0] for p in pts], y=[p[idx] for p in pts], mode="markers",
                            marker=dict(symbol="star", size=14, color="black"),
                            name=f"measured: {meas['model']}, {meas['target_gbps']:g} Gb/s emulated",
                            legendgroup="measured", showlegend=(col == 1), row=1, col=col)
    fig = finish(fig, "Stanza's speedup (best k) over ps and ddp", 560)
    fig.update_layout(margin_t=170)  # room for the long legend above the panels
    return fig


def throughput_figures(results: dict[str, Any]) -> dict[str, go.Figure]:
    """The figures of notebook 03 by key: measured, modelled, speedups."""
    return mark_modelled_only({"replayed": replayed_throughput(results.get("replayed"), "Paper regime, replayed compute"),
                               "measured": measured_throughput(results), "modelled": modelled_throughput(results),
                               "speedups": stanza_speedups(results)}, results.get("modelled_only"))
