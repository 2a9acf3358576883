"""Percentile bootstrap over sequences (METHOD section 6)."""

from __future__ import annotations

import numpy as np

from .metrics import scalar_metrics, similarity_matrix
from .similarity import decay_profile
from .statistics import UnitStatistics

# Resamples evaluated per vectorised call: bounds memory at (chunk, M, M) per key.
_CHUNK = 250


def bootstrap_weights(units: int, resamples: int, seed: int) -> np.ndarray:
    """Resampling counts, shape ``(resamples, units)``: each row sums to ``units``.

    >>> bootstrap_weights(3, 2, seed=0).sum(axis=1).tolist()
    [3, 3]
    """
    rng = np.random.default_rng(seed)
    return rng.multinomial(units, np.full(units, 1.0 / units), size=resamples)


def bootstrap_intervals(
    stats: UnitStatistics,
    *,
    similarity: str,
    include_embedding: bool,
    resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    weights: np.ndarray | None = None,
) -> dict | None:
    """Percentile intervals of every scalar metric and of the decay profile.

    Returns ``{"level", "resamples", "units", name: [lo, hi], ..., "profile":
    [[lo...], [hi...]]}``, or ``None`` when there is nothing to resample
    (``resamples == 0`` or fewer than two units).

    Pass the same ``weights`` to several views to resample the same sequences
    for each of them.

    >>> from effdepth.numerics.accumulate import token_set_statistics
    >>> import torch
    >>> units = [token_set_statistics(torch.randn(4, 6, 8, dtype=torch.float64)) for _ in range(5)]
    >>> ci = bootstrap_intervals(UnitStatistics.from_units(units), similarity="frobenius",
    ...                          include_embedding=False, resamples=50)
    >>> ci["deff"][0] <= ci["deff"][1]
    True
    """
    if resamples <= 0 or stats.units < 2:
        return None
    if weights is None:
        weights = bootstrap_weights(stats.units, resamples, seed)
    scalars: dict = {}
    profiles = []
    for start in range(0, len(weights), _CHUNK):
        totals = stats.weighted_totals(weights[start : start + _CHUNK])
        for name, value in scalar_metrics(totals, similarity, include_embedding).items():
            scalars.setdefault(name, []).append(np.asarray(value))
        profiles.append(decay_profile(similarity_matrix(totals, similarity, include_embedding)))
    alpha = (1.0 - level) / 2.0
    q = [100 * alpha, 100 * (1 - alpha)]
    out = {"level": level, "resamples": int(len(weights)), "units": stats.units}
    for name, chunks in scalars.items():
        lo, hi = np.nanpercentile(np.concatenate(chunks), q)
        out[name] = [float(lo), float(hi)]
    lo, hi = np.nanpercentile(np.concatenate(profiles), q, axis=0)
    out["profile"] = [lo.tolist(), hi.tolist()]
    return out
