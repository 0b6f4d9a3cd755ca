"""Run every paper experiment's notebook with papermill and build one report.

    python -m stanza_core.reproduce [--full [--list] [--budget-min M]] [--only NAME[,NAME]] [--out DIR] [--specs DIR]

With --full, the replayed configurations of the experiments' full parameter sets (the full grid,
reproduce.grid) are measured first into the committed store benchmarks/results/full
(runs.store: one JSON file per configuration, valid while MEASUREMENT_VERSION is
unchanged), only those not stored yet, cheapest first; the notebooks then read them. --budget-min
stops starting new ones after M minutes (the notebooks run only once the grid is complete);
--list prints the grid, how much of it is stored and the time to fill the rest, and measures
nothing. Nothing is committed: the new files are left for a person to commit.

Each experiment is one YAML file in `reproductions/` (its stem is the experiment's name and the
folder `<out>/<name>/` its notebook writes into). Schema, every key checked on load (the
structure by the JSON Schema `reproduce/spec.schema.json`, which editors can use too; the rest by
reproduce.spec.load_spec):

    title: Layer anatomy            # one line for the report
    notebook: notebooks/01_x.ipynb  # path from the repository root (the specs folder's parent)
    paper: Motivation, CONV vs FC   # which paper figure / table / section the experiment backs
    requires: [cuda]                # optional; unmet -> skipped, not failed. Known: linux, root,
                                    #   tc (`ip` and `tc` on PATH), cuda (torch sees a GPU)
    timeout_s: 1800                 # optional; per-cell papermill timeout (default: none)
    quick: {models: [alexnet]}      # parameters of `make reproduce`: CPU, seconds to minutes
    full: {models: [alexnet, vgg16]}  # parameters of `make reproduce FULL=1`: the paper's run
    tiny: {models: [tiny_cnn]}      # optional; what tests/notebooks run (default: quick)
    claims:                         # one row each in the report's table
      - claim: FC share of AlexNet parameters    # in words
        kind: counted                            # what the number is (a column of the report):
                                                 #   measured (timed or trained here), replayed
                                                 #   (<device> profile) (the emulated cluster, each
                                                 #   layer's compute waited from that perf device
                                                 #   profile: "replayed (v100 profile)"), modelled
                                                 #   (the performance model, no run), counted
                                                 #   (parameters, FLOPs, bytes counted exactly)
                                                 #   or simulated (<device> row) (the engine's
                                                 #   program timed on SimGrid: "simulated (v100 row)")
        paper: "96.0 %"                          # the paper's number or text, as it states it
        ours: models.alexnet.fc_param_share      # dotted key into results.json (list items: 0, 1..)
        format: "{:.1%}"                         # optional str.format template (default "{}")
        scale: 1.0e-6                            # optional factor applied before format/expect
        figure: 0.96                             # a paper claim: the paper's number for this
                                                 #   configuration (units of ours after scale;
                                                 #   or [low, high]); needs expect and bound_rule
        expect: 0.96                             # the bound: a number or [low, high], or a
                                                 #   mapping {quick: .., full: .., tiny: ..}
                                                 #   (a mode left out: reported, not judged);
                                                 #   only beside a figure or a goal
        tolerance: 0.0005                        # optional absolute tolerance of a number expect
        rel_tolerance: 0.25                      # optional, with expect [low, high] and a value
                                                 #   [low, high]: each end within this share
        bound_rule: half a unit of the last digit  # how the bound was set from the figure
        paper_figure: range_10gbps               # which of the paper's four figures it shows
                                                 #   (tally.PAPER_FIGURES); a figure needs one
        evidence: [bandwidth_sweep, throughput]  # on the one claim that counts that figure: the
                                                 #   experiments that show it
        ps: "S = N colocated, ..."               # the counted claim: the PS its value is under
        sharded: paper_ps.at_100.alexnet.sharded  # optional: the same against the sharded PS
        explained: the rule that chose the PS    # the figure chose the assumption: "explained
                                                 #   under a stated assumption", never "agrees"
        # goal: median error within 10 %        # instead of figure: a target the project set
                                                 #   itself where the paper gives no figure
        deviation: why ours may differ           # optional
        modes: [full]                            # optional: runs that must produce the key
                                                 #   (default: quick and full)
        measured: true                           # optional: the value comes from the emulated
                                                 #   cluster; a run whose results.json says
                                                 #   `modelled_only` (no root or tc, measuring off)
                                                 #   reports it "not measured (modelled only)"
        calibrated: true                         # optional: a modelled value that needs the
                                                 #   measured runs (their calibration): gated
                                                 #   as measured, without being called measured

Parameter sets may name only parameters of the notebook's `parameters` cell; `out_dir` is
always injected (absolute) and must not appear. Every notebook writes `<out_dir>/results.json`.
A claim whose key is missing from a run listed in its `modes` fails the experiment. Claims fall in
three categories, set by their fields (`reproduce.tally`): a paper claim (`figure`) agrees or
differs, a project goal (`goal`) is met or missed, anything else is reported only; a value outside
its bound is a finding, not a crash. An experiment's badge in the report says what its claims say:
differs (a paper claim differs), goal missed, agrees (every paper claim compared agrees), or ran
(nothing compared); failed, skipped or not run when the notebook did not run cleanly. The run
ends with the tally: `paper figures: A of 4 agree, E explained under a stated assumption, D
differ, U not judged` (one line per figure after it, each naming its PS), `paper claims: ...`,
`goals: M of G met, X missed`, `reported only: R`. load_specs refuses a set of YAML files that
does not count each paper figure exactly once (tally.figure_problems).

Writes `<out>/<name>/` (executed notebook, its HTML export, figures, results.json, status.json),
`<out>/index.html` and `<out>/index.json`; every page loads the one `<out>/plotly.min.js` by
relative path (`reproduce.plotlyjs`), and MathJax, require.js and reveal.js from `<out>/_static/`
(`reproduce.offline`), so the folder works offline (no CDN) and carries each library once. `<out>` is marked as ours by a `.stanza-reproduce`
file; an existing non-empty folder without that mark is refused, never overwritten. The exit
status is 0 when no experiment failed, 1 otherwise, 2 for bad input.
"""
from __future__ import annotations

from .run import VenvKernelManager, execute, main, prepare_out, run_experiment
from .spec import MARKER, REPO_ROOT, Spec, SpecError, evaluate_claims, load_spec, load_specs, lookup

__all__ = ["Spec", "SpecError", "load_spec", "load_specs", "lookup", "evaluate_claims", "execute",
           "run_experiment", "prepare_out", "main", "VenvKernelManager", "MARKER", "REPO_ROOT"]
