"""Draws under the estimate and every resample -> the point estimate and percentile intervals.

Row 0 of every array is the estimate itself (all unit weights 1), the rows after it the bootstrap
resamples (:func:`~effdepth.numerics.hsic_resample.resample_weights`).
"""

from __future__ import annotations

import warnings

import numpy as np

#: The level of every percentile interval.
LEVEL = 0.95


def percentile_interval(values, level: float = LEVEL) -> list | None:
    """``[lo, hi]`` percentile interval of the finite resampled values (rounded to 1e-6); None with fewer than two.

    >>> percentile_interval(np.array([1.0, 2.0, np.nan, 3.0]))
    [1.05, 2.95]
    """
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    if len(finite) < 2:
        return None
    lo, hi = np.percentile(finite, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return [round(float(lo), 6), round(float(hi), 6)]


def split_draws(draws: dict) -> tuple:
    """``(point, ci)``: row 0 of every array (nested dicts of arrays too), and percentile intervals over
    the other rows (``None`` without resamples). Each quantity's interval leaves out the resamples where
    it is not finite; ``nan_resamples`` counts those of D_eff (a warning says so).

    >>> point, ci = split_draws({"deff": np.array([1.5, 1.4, 1.6, 1.5])})
    >>> float(point["deff"]), ci["deff"], ci["nan_resamples"]
    (1.5, [1.405, 1.595], 0)
    """
    flat = _flatten(draws)
    point = _unflatten({k: v[0] for k, v in flat.items()})
    rows = next(iter(flat.values())).shape[0] - 1
    if rows < 2:
        return point, None
    q = [100 * (1 - LEVEL) / 2, 100 * (1 + LEVEL) / 2]
    failed = int((~np.isfinite(flat["deff"][1:])).sum())
    ci: dict = {"level": LEVEL, "resamples": rows, "nan_resamples": failed}
    for name, value in flat.items():
        if (
            name.startswith("reference_profiles.")
            or name == "update_similarity"
            or (name.startswith("sensitivity.") and name.endswith(".reference"))
        ):
            continue
        draws_ = value[1:]
        finite = np.isfinite(draws_.reshape(rows, -1)).all(axis=1)
        if finite.any():
            lo, hi = np.percentile(draws_[finite], q, axis=0)
        else:
            lo = hi = np.full(value.shape[1:], np.nan)
        ci[name.split(".", 1)[1] if name.startswith("related.") else name] = (
            [lo.tolist(), hi.tolist()] if np.ndim(lo) else [float(lo), float(hi)]
        )
    if failed:
        warnings.warn(
            f"{failed} of {rows} bootstrap resamples gave no D_eff (NaN) and were left out of its "
            "percentiles (counted in ci['nan_resamples'])",
            stacklevel=3,
        )
    return point, ci


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = np.asarray(v, dtype=np.float64)
    return out


def _unflatten(flat: dict) -> dict:
    out: dict = {}
    for k, v in flat.items():
        head, _, tail = k.partition(".")
        if tail and head == "reference_profiles":
            out.setdefault(head, {})[tail] = v
        elif tail and head == "sensitivity":
            variant, _, quantity = tail.rpartition(".")
            out.setdefault(head, {}).setdefault(variant, {})[quantity] = v
        else:
            out[k] = v
    return out
