"""From a view's per-sequence statistics to every number it reports, as plain data.

This is the last numeric step: :mod:`effdepth.result` only stores what it
returns. Every view of one measurement resamples the same sequences, so
their intervals are comparable.
"""

from __future__ import annotations

import numpy as np

from .bootstrap import bootstrap_intervals, bootstrap_weights
from .metrics import full_metrics
from .statistics import UnitStatistics

#: The totals kept in a result, so its numbers can be recomputed from it.
KEPT_TOTALS = ("n", "gram_states", "gram_increments", "update_state_dot")


def view_summary(stats: UnitStatistics, *, similarity: str, include_embedding: bool, bootstrap: int = 0, seed: int = 0,
                 weights: np.ndarray | None = None) -> dict:
    """Every number of one view (the fields of :class:`effdepth.result.ViewResult` but its name).

    >>> import torch
    >>> from effdepth.numerics.accumulate import token_set_statistics
    >>> units = UnitStatistics.from_units([token_set_statistics(torch.randn(4, 6, 8, dtype=torch.float64))])
    >>> s = view_summary(units, similarity="frobenius", include_embedding=False)
    >>> s["num_states"], s["reference"], s["ci"]
    (3, 1.5, None)
    """
    totals = stats.total()
    m = full_metrics(totals, similarity, include_embedding)
    ci = bootstrap_intervals(
        stats, similarity=similarity, include_embedding=include_embedding, resamples=bootstrap, seed=seed, weights=weights
    )
    return {
        "deff": float(m["deff"]),
        "reference": float(m["reference"]),
        "ratio": float(m["ratio"]),
        "gap_pct": float(m["gap_pct"]),
        "num_states": int(m["similarity"].shape[-1]),
        "tokens": int(totals["n"]),
        "sequences": stats.units,
        "profile": as_list(m["profile"]),
        "similarity": as_list(m["similarity"]),
        "references": {k: float(m[f"reference_{k}"]) for k in ("init", "size", "matched")},
        "attribution": {k: float(m[k]) for k in ("initial_state", "size_imbalance", "correlated_updates")},
        "update_cosine": as_list(m["update_cosine"]),
        "update_state_cosine": as_list(m["update_state_cosine"]),
        "update_energy": as_list(m["update_energy"]),
        "related": {k: as_list(v) for k, v in m["related"].items()},
        "reference_profiles": {k: as_list(v) for k, v in m["reference_profiles"].items()},
        "ci": ci,
        "statistics": {k: as_list(totals[k]) for k in KEPT_TOTALS},
    }


def view_summaries(accumulator, *, similarity: str, include_embedding: bool, bootstrap: int, seed: int) -> dict:
    """``{view name: summary}`` for every view of a :class:`~effdepth.numerics.streams.ViewAccumulator`.

    >>> import torch
    >>> from effdepth.numerics.streams import ViewAccumulator
    >>> acc = ViewAccumulator(["default", "drop-pos0"]); acc.update(torch.randn(3, 2, 5, 4))
    >>> sorted(view_summaries(acc, similarity="frobenius", include_embedding=False, bootstrap=0, seed=0))
    ['default', 'drop-pos0']
    """
    out = {}
    weights = None
    for spec in accumulator.views:
        stats = accumulator.unit_statistics(spec)
        if weights is None and bootstrap > 0 and stats.units >= 2:
            weights = bootstrap_weights(stats.units, bootstrap, seed)
        out[spec.name] = view_summary(
            stats, similarity=similarity, include_embedding=include_embedding, bootstrap=bootstrap, seed=seed, weights=weights
        )
    return out


def as_list(x):
    """A float or nested list of floats, for JSON.

    >>> as_list(np.eye(2)), as_list(np.float64(2))
    ([[1.0, 0.0], [0.0, 1.0]], 2.0)
    """
    a = np.asarray(x, dtype=np.float64)
    return a.tolist() if a.ndim else float(a)
