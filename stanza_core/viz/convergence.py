"""Figures of convergence: loss and accuracy against steps and against training time, one line
per strategy, and how far each strategy's loss is from the single-process reference.

Input: the results dict of `stanza_core.experiments.convergence.results` (notebook 06). The
strategies' curves lie on top of each other (BSP on the same global batches), so each strategy
gets its own dash and width: the reference (local) is the widest line, drawn first.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .. import registry
from ._style import STRATEGY_COLORS, finish

# Exact strategies draw the same curve: each is drawn narrower than the one before it, in the
# registry's order (the oracle widest, at the bottom), with its own dash, so every one shows.
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
WIDTHS = (7, 4, 3, 2)


def _style(name: str) -> tuple[str, int]:
    """(dash, width) of a strategy's line; a stanza variant's: solid, the narrowest."""
    names = registry.names()
    if name not in names:
        return "solid", WIDTHS[-1]
    i = names.index(name)
    return DASHES[i % len(DASHES)], WIDTHS[min(i, len(WIDTHS) - 1)]


def _name(name: str, run: Mapping[str, Any]) -> str:
    if name in registry.names() and registry.owns(name, "fc_workers"):
        return f"{name} (N = {run['nodes']}, k = {run['fc_workers']})"
    return name if name == registry.oracle() else f"{name} (N = {run['nodes']})"


VARIANT_COLORS = {"stanza_hybrid_m2": "#17becf", "stanza_bf16": "#bcbd22", "stanza_fp16_grads": "#e377c2",
                  "stanza_powersgd": "#8c564b"}  # stanza beyond the paper (experiments.convergence.VARIANTS)


def _line(name: str) -> dict[str, Any]:
    color = STRATEGY_COLORS.get(name) or VARIANT_COLORS.get(name, "#999999")
    dash, width = _style(name)
    return dict(color=color, dash=dash, width=width)


def loss_curves(results: Mapping[str, Any]) -> go.Figure:
    """Training loss (mean over the global batch) against step and against training time."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("loss against step", "loss against training time"),
                        horizontal_spacing=0.08)
    for name, r in results["strategies"].items():
        steps = r["steps"]
        for col, x in ((1, [s["step"] for s in steps]), (2, [s["wall_s"] for s in steps])):
            fig.add_scatter(x=x, y=[s["loss"] for s in steps], mode="lines", name=_name(name, r), legendgroup=name,
                            showlegend=col == 1, line=_line(name), row=1, col=col,
                            hovertemplate=f"{name}<br>%{{x}}<br>loss %{{y:.6f}}<extra></extra>")
    fig.update_xaxes(title_text="step", row=1, col=1)
    fig.update_xaxes(title_text="training time (s, sum of step times on this machine)", row=1, col=2)
    fig.update_yaxes(title_text="training loss (cross-entropy)", row=1, col=1)
    p = results["params"]
    return _bottom_legend(finish(fig, f"Loss on {p['dataset']}: {p['model']}, global batch {p['global_batch']}, "
                                      f"lr {p['lr']}, momentum {p['momentum']}", 480))


def _bottom_legend(fig: go.Figure) -> go.Figure:
    """Legends of one entry per strategy and curve go under the plots, clear of the titles."""
    return fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.18, yanchor="top"),
                             margin=dict(t=80, b=130))


def accuracy_curves(results: Mapping[str, Any]) -> go.Figure:
    """Accuracy of the saved model every eval_every steps: on all digits (solid markers) and on
    the digits never drawn in training (open markers, when there are any); chance as a line."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("accuracy against step", "accuracy against training time"),
                        horizontal_spacing=0.08)
    for name, r in results["strategies"].items():
        ev = r["evals"]
        for col, x in ((1, [e["step"] for e in ev]), (2, [e["wall_s"] for e in ev])):
            fig.add_scatter(x=x, y=[e["accuracy_all"] for e in ev], mode="lines+markers",
                            name=f"{_name(name, r)}, all {results['dataset_size']} digits", legendgroup=name,
                            showlegend=col == 1, line=_line(name), marker=dict(size=6 + _style(name)[1]),
                            row=1, col=col, hovertemplate=f"{name}, all digits<br>%{{x}}<br>%{{y:.1%}}<extra></extra>")
            if results["heldout_size"]:
                fig.add_scatter(x=x, y=[e["accuracy_heldout"] for e in ev], mode="markers",
                                name=f"{_name(name, r)}, {results['heldout_size']} held-out digits",
                                legendgroup=name, showlegend=col == 1, row=1, col=col,
                                marker=dict(symbol="circle-open", size=8 + _style(name)[1], line_width=2,
                                            color=_line(name)["color"]),
                                hovertemplate=f"{name}, held out<br>%{{x}}<br>%{{y:.1%}}<extra></extra>")
    for col in (1, 2):
        fig.add_hline(y=results["chance_accuracy"], line_dash="dash", line_color="#aaaaaa", row=1, col=col,
                      **({"annotation_text": "chance"} if col == 1 else {}))
    fig.update_xaxes(title_text="step", row=1, col=1)
    fig.update_xaxes(title_text="training time (s)", row=1, col=2)
    fig.update_yaxes(title_text="top-1 accuracy", tickformat=".0%", range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02], row=1, col=2)
    return _bottom_legend(finish(fig, "Accuracy of the model after each evaluation segment", 520))


def loss_difference(results: Mapping[str, Any]) -> go.Figure:
    """|loss - local loss| per step for every distributed strategy: float summation order only."""
    fig = go.Figure()
    ref = [s["loss"] for s in results["strategies"]["local"]["steps"]]
    for name, r in results["strategies"].items():
        if name == registry.oracle():
            continue
        fig.add_scatter(x=[s["step"] for s in r["steps"]], y=[abs(s["loss"] - l) for s, l in zip(r["steps"], ref)],
                        mode="lines+markers", name=_name(name, r), line=dict(color=_line(name)["color"]),
                        marker=dict(size=4), hovertemplate=f"{name}<br>step %{{x}}<br>|diff| %{{y:.2e}}<extra></extra>")
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="|loss - local loss|", exponentformat="e", rangemode="tozero")
    return finish(fig, f"Distance from the single-process reference (largest: "
                       f"{results['max_loss_diff_vs_local']:.1e})", 380)


def convergence_table(results: Mapping[str, Any]) -> go.Figure:
    rows = []
    for name, r in results["strategies"].items():
        held = r["final_accuracy_heldout"]
        gap = r.get("first_step_loss_gap_above")
        rows.append([_name(name, r), f"{r['final_loss']:.4f}", f"{r['max_loss_diff_vs_local']:.1e}",
                     "never" if gap is None else str(gap),
                     f"{r['final_accuracy']:.1%}", "-" if held is None else f"{held:.1%}",
                     f"{r['train_time_s']:.2f}", f"{r['step_time_median_s']:.4f}"])
    head = ["strategy", "final loss", "max |loss - local|", f"first step > {results.get('loss_gap', 1e-4):g}",
            f"accuracy (all {results['dataset_size']})",
            f"accuracy (held out: {results['heldout_size']})", "training time s", "median step s"]
    fig = go.Figure(go.Table(header=dict(values=head, fill_color="#eeeeee", align="left"),
                             cells=dict(values=list(zip(*rows)), align="left", height=26)))
    fig = finish(fig, "Convergence: the same model whichever strategy trains it", 190 + 26 * len(rows))
    return fig.update_layout(margin=dict(t=60, b=20))


def convergence_figures(results: Mapping[str, Any]) -> dict[str, go.Figure]:
    """Every figure of notebook 06, by file name."""
    return {"table": convergence_table(results), "loss": loss_curves(results),
            "accuracy": accuracy_curves(results), "loss_difference": loss_difference(results)}
