"""Plotly figure builders: pure functions, data in, `plotly.graph_objects.Figure` out.

Nothing here runs models, reads files or writes files: notebooks and the report pass in data
(Profiles, metrics dicts, results JSON) and save the figures with `stanza_core.nbtools`.
One module per experiment family; shared colours and layout helpers live in `_style`:

  anatomy   per-layer parameters/FLOPs, CONV vs FC shares, part timings (notebook 01)
  throughput  measured and modelled samples/s against cluster size, speedups (notebook 03)

A new family (traffic, throughput, node assignment, bandwidth, convergence, ...) goes in its own
module here, uses `_style.PART_COLORS` / `_style.STRATEGY_COLORS` so that one colour means one
thing in every figure, and is re-exported below.
"""
from .anatomy import anatomy_figures, anatomy_table, layer_profile, part_shares, part_times
from .throughput import measured_throughput, modelled_throughput, stanza_speedups, throughput_figures

__all__ = ["anatomy_figures", "anatomy_table", "layer_profile", "part_shares", "part_times"]
__all__ += ["measured_throughput", "modelled_throughput", "stanza_speedups", "throughput_figures"]
