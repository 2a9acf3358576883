"""The studies built on a measurement, one module or folder each: the residual-carry intervention and
recomposition, the trained carry experiment, the random-weight null, the pruning check and the claims check."""
