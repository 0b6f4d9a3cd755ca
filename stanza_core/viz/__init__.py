"""Plotly figure builders: pure functions, data in, `plotly.graph_objects.Figure` out.

Nothing here runs models, reads files or writes files: notebooks and the report pass in data
(Profiles, metrics dicts, results JSON) and save the figures with `stanza_core.nbtools`.
One module per experiment family; shared colours and layout helpers live in `_style`:

  anatomy   per-layer parameters/FLOPs, CONV vs FC shares, part timings (notebook 01)
  throughput  samples/s against cluster size and speedups (03)
  sweep     samples/s and speedups against bandwidth, best assignment over a grid (05)
  paper_ps  the paper's parameter server made explicit: step decomposition, assumption sweep, region (05)
  traffic   bytes per step per node by category and role, PS/Stanza ratio (02)
  convergence  loss and accuracy against steps and time, distance from local (06)
  assignment  samples/s against k (04); the node-assignment explorer's views (08, stanza_core.widgets)
  validation  the performance model's predictions against measured runs (07)
  today_gpus  stanza on a measured H200 profile: modelled, the optimiser's pick, replayed (09)
  timeline  one measured step per rank: compute and network lanes (--timeline; tutorial T4)

A new family (traffic, throughput, node assignment, bandwidth, convergence, ...) goes in its own
module here, uses `_style.PART_COLORS` / `_style.STRATEGY_COLORS` so that one colour means one
thing in every figure, and is re-exported below.
"""
from .anatomy import anatomy_figures, anatomy_table, layer_profile, part_shares, part_times
from .throughput import measured_throughput, modelled_throughput, stanza_speedups, throughput_figures
from .assignment import assignment_figures, assignment_measured, assignment_paper_scale
from .sweep import emulated_throughput, paper_scale_speedups, sweep_figures, sweep_heatmaps
from .validation import error_bars, predicted_vs_measured, term_table, validation_figures

__all__ = ["anatomy_figures", "anatomy_table", "layer_profile", "part_shares", "part_times"]
__all__ += ["measured_throughput", "modelled_throughput", "stanza_speedups", "throughput_figures",
            "assignment_figures", "assignment_measured", "assignment_paper_scale"]
__all__ += ["emulated_throughput", "paper_scale_speedups", "sweep_figures", "sweep_heatmaps"]
__all__ += ["error_bars", "predicted_vs_measured", "term_table", "validation_figures"]
from .convergence import accuracy_curves, convergence_figures, convergence_table, loss_curves, loss_difference
from .traffic import node_bytes, ratio_figure, traffic_bytes, traffic_figures, traffic_table

__all__ += ["accuracy_curves", "convergence_figures", "convergence_table", "loss_curves", "loss_difference",
            "node_bytes", "ratio_figure", "traffic_bytes", "traffic_figures", "traffic_table"]
from .timeline import intervals as timeline_intervals, step_timeline

__all__ += ["timeline_intervals", "step_timeline"]
from .today_gpus import choice_map, modelled_speedups, replayed_runs, today_figures

__all__ += ["choice_map", "modelled_speedups", "replayed_runs", "today_figures"]
from .paper_ps import paper_ps_figures
from .scale import scale_figures

__all__ += ["paper_ps_figures", "scale_figures"]
