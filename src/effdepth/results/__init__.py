"""Results: every number a user sees and where it came from (Result, the samples' store on disk, provenance,
saved files, loading, the claims' verdicts). Below the measurement: it runs no model."""
