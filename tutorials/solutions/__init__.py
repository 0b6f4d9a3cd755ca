"""Solutions of the tutorials' exercises, one module per tutorial (t1 ... t5).

Each exercise is a function; tests/tutorials/test_solutions.py checks every one against the
engine or the performance model, so an exercise can never silently go wrong."""
