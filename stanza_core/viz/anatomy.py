"""Figures of the layer anatomy: where a CNN keeps its parameters and where it spends compute.

Inputs are `stanza_core.Profile` objects (or their `to_dict()` form, as stored in results JSON).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..anatomy import DTYPE_BYTES, Profile
from ._style import PART_COLORS, PART_LABELS, finish, note_figure, si

BOUNDARY_COLOR = "#8c564b"
TIMES_TITLE = "Measured time per sample"
ProfileLike = Profile | dict[str, Any]


def _profiles(profiles: ProfileLike | Sequence[ProfileLike]) -> list[Profile]:
    items = [profiles] if isinstance(profiles, (Profile, dict)) else list(profiles)
    if not items:
        raise ValueError("no profiles to plot: pass at least one Profile")
    return [p if isinstance(p, Profile) else Profile.from_dict(p) for p in items]


def layer_profile(profiles: ProfileLike | Sequence[ProfileLike]) -> go.Figure:
    """Per-layer parameters and forward FLOPs per sample (log scale), one row per model.

    Bars are coloured by part (CONV body / FC head); a dashed line marks the boundary. Only
    layers that hold parameters or do counted FLOPs are drawn (ReLU, pooling, dropout count 0)."""
    ps = _profiles(profiles)
    titles = [t for p in ps for t in (f"{p.model}: parameters per layer",
                                      f"{p.model}: forward FLOPs per sample")]
    fig = make_subplots(rows=len(ps), cols=2, subplot_titles=titles, horizontal_spacing=0.08,
                        vertical_spacing=min(0.5 / len(ps), 0.12))
    for row, p in enumerate(ps, start=1):
        layers = [r for r in p.layers if r.params > 0 or r.flops > 0]
        names = [r.name for r in layers]
        for col, field in ((1, "params"), (2, "flops")):
            for part in ("conv", "fc"):
                sel = [r for r in layers if r.part == part]
                fig.add_bar(
                    x=[r.name for r in sel], y=[getattr(r, field) for r in sel],
                    name=PART_LABELS[part], legendgroup=part, showlegend=(row == 1 and col == 1),
                    marker_color=PART_COLORS[part],
                    customdata=[[r.kind, si(r.params), si(r.flops), f"{r.out_values:,}"] for r in sel],
                    hovertemplate="%{x} (%{customdata[0]})<br>params %{customdata[1]}<br>"
                                  "FLOPs %{customdata[2]}<br>output values %{customdata[3]}<extra></extra>",
                    row=row, col=col)
            # ResNet-50 has ~100 such layers: let plotly thin the tick labels instead of overlapping them.
            fig.update_xaxes(categoryorder="array", categoryarray=names, tickangle=-60, nticks=min(len(names), 40),
                             tickfont_size=10, row=row, col=col)
            fig.update_yaxes(type="log", dtick=1, title_text="parameters" if col == 1 else "FLOPs", row=row, col=col)
            n_conv = sum(r.part == "conv" for r in layers)
            if 0 < n_conv < len(layers):  # the line sits between the last CONV and first FC layer
                fig.add_vline(x=n_conv - 0.5, line_dash="dash", line_color=BOUNDARY_COLOR, row=row, col=col)
        xref = "x domain" if row == 1 else f"x{2 * row - 1} domain"
        yref = "y domain" if row == 1 else f"y{2 * row - 1} domain"
        fig.add_annotation(text=f"boundary: {p.boundary} ({p.boundary_values:,} values/sample)",
                           xref=xref, yref=yref, x=0.02, y=0.97, showarrow=False, yanchor="top",
                           font=dict(color=BOUNDARY_COLOR), bgcolor="rgba(255,255,255,0.8)")
    fig.update_layout(barmode="group", bargap=0.15)
    img = ps[0].input_shape
    return finish(fig, f"Layer anatomy at {img[1]}x{img[2]} input", height=120 + 380 * len(ps))


def part_shares(profiles: ProfileLike | Sequence[ProfileLike]) -> go.Figure:
    """CONV vs FC share of parameters and of forward FLOPs, and the bytes each part would move.

    The third panel compares a full fp32 gradient of each part (what data parallelism syncs per
    step) with the boundary activation of one sample (what layer separation sends instead)."""
    ps = _profiles(profiles)
    models = [p.model for p in ps]
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08, subplot_titles=(
        "share of parameters", "share of forward FLOPs", "bytes (fp32, log scale)"))
    for part in ("conv", "fc"):
        param_share = [getattr(p, part).params / p.params for p in ps]
        flop_share = [getattr(p, part).flops / (p.conv.flops + p.fc.flops) for p in ps]
        for col, share in ((1, param_share), (2, flop_share)):
            fig.add_bar(x=models, y=[100 * s for s in share], name=PART_LABELS[part], legendgroup=part,
                        showlegend=col == 1, marker_color=PART_COLORS[part],
                        text=[f"{100 * s:.1f} %" for s in share], textposition="inside", textangle=0,
                        hovertemplate="%{x}: %{y:.2f} %<extra>" + PART_LABELS[part] + "</extra>",
                        row=1, col=col)
    grads = {"conv": [DTYPE_BYTES * p.conv.params for p in ps], "fc": [DTYPE_BYTES * p.fc.params for p in ps]}
    for part in ("conv", "fc"):
        fig.add_bar(x=models, y=grads[part], name=f"{PART_LABELS[part]} gradient", legendgroup=part,
                    showlegend=False, marker_color=PART_COLORS[part], offsetgroup=part,
                    text=[si(v, "B") for v in grads[part]], **_BYTES_TEXT,
                    hovertemplate="%{x}: " + PART_LABELS[part] + " gradient %{text}<extra></extra>",
                    row=1, col=3)
    fig.add_bar(x=models, y=[p.boundary_bytes for p in ps], name="boundary activation per sample",
                marker_color=BOUNDARY_COLOR, offsetgroup="boundary",
                text=[si(p.boundary_bytes, "B") for p in ps], **_BYTES_TEXT,
                hovertemplate="%{x}: boundary %{text} per sample<extra></extra>", row=1, col=3)
    fig.update_yaxes(title_text="%", range=[0, 100], row=1, col=1)
    fig.update_yaxes(range=[0, 100], row=1, col=2)
    values = grads["conv"] + grads["fc"] + [p.boundary_bytes for p in ps]
    low, high = math.log10(max(min(values), 1)), math.log10(max(max(values), 1))
    # a decade of headroom above the tallest bar for its upright label
    fig.update_yaxes(type="log", dtick=1, title_text="bytes", range=[low - 0.5, high + 1.0], row=1, col=3)
    fig.update_layout(barmode="relative",  # stacked in the share panels; offsetgroups group panel 3
                      uniformtext_minsize=9, uniformtext_mode="show")  # a thin segment's share stays legible
    return finish(fig, "CONV body vs FC head", height=460)


# The bytes panel's value labels: three narrow bars per model, so plotly's default (shrink the text
# to the bar's width) left them about 5 px high; upright along the bar at a fixed 11 px instead,
# drawn past the axis' end where a label needs it.
_BYTES_TEXT = dict(textposition="outside", textangle=-90, constraintext="none", textfont_size=11, cliponaxis=False)


def part_times(profiles: ProfileLike | Sequence[ProfileLike]) -> go.Figure:
    """Measured forward and backward milliseconds per sample of each part (profile time=True)."""
    ps = _profiles(profiles)
    timed = [p for p in ps if p.conv.fwd_s is not None and p.fc.fwd_s is not None]
    if not timed:  # a run that counted only (notebook 01's quick run): say so, in the figure itself
        fig = note_figure("Not timed in this run: these profiles count parameters and FLOPs only.<br>"
                          "Each part's forward and backward are timed with time_layers = true "
                          "(profile_model(time=True); the full run does).",
                          f"{TIMES_TITLE}: not measured in this run", height=260)
        return fig.update_annotations(font_size=15)
    models = [p.model for p in timed]
    fig = go.Figure()
    for part in ("conv", "fc"):
        fwd = [1e3 * getattr(p, part).fwd_s for p in timed]
        bwd = [1e3 * getattr(p, part).bwd_s for p in timed]
        label = PART_LABELS[part]
        fig.add_bar(x=models, y=fwd, name=f"{label} forward", offsetgroup=part, marker_color=PART_COLORS[part],
                    hovertemplate="%{x}: %{y:.3g} ms<extra>" + label + " forward</extra>")
        fig.add_bar(x=models, y=bwd, base=fwd, name=f"{label} backward", offsetgroup=part,
                    marker_color=PART_COLORS[part], marker_pattern_shape="/", opacity=0.6,
                    hovertemplate="%{x}: %{y:.3g} ms<extra>" + label + " backward</extra>")
    devices = sorted({p.timed_on or "?" for p in timed})
    fig.update_yaxes(title_text="ms per sample")
    fig.update_layout(barmode="group")
    return finish(fig, f"{TIMES_TITLE} ({', '.join(devices)}, batch {timed[0].batch_size})", 420)


def anatomy_table(profiles: ProfileLike | Sequence[ProfileLike]) -> go.Figure:
    """The key numbers of each model as a table (the same numbers the results JSON holds)."""
    ps = _profiles(profiles)
    columns = {
        "model": [p.model for p in ps],
        "boundary": [p.boundary for p in ps],
        "CONV params": [f"{p.conv.params:,}" for p in ps],
        "FC params": [f"{p.fc.params:,}" for p in ps],
        "FC share of params": [f"{100 * p.fc_param_share():.1f} %" for p in ps],
        "FC share of FLOPs": [f"{100 * p.fc_flop_share():.2f} %" for p in ps],
        "boundary values / sample": [f"{p.boundary_values:,}" for p in ps],
        "boundary KB / sample": [f"{p.boundary_bytes / 1e3:.1f}" for p in ps],
    }
    fig = go.Figure(go.Table(header=dict(values=list(columns), align="left", fill_color="#e8e8e8"),
                             cells=dict(values=list(columns.values()), align="left")))
    fig = finish(fig, "CONV vs FC, per model", height=190 + 32 * len(ps))
    return fig.update_layout(margin=dict(t=60, b=10))


def anatomy_figures(profiles: ProfileLike | Sequence[ProfileLike]) -> dict[str, go.Figure]:
    """Every anatomy figure, keyed by the file stem it is saved under."""
    ps = _profiles(profiles)
    return {"table": anatomy_table(ps), "layers": layer_profile(ps), "shares": part_shares(ps),
            "times": part_times(ps)}
