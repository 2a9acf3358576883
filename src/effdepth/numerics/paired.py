"""Two results on the same passages -> paired differences of D_eff with intervals (docs/method.md#comparing-two-results).

Both draw sets come from :func:`~effdepth.numerics.analysis.deff_draws` with the same bootstrap units and
weights: resample r of A and resample r of B drew the same passages, so ``B_r - A_r`` is one draw of the
difference, and its percentile interval is narrower than two independent intervals suggest (A and B err
together on the same passages). Two draw sets of one measurement differ by exactly 0, every resample.
"""

from __future__ import annotations

import numpy as np

from effdepth.errors import EffdepthError
from effdepth.numerics.confounds import subsample_curve
from effdepth.numerics.intervals import LEVEL, percentile_interval
from effdepth.numerics.references import headline, reference_fl

#: What is differenced: D_eff, D_eff / F_L and the gap to F_L in percent (metrics.py's ``gap_pct``).
QUANTITIES = ("deff", "ratio", "gap_pct")


def paired_differences(a: dict, b: dict, level: float = LEVEL) -> dict:
    """B against A, for every similarity and view both draw sets hold (in A's order):
    ``{"differences": {similarity: {view: {quantity: difference}}}, "sample_size": {similarity: curve}}``.

    Each quantity of :data:`QUANTITIES` (D_eff/F_L and the gap against each one's own F_L: A and B may
    differ in depth) is a :func:`difference`. ``sample_size``: for the default view, the D_eff difference
    on the sample-size curve's subsamples (the same subsets of passages for both) beside the full one
    (:func:`~effdepth.numerics.confounds.subsample_curve`): whether more passages would resolve it.

    >>> from effdepth.numerics.analysis import AnalysisPlan, deff_draws
    >>> states = np.cumsum(np.random.default_rng(0).normal(size=(5, 64, 8)), axis=0)
    >>> plan = AnalysisPlan(bootstrap=50, calibrated=False)
    >>> a = deff_draws({"default": states}, plan)
    >>> same = paired_differences(a, a)["differences"]["cka"]["default"]["deff"]
    >>> same["estimate"], same["interval"], same["resolved"]
    (0.0, [0.0, 0.0], False)
    >>> b = deff_draws({"default": states[[0, 1, 1, 1, 1]]}, plan)   # B's layers 2..4 repeat layer 1: D_eff 1
    >>> d = paired_differences(a, b)["differences"]["cka"]["default"]["deff"]
    >>> d["b"], d["estimate"] < 0, d["resolved"]
    (1.0, True, True)
    """
    check_paired(a, b)
    fl = {"a": reference_fl(a["states"]), "b": reference_fl(b["states"])}
    out: dict = {}
    for sim, views in a["deff"].items():
        for view in (v for v in views if v in b["deff"].get(sim, {})):
            qa, qb = (_quantities(d["deff"][sim][view], fl[k]) for k, d in (("a", a), ("b", b)))
            out.setdefault(sim, {})[view] = {q: difference(qa[q], qb[q], level) for q in QUANTITIES}
    if not out:
        raise EffdepthError(
            "the two results share no similarity and view to compare; analyse both with a common --similarity "
            "and --views"
        )
    sample_size = {}
    for sim, rows in a["subsamples"].items():
        if sim in b["subsamples"] and "default" in out.get(sim, {}):
            full = out[sim]["default"]["deff"]
            rows = np.asarray(b["subsamples"][sim]) - np.asarray(rows)
            sample_size[sim] = subsample_curve(
                a["subsample_draws"], rows, full["estimate"], full["interval"], a["units"].samples
            )
    return {"differences": out, "sample_size": sample_size}


def difference(a, b, level: float = LEVEL) -> dict:
    """One paired difference from A's and B's draws ``(1 + R,)`` (row 0 the estimates): ``estimate``
    ``B_0 - A_0``, ``interval`` the percentile interval of ``B_r - A_r`` (None without resamples), ``a``
    and ``b`` the two estimates, ``resolved`` whether the interval excludes 0 (None without one).

    >>> d = difference(np.array([1.0, 1.1, 0.9, 1.0]), np.array([1.5, 1.5, 1.4, 1.5]))
    >>> d["estimate"], d["interval"], d["resolved"]
    (0.5, [0.405, 0.5], True)
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    delta = b - a
    interval = percentile_interval(delta[1:], level)
    return {
        "estimate": float(delta[0]),
        "interval": interval,
        "a": float(a[0]),
        "b": float(b[0]),
        "resolved": None if interval is None else bool(interval[0] > 0 or interval[1] < 0),
    }


def check_paired(a: dict, b: dict) -> None:
    """A one-line error unless both draw sets were made on the same bootstrap units with the same weights and
    subsamples (the same passages, ``--bootstrap``, ``--bootstrap-units`` and ``--seed``)."""
    same = (
        np.array_equal(a["units"].bounds, b["units"].bounds)
        and np.array_equal(a["weights"], b["weights"])
        and np.array_equal(a["subsample_draws"].weights, b["subsample_draws"].weights)
    )
    if not same:
        raise EffdepthError(
            f"the two results are not resampled alike (passages {a['units'].samples} and {b['units'].samples}, "
            f"units {a['units'].count} and {b['units'].count}, resamples {len(a['weights']) - 1} and "
            f"{len(b['weights']) - 1}, or another seed): a paired difference needs the same passages, --bootstrap, "
            "--bootstrap-units and --seed for both"
        )


def _quantities(deff: np.ndarray, fl: float) -> dict:
    """D_eff draws -> every quantity of :data:`QUANTITIES` (their ratio and gap to F_L)."""
    deff = np.asarray(deff, dtype=np.float64)
    return {"deff": deff, **headline(deff, fl)}
