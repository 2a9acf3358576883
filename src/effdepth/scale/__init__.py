"""Many measurements: sweeps over suites, trajectories over checkpoints, executors (local, Ray), hub
revisions, fetching for offline clusters, and one measurement over torchrun ranks."""
