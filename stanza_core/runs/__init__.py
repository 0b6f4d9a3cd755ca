"""The run pipeline, one package: what a run is (runconfig.RunConfig, one configuration at one
link rate; spec.MeasureSpec, a grid of them), its plan resolved once (plan: D, link rates,
batches per role), running it on the emulated cluster (run.run_config, the one primitive; run.measure
a grid), the runs cache (cache.Cache.run_or_cached, the one "run or take from the cache") and the
store of the full grid (store), typed results (measurement.Measurement), the timing rounds of
real-compute runs (compute_rounds), the replay benchmarks' loop (replay_bench) and the replayed
paper-regime parameters the notebooks share (replayed). The notebooks' own logic is
stanza_core.experiments, which calls it."""
