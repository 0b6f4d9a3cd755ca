"""Node-assignment figures. Notebook 04 (`assignment_figures`): stanza's samples/s against k,
measured on the emulated cluster and modelled at the paper's scale. The explorer (notebook 08,
stanza_core.widgets): predicted throughput against k, one step's time breakdown, bytes per node
by category, the optimiser's recommendation, and a diagram of who sends what to whom.

Inputs are `stanza_core.perf` objects: an `Assignment` (from `best_assignment`) and
`Prediction`s (from `predict`; the diagram needs one made with `with_ranks=True`). Every number
drawn is a field of those objects, unchanged.
"""
from __future__ import annotations

import html
import math
from collections.abc import Sequence

import plotly.graph_objects as go

from .. import registry
from ..perf import Assignment, Prediction
from ..topology import Topology
from plotly.subplots import make_subplots

from ._style import STRATEGY_COLORS, finish, mark_modelled_only, note_figure, si
from .throughput import replayed_throughput
from .traffic import CATEGORY_COLORS, ROLE_LABELS, node_bytes

# Breakdown activities in the order they are listed, with what each one measures.
ACTIVITIES = {
    "conv_compute_s": "CONV compute (forward + backward)",
    "fc_compute_s": "FC compute (forward + backward)",
    "step_overhead_s": "fixed overhead per step",
    "grads_allreduce_s": "gradient allreduce (ring, all N)",
    "ps_push_s": "push gradients to the shards",
    "ps_pull_s": "pull parameters from the shards",
    "activation_ingress_s": "activations into an FC worker",
    "fc_worker_compute_s": "FC worker compute (all its CONV workers)",
    "activation_egress_s": "activation gradients out of an FC worker",
    "exchange_span_s": "activation exchange, pipelined span",
    "conv_allreduce_s": "CONV gradient allreduce (CONV workers)",
    "fc_allreduce_s": "FC gradient allreduce (FC workers)",
    "update_s": "optimizer step",
    "latency_s": "message latencies (included above)",
}
ROLE_SYMBOLS = {"worker": "circle", "conv_worker": "circle", "fc_worker": "square"}
ROLE_COLORS = {"worker": "#2ca02c", "conv_worker": "#1f77b4", "fc_worker": "#d62728"}


def describe(p: Prediction) -> str:
    return p.label


def cluster_text(p: Prediction) -> str:
    return (f"N = {p.nodes}, {p.bandwidth_gbps:g} Gb/s, {p.latency_s * 1e6:g} us latency, "
            f"global batch {p.global_batch}, {p.device}")


def throughput_vs_k(a: Assignment, chosen_k: int | None = None) -> go.Figure:
    """Predicted samples/s of stanza for each k (bars), ddp and ps (horizontal lines); the
    optimiser's best stanza k is outlined in black, the chosen k hatched."""
    everything = [p for p in a.ranking if registry.owns(p.strategy, "fc_workers")]  # fastest first
    by_k: dict[int, Prediction] = {}
    for p in everything:  # the fastest stanza at each k (with its share / M / compression)
        by_k.setdefault(p.fc_workers, p)
    stanza = sorted(by_k.values(), key=lambda p: p.fc_workers)
    paper = {p.fc_workers: p for p in everything[::-1] if not p.fc_batch and p.variant.get("micro_batches", 1) == 1
             and (p.variant.get("boundary_dtype", "fp32"), p.variant.get("grad_compression", "none")) == ("fp32", "none")}
    best = a.best_stanza()
    fig = go.Figure()
    ks = [p.fc_workers for p in stanza]
    beyond = any(by_k[k] is not paper.get(k) for k in ks)
    if beyond:  # the paper's Stanza beside the best options, at each k
        fig.add_bar(x=sorted(paper), y=[paper[k].throughput for k in sorted(paper)], name="stanza as in the paper",
                    marker=dict(color="#bbbbbb"),
                    hovertemplate="paper's stanza, k = %{x}<br>%{y:,.0f} samples/s<extra></extra>")
    fig.add_bar(x=ks, y=[p.throughput for p in stanza],
                name="stanza, best share / M / compression" if beyond else "stanza (k FC workers)",
                text=[p.label.removeprefix(f"stanza k={p.fc_workers}").strip() for p in stanza] if beyond else None,
                marker=dict(color=STRATEGY_COLORS["stanza"],
                            line=dict(color=["black" if best and p.fc_workers == best.fc_workers else "white"
                                             for p in stanza], width=3),
                            pattern=dict(shape=["/" if p.fc_workers == chosen_k else "" for p in stanza])),
                customdata=[[p.iteration_s, p.nodes - p.fc_workers] for p in stanza],
                hovertemplate="k = %{x} FC workers, %{customdata[1]} CONV workers<br>%{y:,.0f} samples/s"
                              "<br>step %{customdata[0]:.4f} s<extra></extra>")
    span = [min(ks, default=1) - 0.5, max(ks, default=1) + 0.5]
    for base in (a.ddp, a.ps):
        fig.add_scatter(x=span, y=[base.throughput] * 2, mode="lines", name=f"{base.strategy} (all N train the whole model)",
                        line=dict(color=STRATEGY_COLORS[base.strategy], width=3,
                                  dash="dash" if registry.get(base.strategy).exchange == "allreduce" else "dot"),
                        hovertemplate=f"{base.strategy}: %{{y:,.0f}} samples/s<extra></extra>")
    fig.update_xaxes(title_text="k, FC workers (the other N - k nodes are CONV workers)", dtick=1)
    fig.update_yaxes(title_text="predicted throughput (samples/s)", rangemode="tozero")
    return finish(fig, f"Predicted throughput against k ({a.best.nodes} nodes, {a.best.bandwidth_gbps:g} Gb/s)", 420)


def step_breakdown(preds: Sequence[Prediction]) -> go.Figure:
    """Seconds of each activity of one step on its busiest node, per configuration (grouped bars).
    Activities overlap (see each strategy's `overlap`), so they do not add up to the step;
    the first row is the step itself and the second what communication adds to it."""
    fig = go.Figure()
    rows = ["step (iteration time)", "exposed communication"] + list(ACTIVITIES.values())
    for p in preds:
        values = {"step (iteration time)": p.iteration_s, "exposed communication": p.exposed_comm_s}
        values.update({label: p.breakdown[key] for key, label in ACTIVITIES.items() if key in p.breakdown})
        ys = [r for r in rows if r in values]
        fig.add_bar(y=ys, x=[values[r] * 1e3 for r in ys], orientation="h", name=describe(p),
                    marker_color=STRATEGY_COLORS.get(p.strategy, "#999999"),
                    hovertemplate=describe(p) + "<br>%{y}: %{x:.3f} ms<extra></extra>")
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=rows)
    fig.update_xaxes(title_text="milliseconds per step")
    fig.update_layout(barmode="group")
    return finish(fig, f"Time breakdown of one step ({cluster_text(preds[0])})", 560)


def bytes_per_node(preds: Sequence[Prediction]) -> go.Figure:
    """Bytes per step (sent + received) through the busiest node of each role, by category."""
    entries = [{"label": describe(p), "role": role, "sent": v["sent"], "recv": v["recv"]}
               for p in preds for role, v in p.bytes_per_node.items()]
    return node_bytes(entries, "Bytes per step through the busiest node of each role (performance model)")


def recommendation_html(a: Assignment, chosen: Prediction | None = None) -> str:
    """The optimiser's choice in a few lines of HTML (for an ipywidgets.HTML or a notebook)."""
    b = a.best
    lines = [f"<b>Recommended: {html.escape(describe(b))}</b> &mdash; {b.throughput:,.0f} samples/s, "
             f"{b.iteration_s * 1e3:.2f} ms per step, {si(b.max_node_sent, 'B')} sent by the busiest node per step.",
             f"Speedup over DDP {a.speedup_vs_ddp:.2f}x, over the parameter server {a.speedup_vs_ps:.2f}x."]
    if registry.owns(b.strategy, "fc_workers"):
        lines.append(f"{b.nodes - b.fc_workers} CONV workers train the convolutional body data-parallel; "
                     f"{b.fc_workers} FC worker{'s train' if b.fc_workers > 1 else ' trains'} the FC head.")
    paper = a.paper_stanza()
    if paper is not None and paper is not b and registry.owns(b.strategy, "fc_workers"):
        lines.append(f"Against the paper's Stanza ({html.escape(describe(paper))}, {paper.throughput:,.0f} samples/s): "
                     f"{b.throughput / paper.throughput:.2f}x.")
    if chosen is not None and describe(chosen) != describe(b):
        lines.append(f"Your choice, {html.escape(describe(chosen))}: {chosen.throughput:,.0f} samples/s "
                     f"({chosen.throughput / b.throughput:.0%} of the recommended).")
    lines.append(f"<small>{html.escape(cluster_text(b))}. Model assumptions: docs/performance-model.md.</small>")
    return "<br>".join(lines)


def _circle(n: int, r: float = 1.0) -> list[tuple[float, float]]:
    if n == 1:
        return [(0.0, 0.0)]
    return [(r * math.cos(math.pi / 2 - 2 * math.pi * i / n), r * math.sin(math.pi / 2 - 2 * math.pi * i / n))
            for i in range(n)]


def _column(n: int, x: float, height: float) -> list[tuple[float, float]]:
    """n points top to bottom at x, centred on y = 0, `height` apart end to end."""
    if n == 1:
        return [(x, 0.0)]
    return [(x, height / 2 - height * i / (n - 1)) for i in range(n)]


def _ring_trace(pts, name: str, color: str, nbytes: int, loop_x: float | None = None) -> go.Scatter:
    """A closed ring through pts; with loop_x, a column's ring closes around its outside."""
    xs, ys = [x for x, _ in pts], [y for _, y in pts]
    if loop_x is not None:
        xs += [loop_x, loop_x]
        ys += [ys[-1], ys[0]]
    xs.append(xs[0])
    ys.append(ys[0])
    return go.Scatter(x=xs, y=ys, mode="lines", name=name, line=dict(color=color, width=2, dash="dot"),
                      customdata=[nbytes] * len(xs), hovertemplate=f"{name}<br>%{{customdata:,}} B sent per member"
                                                                   "<extra></extra>")


def _legend_text(fig: go.Figure, lines: list[str]) -> None:
    fig.add_annotation(text="<br>".join(lines), showarrow=False, xref="paper", yref="paper", x=1.0, y=0.5,
                       xanchor="left", yanchor="middle", align="left", font=dict(size=12))


def assignment_diagram(p: Prediction) -> go.Figure:
    """Who sends what to whom in one step of `p` (a Prediction with ranks): nodes as markers
    (hover: the rank's bytes), CONV->FC arrows for activations and labels with activation
    gradients coming back, dotted rings for allreduce, grey lines for PS push/pull."""
    if p.ranks is None:
        raise ValueError("assignment_diagram needs a Prediction made with with_ranks=True")
    fig = go.Figure()
    ranks = p.ranks
    exchange = registry.get(p.strategy).exchange  # what the record says its ranks exchange, and how
    if exchange == "layer_separation":
        topo = Topology(p.strategy, p.nodes, p.fc_workers, 0)
        nc = topo.data_workers
        height = max(1.0, 0.5 * (nc - 1))  # half a unit between CONV workers
        pos = _column(nc, 0.0, height) + _column(p.fc_workers, 3.0, height * (p.fc_workers - 1) / max(nc - 1, 1))
        conv_ar = ranks[0]["sent"].get("conv_grads", 0)
        fc_ar = ranks[nc]["sent"].get("fc_grads", 0)
        if nc > 1:
            fig.add_trace(_ring_trace(pos[:nc], "CONV gradient allreduce (ring)", CATEGORY_COLORS["conv_grads"], conv_ar,
                                      loop_x=-0.6))
        if p.fc_workers > 1:
            fig.add_trace(_ring_trace(pos[nc:], "FC gradient allreduce (ring)", CATEGORY_COLORS["fc_grads"], fc_ar,
                                      loop_x=3.6))
        mids = []
        for i in range(nc):
            (x0, y0), (x1, y1) = pos[i], pos[topo.fc_worker_of(i)]
            d = 0.06
            for (ax, ay, tx, ty), color in (((x0, y0 + d, x1, y1 + d), CATEGORY_COLORS["activations"]),
                                            ((x1, y1 - d, x0, y0 - d), CATEGORY_COLORS["activation_grads"])):
                fig.add_annotation(x=tx, y=ty, ax=ax, ay=ay, xref="x", yref="y", axref="x", ayref="y", text="",
                                   showarrow=True, arrowhead=2, arrowsize=1.2, arrowwidth=1.5, arrowcolor=color,
                                   standoff=12, startstandoff=12)
            mids.append(((x0 + x1) / 2, (y0 + y1) / 2))
        fig.add_scatter(x=[m[0] for m in mids], y=[m[1] for m in mids], mode="markers",
                        name="activations + labels (to FC) / activation gradients (back)",
                        marker=dict(size=8, color=CATEGORY_COLORS["activations"], symbol="diamond"),
                        customdata=[[ranks[i]["sent"].get("activations", 0), ranks[i]["sent"].get("labels", 0),
                                     ranks[i]["recv"].get("activation_grads", 0), i, topo.fc_worker_of(i)]
                                    for i in range(nc)],
                        hovertemplate="rank %{customdata[3]} -> rank %{customdata[4]}: activations %{customdata[0]:,} B"
                                      " + labels %{customdata[1]:,} B<br>back: activation gradients %{customdata[2]:,} B"
                                      "<extra></extra>")
        _legend_text(fig, [f"per step, CONV worker 0:",
                           f"&#8594; activations {si(ranks[0]['sent'].get('activations', 0), 'B')}"
                           f" + labels {si(ranks[0]['sent'].get('labels', 0), 'B')}",
                           f"&#8592; activation gradients {si(ranks[0]['recv'].get('activation_grads', 0), 'B')}",
                           f"CONV allreduce {si(conv_ar, 'B')} sent per member",
                           f"FC allreduce {si(fc_ar, 'B')} sent per member" if p.fc_workers > 1
                           else "no FC allreduce (one FC worker)",
                           "FC parameters never cross the network"])
        title = (f"Stanza, k = {p.fc_workers}: {nc} CONV workers (circles) send boundary activations to "
                 f"{p.fc_workers} FC worker{'s' if p.fc_workers > 1 else ''} (squares)")
    else:
        pos = _circle(p.nodes)
        if exchange == "allreduce":
            g = ranks[0]["sent"].get("grads", 0)
            fig.add_trace(_ring_trace(pos, "gradient allreduce (ring, whole model)", CATEGORY_COLORS["grads"], g))
            _legend_text(fig, ["per step, every worker:", f"allreduce of all gradients: {si(g, 'B')} sent"])
            title = f"{p.label}: {p.nodes} workers allreduce the whole model's gradients in a ring"
        elif exchange == "parameter_server":
            xs, ys = [], []
            for i in range(p.nodes):
                for j in range(i + 1, p.nodes):
                    xs += [pos[i][0], pos[j][0], None]
                    ys += [pos[i][1], pos[j][1], None]
            fig.add_scatter(x=xs, y=ys, mode="lines", name="push gradient slices / pull parameter shards",
                            line=dict(color=CATEGORY_COLORS["params"], width=1), opacity=0.6, hoverinfo="skip")
            r0 = ranks[0]
            _legend_text(fig, ["per step, worker 0 (holds shard 0):",
                               f"pushes gradients {si(r0['sent'].get('grads', 0), 'B')}",
                               f"pulls parameters {si(r0['recv'].get('params', 0), 'B')}",
                               f"serves its shard: {si(r0['sent'].get('params', 0), 'B')} out"])
            title = (f"Parameter server: each of {p.nodes} workers pushes gradients to and pulls parameters from "
                     f"the {p.ps_shards} shards (one per rank)")
        else:  # a strategy whose record states no exchange: its ranks and their bytes, no guessed edges
            r0 = ranks[0]
            _legend_text(fig, [f"per step, rank 0 ({ROLE_LABELS.get(r0['role'], r0['role'])}):",
                               f"sends {si(sum(r0['sent'].values()), 'B')}",
                               f"receives {si(sum(r0['recv'].values()), 'B')}"])
            title = f"{p.label}: {p.nodes} ranks (hover a rank for its bytes per step)"
    fig.add_scatter(x=[x for x, _ in pos], y=[y for _, y in pos], mode="markers+text", name="nodes",
                    text=[("C" if r["role"] == "conv_worker" else "F" if r["role"] == "fc_worker" else "W") + str(r["rank"])
                          for r in ranks], textposition="middle center",
                    textfont=dict(color="white", size=10 if p.nodes <= 16 else 7),
                    marker=dict(size=30 if p.nodes <= 16 else 18, color=[ROLE_COLORS.get(r["role"], "#999999") for r in ranks],
                                symbol=[ROLE_SYMBOLS.get(r["role"], "circle") for r in ranks]),
                    customdata=[[r["rank"], ROLE_LABELS.get(r["role"], r["role"]), sum(r["sent"].values()),
                                 sum(r["recv"].values())] for r in ranks],
                    hovertemplate="rank %{customdata[0]} (%{customdata[1]})<br>sends %{customdata[2]:,} B, "
                                  "receives %{customdata[3]:,} B per step<extra></extra>")
    fig.update_xaxes(visible=False, scaleanchor="y")
    fig.update_yaxes(visible=False)
    fig = finish(fig, title, 460 if p.nodes <= 12 else min(460 + 25 * (p.nodes - 12), 1200))
    return fig.update_layout(margin=dict(r=330, t=60, b=70),
                             legend=dict(orientation="h", x=0, xanchor="left", y=-0.02, yanchor="top"))

# ---------------------------------------------------------------------------------------------
# Node assignment (notebook 04): throughput against k


def assignment_measured(results: dict[str, Any]) -> go.Figure:
    """Measured and predicted samples/s of stanza against k on the emulated cluster; the
    optimiser's pick and the measured best marked."""
    m = results["measured"]
    title = "Emulated cluster: stanza throughput against the number of FC workers k"
    if m is None or m.get("unavailable") or not m.get("by_k"):
        return note_figure(f"not measured: {(m or {}).get('unavailable') or 'no measured runs'}", title)
    ks = sorted(int(k) for k in m["by_k"])
    meas = [m["by_k"][str(k)]["measured"] for k in ks]
    pred = [m["by_k"][str(k)]["predicted"] for k in ks]
    fig = go.Figure()
    fig.add_scatter(x=ks, y=meas, mode="lines+markers", name="measured", line_color=STRATEGY_COLORS["stanza"],
                    hovertemplate="k=%{x}: %{y:.2f} samples/s measured<extra></extra>")
    fig.add_scatter(x=ks, y=pred, mode="lines+markers", name="predicted (this machine's profile)",
                    line=dict(color=STRATEGY_COLORS["stanza"], dash="dash"), marker_symbol="circle-open",
                    hovertemplate="k=%{x}: %{y:.2f} samples/s predicted<extra></extra>")
    k_opt, k_best = m["optimiser_k"], m["measured_best_k"]
    fig.add_scatter(x=[k_opt], y=[m["by_k"][str(k_opt)]["predicted"]], mode="markers", name=f"optimiser: k={k_opt}",
                    marker=dict(symbol="star", size=16, color="black"))
    fig.add_scatter(x=[k_best], y=[m["by_k"][str(k_best)]["measured"]], mode="markers",
                    name=f"measured best: k={k_best}", marker=dict(symbol="diamond-open", size=18, color="black",
                                                                   line_width=2))
    verdict = ("the optimiser's k is the measured best" if m["optimiser_is_measured_best"] else
               f"the optimiser's k is {m['optimiser_shortfall']:.1%} below the measured best")
    fig.add_annotation(text=verdict, xref="paper", yref="paper", x=0.01, y=0.02, showarrow=False, xanchor="left")
    fig.update_xaxes(title_text="FC workers k", dtick=1)
    fig.update_yaxes(title_text="samples/s", rangemode="tozero")
    return finish(fig, f"{title} ({m['nodes']} nodes, {m['link_mbit']:.0f} Mbit/s = {m['target_gbps']:g} Gb/s "
                       f"on {m['target_device']})", 460)


def assignment_paper_scale(results: dict[str, Any]) -> go.Figure:
    """Modelled samples/s against k at the paper's scale, one panel per model, one line per
    bandwidth, ddp and ps as dotted levels, best_assignment's k starred."""
    ps_ = results["paper_scale"]
    models = ps_["models"]
    fig = make_subplots(rows=1, cols=len(models), subplot_titles=[f"{m}, {ps_['nodes']} nodes" for m in models],
                        horizontal_spacing=0.08)
    dashes = ["solid", "dash", "dot", "dashdot"]
    for col, model in enumerate(models, start=1):
        for gi, (g, d) in enumerate(sorted(ps_["results"][model].items(), key=lambda kv: float(kv[0]))):
            ks = sorted(int(k) for k in d["by_k"])
            fig.add_scatter(x=ks, y=[d["by_k"][str(k)] for k in ks], mode="lines", name=f"stanza, {g} Gb/s",
                            legendgroup=g, showlegend=(col == 1), line=dict(color=STRATEGY_COLORS["stanza"],
                                                                            dash=dashes[gi % len(dashes)]),
                            hovertemplate=f"{g} Gb/s, k=%{{x}}: %{{y:.0f}} samples/s<extra></extra>", row=1, col=col)
            for s in [name for name in registry.baselines() if name in d]:  # the baselines
                fig.add_scatter(x=[ks[0], ks[-1]], y=[d[s]] * 2, mode="lines", name=f"{s}, {g} Gb/s",
                                legendgroup=g, showlegend=(col == 1),
                                line=dict(color=STRATEGY_COLORS[s], dash=dashes[gi % len(dashes)], width=1),
                                hovertemplate=f"{s}, {g} Gb/s: %{{y:.0f}} samples/s<extra></extra>", row=1, col=col)
            fig.add_scatter(x=[d["best_k"]], y=[d["by_k"][str(d["best_k"])]], mode="markers", showlegend=False,
                            marker=dict(symbol="star", size=14, color="black"),
                            hovertemplate=f"best k at {g} Gb/s: %{{x}}<extra></extra>", row=1, col=col)
        fig.update_xaxes(title_text="FC workers k", type="log", row=1, col=col)
        fig.update_yaxes(type="log", title_text="samples/s" if col == 1 else None, row=1, col=col)
    return finish(fig, f"Modelled at the paper's scale ({ps_['device']} table, {ps_['image_size']}x{ps_['image_size']},"
                       f" {ps_['batch_per_worker']} samples per CONV worker); star: best k", 480)


def assignment_figures(results: dict[str, Any]) -> dict[str, go.Figure]:
    """The figures of notebook 04 by key: measured, paper_scale."""
    return mark_modelled_only({"replayed": replayed_throughput(results.get("replayed"), "Paper regime, stanza at every k"),
                               "measured": assignment_measured(results), "paper_scale": assignment_paper_scale(results)},
                              results.get("modelled_only"))
