"""Percentile bootstrap over the independent units: sequences, or pairs of them under token-mode cka
(docs/method.md#uncertainty)."""

from __future__ import annotations

import warnings

import numpy as np

from .metrics import has_cosine_summaries, related_measures, scalar_metrics, similarity_matrix, update_summary
from .similarity import decay_profile, deff
from .statistics import UnitStatistics

# Resamples evaluated per vectorised call: bounds memory at (chunk, M, M) per key.
_CHUNK = 250

#: The per-layer (and matrix) summaries that get intervals besides the scalars and the profile.
MEASURE_NAMES = (
    "block_influence",
    "angular_distance_adjacent",
    "angular_distance",
    "relative_contribution",
    "update_state_cosine",
    "update_cosine",
)


def bootstrap_weights(units: int, resamples: int, seed: int) -> np.ndarray:
    """Resampling counts, shape ``(resamples, units)``: each row sums to ``units``.

    >>> bootstrap_weights(3, 2, seed=0).sum(axis=1).tolist()
    [3, 3]
    """
    rng = np.random.default_rng(seed)
    return rng.multinomial(units, np.full(units, 1.0 / units), size=resamples)


def resample_measures(totals: dict, include_embedding: bool) -> dict:
    """The related-work measures and update summaries of (resampled) totals, by :data:`MEASURE_NAMES`.

    ``angular_distance_adjacent[l-1]`` is the angular distance between S_{l-1}
    and S_l (the diagonal above the main one).

    >>> from effdepth.numerics.accumulate import token_set_statistics
    >>> import torch
    >>> m = resample_measures(token_set_statistics(torch.randn(4, 6, 8, dtype=torch.float64)), False)
    >>> m["block_influence"].shape, m["angular_distance"].shape, m["update_cosine"].shape
    ((3,), (4, 4), (3, 3))
    """
    related = related_measures(totals)
    angles = related["angular_distance"]
    return {
        "block_influence": related["block_influence"],
        "angular_distance_adjacent": np.diagonal(angles, offset=1, axis1=-2, axis2=-1),
        "angular_distance": angles,
        "relative_contribution": related["relative_contribution"],
        "update_state_cosine": related["update_state_cosine"],
        "update_cosine": update_summary(totals, include_embedding)["update_cosine"],
    }


def bootstrap_intervals(
    stats: UnitStatistics,
    *,
    similarity: str,
    include_embedding: bool,
    resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    weights: np.ndarray | None = None,
    label: str = "",
    deff_only: bool = False,
) -> dict | None:
    """Percentile intervals of every scalar metric, the decay profile, the similarity matrix,
    the related-work measures and the update summaries.
    ``deff_only``: D_eff and the decay profile alone, from statistics that may
    carry nothing else (the surrogate streams).

    Returns ``{"level", "resamples", "units", "nan_resamples", name: [lo, hi],
    ..., "profile": [[lo...], [hi...]], "similarity": [lo matrix, hi matrix],
    "block_influence": [[lo...], [hi...]], "angular_distance": [lo matrix,
    hi matrix], ...}`` (:data:`MEASURE_NAMES`), or ``None`` when there is
    nothing to resample (``resamples == 0`` or fewer than two units).

    A resample with a NaN among its numbers (e.g. totals with nothing in them)
    is left out of every percentile; ``nan_resamples`` counts them and a
    warning (naming ``label``) says so.

    Pass the same ``weights`` to several views to resample the same sequences
    for each of them.

    >>> from effdepth.numerics.accumulate import token_set_statistics
    >>> import torch
    >>> units = [token_set_statistics(torch.randn(4, 6, 8, dtype=torch.float64)) for _ in range(5)]
    >>> ci = bootstrap_intervals(UnitStatistics.from_units(units), similarity="frobenius",
    ...                          include_embedding=False, resamples=50)
    >>> ci["deff"][0] <= ci["deff"][1], ci["nan_resamples"], len(ci["block_influence"][0])
    (True, 0, 3)
    """
    if resamples <= 0 or stats.units < 2:
        return None
    if weights is None:
        weights = bootstrap_weights(stats.units, resamples, seed)
    draws: dict = {}
    for start in range(0, len(weights), _CHUNK):
        totals = stats.weighted_totals(weights[start : start + _CHUNK])
        sim = similarity_matrix(totals, similarity, include_embedding)
        scalars = {"deff": deff(sim)} if deff_only else scalar_metrics(totals, similarity, include_embedding)
        for name, value in scalars.items():
            draws.setdefault(name, []).append(np.asarray(value))
        draws.setdefault("profile", []).append(decay_profile(sim))
        if not deff_only:
            draws.setdefault("similarity", []).append(sim)
            if has_cosine_summaries(totals):
                for name, value in resample_measures(totals, include_embedding).items():
                    draws.setdefault(name, []).append(np.asarray(value))
    draws = {name: np.concatenate(chunks) for name, chunks in draws.items()}
    failed = np.zeros(len(weights), dtype=bool)
    for value in draws.values():
        failed |= np.isnan(value.reshape(len(weights), -1)).any(axis=1)
    alpha = (1.0 - level) / 2.0
    q = [100 * alpha, 100 * (1 - alpha)]
    out = {"level": level, "resamples": int(len(weights)), "units": stats.units, "nan_resamples": int(failed.sum())}
    for name, value in draws.items():
        lo, hi = _percentiles(value[~failed], q, value.shape[1:])
        out[name] = [lo.tolist(), hi.tolist()] if value.ndim > 1 else [float(lo), float(hi)]
    if out["nan_resamples"]:
        where = f" of {label}" if label else ""
        warnings.warn(
            f"{out['nan_resamples']} of {len(weights)} bootstrap resamples{where} gave NaN and were left out of the "
            "percentiles (counted in ci['nan_resamples']); the interval rests on the others",
            stacklevel=2,
        )
    return out


def _percentiles(values: np.ndarray, q: list, shape: tuple) -> tuple:
    """Percentiles over the resample axis of the resamples kept (NaN when none is)."""
    if not len(values):
        return np.full(shape, np.nan), np.full(shape, np.nan)
    with np.errstate(invalid="ignore"):  # an infinite ratio (a zero state) has no finite bound
        return np.percentile(values, q, axis=0)
