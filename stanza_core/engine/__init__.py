"""The training engine: the run config (config), the CLI and its run loop (train: parse,
validate, prepare, run, main), what a rank records (metrics, steplog, rank_errors), how a run
fails and exits (step_failures, exit_policy), checkpoints, replayed compute (replay) and
torch.compile of a rank's pieces (compiled). The strategies it runs are stanza_core/strategies,
the process groups stanza_core/comm. `python -m stanza_core.train` is its command line."""
