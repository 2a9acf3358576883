"""effdepth: effective depth of a transformer's residual stream."""

__version__ = "0.1.0"
