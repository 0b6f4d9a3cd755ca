"""One training step as a timeline, from the timestamps the engine records with `--timeline`.

Input: a metrics dict whose ranks carry `timeline` lists of {step, t, event, category, peer,
bytes} (stanza_core.comm). `intervals` pairs the events into bars (pure data); `step_timeline`
draws them: per rank one lane for compute and one for the network. Everything drawn is measured
(wall-clock seconds since the first rank entered the step), nothing is modelled.

Pairs: forward_start/forward_end and backward_start/backward_end (CONV worker), forward_start/
backward_end per served CONV worker (FC worker: its forward and backward of that chunk),
optimizer_start/optimizer_end, allreduce/allreduce_done (a gradient bucket, matched first in
first out among buckets of the same size), recv/recv_done (a posted receive until its data is
there: waiting shows up here). Sends are drawn as ticks at the moment they are posted.
"""
from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from ._style import PART_COLORS, finish, note_figure
from .traffic import CATEGORY_COLORS, CATEGORY_LABELS, ROLE_LABELS

_PAIRS = {"forward_end": "forward_start", "backward_end": ("backward_start", "forward_start"),
          "optimizer_end": "optimizer_start", "allreduce_done": "allreduce", "recv_done": "recv"}


def intervals(rank: Mapping[str, Any], step: int) -> list[dict[str, Any]]:
    """Bars of one rank's step: {rank, lane ("compute"|"network"), what, category, peer, bytes, start, end}."""
    open_: dict[tuple, deque] = defaultdict(deque)
    bars = []
    for e in (e for e in rank.get("timeline") or [] if e["step"] == step):
        ev = e["event"]
        if ev in ("forward_start", "backward_start", "optimizer_start"):
            open_[(ev, e["peer"])].append(e)
        elif ev in ("allreduce", "recv"):
            open_[(ev, e["category"], e["bytes"], e["peer"])].append(e)
        elif ev == "send":
            bars.append({"rank": rank["rank"], "lane": "network", "what": "send posted", "category": e["category"],
                         "peer": e["peer"], "bytes": e["bytes"], "start": e["t"], "end": e["t"]})
        elif ev in _PAIRS:
            starts = _PAIRS[ev] if isinstance(_PAIRS[ev], tuple) else (_PAIRS[ev],)
            key = None
            for s in starts:
                k = (s, e["peer"]) if s.endswith("_start") else (s, e["category"], e["bytes"], e["peer"])
                if open_.get(k):
                    key = k
                    break
            if key is None:
                continue
            first = open_[key].popleft()
            if ev in ("allreduce_done", "recv_done"):
                what = "allreduce" if ev == "allreduce_done" else "receive (posted until arrived)"
                lane, cat = "network", e["category"]
            else:
                what = {"forward_start": "forward", "backward_start": "backward",
                        "optimizer_start": "optimizer step"}[first["event"]]
                if ev == "backward_end" and first["event"] == "forward_start":
                    what = "FC forward + backward"
                lane, cat = "compute", "compute"
            bars.append({"rank": rank["rank"], "lane": lane, "what": what, "category": cat, "peer": e["peer"],
                         "bytes": e["bytes"], "start": first["t"], "end": e["t"]})
    return sorted(bars, key=lambda b: (b["lane"], b["start"]))


def step_timeline(metrics: Mapping[str, Any], step: int | None = None) -> go.Figure:
    """Compute and network lanes of every rank in one step (default: the last one), measured."""
    ranks = [r for r in metrics.get("ranks", []) if r.get("timeline")]
    if not ranks:
        return note_figure("no timeline in these metrics (run the engine with --timeline)", "Step timeline")
    steps = sorted({e["step"] for r in ranks for e in r["timeline"]})
    step = steps[-1] if step is None else step
    fig = go.Figure()
    lanes, shown = [], set()
    for r in ranks:
        role = ROLE_LABELS.get(r["role"], r["role"])
        for lane in ("compute", "network"):
            lanes.append(f"rank {r['rank']} {role}: {lane}")
        for b in intervals(r, step):
            if b["category"] == "labels" and b["what"].startswith("receive"):
                continue  # arrives with the activations it belongs to; drawn, it would hide them
            y = f"rank {r['rank']} {role}: {b['lane']}"
            ms = 1e3
            if b["category"] == "compute":
                color = PART_COLORS["conv" if r["role"] == "conv_worker" else "fc"]
                name = f"{'CONV' if r['role'] == 'conv_worker' else 'FC'} compute"
            else:
                color = CATEGORY_COLORS.get(b["category"], "#999999")
                name = f"{b['what'].split(' ')[0]}: {CATEGORY_LABELS.get(b['category'], b['category'])}"
            hover = (f"{b['what']}<br>{CATEGORY_LABELS.get(b['category'], b['category'])}"
                     + (f", peer rank {b['peer']}" if b["peer"] is not None else "")
                     + (f", {b['bytes']:,} B" if b["bytes"] else "")
                     + f"<br>{b['start'] * ms:.2f} - {b['end'] * ms:.2f} ms<extra></extra>")
            if b["end"] == b["start"]:  # a posted send: a tick
                fig.add_scatter(x=[b["start"] * ms], y=[y], mode="markers", name=name, legendgroup=name,
                                showlegend=name not in shown, hovertemplate=hover,
                                marker=dict(symbol="triangle-right", size=11, color=color))
            else:
                fig.add_bar(x=[(b["end"] - b["start"]) * ms], base=[b["start"] * ms], y=[y], orientation="h",
                            name=name, legendgroup=name, showlegend=name not in shown, hovertemplate=hover,
                            marker=dict(color=color, opacity=0.55 if b["lane"] == "network" else 0.9,
                                        line=dict(color="white", width=1)))
            shown.add(name)
    fig.update_layout(barmode="overlay", bargap=0.35)
    fig.update_yaxes(categoryorder="array", categoryarray=lanes[::-1])
    fig.update_xaxes(title="ms since the first rank started the step (measured)")
    fig = finish(fig, f"One Stanza step (step {step}), measured: compute and network per rank", 140 + 48 * len(lanes))
    return fig.update_layout(margin=dict(l=230, r=20, t=130, b=60))
