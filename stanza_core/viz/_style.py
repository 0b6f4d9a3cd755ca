"""Colours, number formats and layout defaults shared by every figure builder."""
from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from .. import registry

# One colour per thing, the same in every figure of the project.
PART_COLORS = {"conv": "#1f77b4", "fc": "#d62728"}  # CONV body blue, FC head red
PART_LABELS = {"conv": "CONV", "fc": "FC"}


class _StrategyColors(Mapping):
    """Each strategy's colour, read from its registry record (a plug-in strategy's too)."""

    def __getitem__(self, name: str) -> str:
        return registry.colors()[name]

    def __iter__(self):
        return iter(registry.colors())

    def __len__(self) -> int:
        return len(registry.colors())


STRATEGY_COLORS = _StrategyColors()
# Models in a figure that draws several (one colour per model in every panel); none of these is
# a strategy's colour or the paper's purple.
MODEL_COLORS = ("#1f77b4", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#d62728")
TEMPLATE = "plotly_white"


def si(value: float, unit: str = "") -> str:
    """Human-readable number with an SI prefix: si(58_631_144) -> '58.63 M'."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:g} {unit}".rstrip()


def finish(fig: go.Figure, title: str, height: int) -> go.Figure:
    """Apply the project's layout defaults (template, title, size, legend on top)."""
    fig.update_layout(template=TEMPLATE, title=dict(text=title, x=0.01), height=height,
                      margin=dict(l=60, r=20, t=110, b=60),
                      legend=dict(orientation="h", yanchor="bottom", y=1.06, x=0.99, xanchor="right"))
    return fig


def note_figure(text: str, title: str, height: int = 200) -> go.Figure:
    """An empty figure that says why there is nothing to plot (keeps notebooks free of ifs)."""
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return finish(fig, title, height)


MODELLED_ONLY = "Modelled only"


def mark_modelled_only(figs: dict[str, go.Figure], reason: str | None) -> dict[str, go.Figure]:
    """When an experiment's measured cells did not run (`reason`: no root or tc here, measuring
    turned off), every figure says so: its title starts with "Modelled only" and a note under the
    title gives the reason. With reason None the figures are returned unchanged."""
    if not reason:
        return figs
    for fig in figs.values():
        title = fig.layout.title.text or ""
        fig.update_layout(title_text=f"{MODELLED_ONLY} · {title}" if title else MODELLED_ONLY)
        fig.add_annotation(text=f"{MODELLED_ONLY.lower()}: nothing measured here ({reason})", showarrow=False,
                           xref="paper", yref="paper", x=0.0, y=1.0, yshift=-2, xanchor="left", yanchor="bottom",
                           font=dict(size=11, color="#8a6d00"))
    return figs
