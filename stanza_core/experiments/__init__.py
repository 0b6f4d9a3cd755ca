"""Experiment logic behind the notebooks: one module per experiment family (measured runs,
model predictions, results dicts), so notebook cells hold parameters and calls only."""
