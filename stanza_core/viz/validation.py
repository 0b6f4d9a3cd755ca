"""Figures of the performance model's validation (notebook 07): predicted against measured
throughput, the error of every configuration, and which model term misses."""
from __future__ import annotations

import textwrap
from typing import Any

import plotly.graph_objects as go

from ._style import STRATEGY_COLORS, TEMPLATE, finish, mark_modelled_only, note_figure

_TITLE = "Performance model against measured runs"


def _empty(results: dict[str, Any]) -> go.Figure | None:
    if results["rows"]:
        return None
    why = results["unavailable"] or "no measured runs (nodes and bench_json are empty)"
    return note_figure(f"nothing to compare: {why}", _TITLE)


CAPTION_CHARS = 110  # about the plot's width at 11 px in a 1250 px report column


def predicted_vs_measured(results: dict[str, Any]) -> go.Figure:
    """Log-log scatter of predicted against measured samples/s, the diagonal and +-10 % / +-20 %;
    filled markers: no parameter fitted; open markers: with the out-of-sample step overhead."""
    if (fig := _empty(results)) is not None:
        return fig
    rows = results["rows"]
    lo = min(min(r["measured_throughput"], r["predicted_throughput"]) for r in rows) / 1.5
    hi = max(max(r["measured_throughput"], r["predicted_throughput"]) for r in rows) * 1.5
    fig = go.Figure()
    for f, dash, name in ((1.0, "solid", "prediction = measurement"), (1.1, "dot", "+-10 %"), (0.9, "dot", None),
                          (1.2, "dash", "+-20 %"), (0.8, "dash", None)):
        fig.add_scatter(x=[lo, hi], y=[lo * f, hi * f], mode="lines", line=dict(color="#7f7f7f", dash=dash, width=1),
                        name=name or "", showlegend=name is not None, hoverinfo="skip")
    for s in sorted({r["strategy"] for r in rows}):
        sel = [r for r in rows if r["strategy"] == s]
        text = [f"{r['label']}, {r['bench_name']}, {r['link_mbit']:.0f} Mbit/s" for r in sel]
        fig.add_scatter(x=[r["measured_throughput"] for r in sel], y=[r["predicted_throughput"] for r in sel],
                        mode="markers", name=s, marker=dict(color=STRATEGY_COLORS[s], size=11), text=text,
                        customdata=[r["error"] for r in sel],
                        hovertemplate="%{text}<br>measured %{x:.2f}, predicted %{y:.2f} samples/s "
                                      "(%{customdata:+.1%})<extra></extra>")
        cal = [r for r in sel if r["calibrated_step_s"]]
        if cal:
            g = [r["predicted_throughput"] * r["predicted_step_s"] / r["calibrated_step_s"] for r in cal]
            fig.add_scatter(x=[r["measured_throughput"] for r in cal], y=g, mode="markers",
                            name=f"{s} + fitted overhead", marker=dict(color=STRATEGY_COLORS[s], size=11,
                                                                      symbol="circle-open", line_width=2),
                            customdata=[r["calibrated_error"] for r in cal],
                            text=[f"{r['label']}, {r['link_mbit']:.0f} Mbit/s, overhead {r['overhead_s'] * 1e3:.0f} ms"
                                  for r in cal],
                            hovertemplate="%{text}<br>%{customdata:+.1%}<extra></extra>")
    fig.update_xaxes(type="log", title_text="measured samples/s")
    fig.update_yaxes(type="log", title_text="predicted samples/s")
    s = results["summary"]
    fig.add_annotation(text=f"median |error| {s['median_abs_error']:.1%}, worst {s['worst_abs_error']:.1%} "
                            f"({s['configurations']} configurations, no parameter fitted)",
                       xref="paper", yref="paper", x=0.01, y=0.99, showarrow=False, xanchor="left")
    # wrapped: on one line a long caption ran past the figure's right edge and was cut off there
    caption = "<br>".join(textwrap.wrap(results.get("caption", ""), CAPTION_CHARS))
    fig.add_annotation(text=caption, xref="paper", yref="paper", x=0.01, y=0.93, showarrow=False,
                       xanchor="left", yanchor="top", align="left", font=dict(size=11))
    fig = finish(fig, _TITLE, 600)
    fig.update_layout(margin_t=150)
    return fig


def error_bars(results: dict[str, Any]) -> go.Figure:
    """Throughput error (predicted / measured - 1) of every configuration, with and without the
    out-of-sample step overhead."""
    if (fig := _empty(results)) is not None:
        return fig
    rows = results["rows"]
    x = [f"{r['bench_name']}: {r['label']} @ {r['link_mbit']:.0f} Mbit/s" for r in rows]
    fig = go.Figure()
    fig.add_bar(x=x, y=[r["error"] for r in rows], name="no parameter fitted",
                marker_color=[STRATEGY_COLORS[r["strategy"]] for r in rows],
                hovertemplate="%{x}: %{y:+.1%}<extra></extra>")
    fig.add_bar(x=x, y=[r["calibrated_error"] for r in rows], name="+ step overhead fitted at the other rates",
                marker=dict(color="rgba(0,0,0,0)", line=dict(color="#333", width=1.5)),
                hovertemplate="%{x}: %{y:+.1%}<extra></extra>")
    for y in (-0.1, 0.1):
        fig.add_hline(y=y, line_dash="dot", line_color="#7f7f7f")
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="predicted / measured - 1", tickformat="+.0%")
    fig.update_xaxes(tickangle=-35)
    return finish(fig, "Error per configuration (positive: the model is optimistic)", 520)


def term_table(results: dict[str, Any]) -> go.Figure:
    """Per bench and strategy: how much the model's communication term is off (scale) and the
    fixed time per step it lacks, fitted over its configurations (link rates, k)."""
    head = ["bench", "strategy", "comm term x", "missing fixed ms/step", "points", "median |error|"]
    cells = [[] for _ in head]
    for b in results["benches"]:
        for s, fit in b["term_fit"].items():
            by = b["summary"]["by_strategy"].get(s, {})
            vals = [b["name"], s, f"{fit['comm_scale']:.2f}" if fit else "-",
                    f"{fit['fixed_s'] * 1e3:.0f}" if fit else "-", str(fit["points"]) if fit else "<2",
                    f"{by.get('median_abs_error', 0):.1%}"]
            for c, v in zip(cells, vals):
                c.append(v)
    fig = go.Figure(go.Table(header=dict(values=head, fill_color="#e5e5e5", align="left"),
                             cells=dict(values=cells, align="left")))
    fig.update_layout(template=TEMPLATE)
    return finish(fig, "Which term misses: measured step = fixed + scale x predicted communication + predicted "
                       "compute", 160 + 30 * max(len(cells[0]), 1))


def validation_figures(results: dict[str, Any]) -> dict[str, go.Figure]:
    """The figures of notebook 07 by key: scatter, errors, terms."""
    return mark_modelled_only({"scatter": predicted_vs_measured(results), "errors": error_bars(results),
                               "terms": term_table(results)}, results.get("modelled_only"))
