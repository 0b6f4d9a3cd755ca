"""Each strategy's performance model, one module per strategy (the registry names it).

A model module provides four functions; perf reads them through the registry and nothing else:

  rank_rows(case: TrafficCase, ranks) -> [{rank, role, sent: {category: bytes}, recv: {...}}]
        what each rank in `ranks` sends and receives per step (the engine's counters equal it)
  summary(case: TrafficCase) -> {bytes_per_step, max_node_sent, max_node_recv}
        the same in O(1) (sweeps over thousands of nodes); called for N >= 2 only
  step_time(case: StepCase) -> (step seconds, the step with free communication, terms)
        one BSP step on the cluster's links (model.py's module docstring has the rules)
  overlap(case: StepCase) -> str
        what the model lets overlap, in words
  candidates(space: Space) -> [Prediction]
        the configurations of this strategy the node-assignment optimiser ranks (optimize.py)
"""
