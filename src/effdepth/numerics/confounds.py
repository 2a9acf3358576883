"""What every passage-mode result says beside D_eff: the passage lengths, the confound controls and the sample size
(docs/method.md#the-first-token-x-length-confound, #sample-size).

The controls' differences to ``default`` are paired (the same unit weights). The sample-size curve's
subsets are extra 0/1 weight rows of the HSIC stack, under which both estimators are exactly those of
the subset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from effdepth.numerics.intervals import percentile_interval

#: Subsample sizes as fractions of the units: N/8, N/4, N/2 (N itself is the full estimate).
SUBSAMPLE_FRACTIONS = (8, 4, 2)
#: Random nested draws per size.
SUBSAMPLE_DRAWS = 20
#: Weight rows of the subsamples at most (every size kept).
SUBSAMPLE_ROWS = len(SUBSAMPLE_FRACTIONS) * SUBSAMPLE_DRAWS
#: A subsample holds at least this many passages (the debiased estimator needs four distinct samples).
MIN_SUBSAMPLE = 4


def length_distribution(lengths, seq_len: int | None = None) -> dict:
    """The passages' token counts: min, quartiles, max, mean, how many distinct, and the share of
    passages that fill ``seq_len`` (``None`` when it is not known).

    >>> d = length_distribution([8, 16, 16, 32], seq_len=16)
    >>> d["min"], d["median"], d["max"], d["share_at_seq_len"], d["equal"]
    (8, 16.0, 32, 0.5, False)
    """
    n = np.asarray(lengths, dtype=np.int64)
    q1, median, q3 = (float(x) for x in np.percentile(n, [25, 50, 75]))
    return {
        "passages": int(len(n)),
        "min": int(n.min()),
        "q1": q1,
        "median": median,
        "q3": q3,
        "max": int(n.max()),
        "mean": round(float(n.mean()), 3),
        "distinct": int(len(np.unique(n))),
        "equal": bool(n.min() == n.max()),
        "seq_len": None if seq_len is None else int(seq_len),
        "share_at_seq_len": None if seq_len is None else round(float((n == int(seq_len)).mean()), 4),
    }


@dataclass(frozen=True)
class Subsamples:
    """Nested random subsets of G units as 0/1 weight rows ``(S, G)``, size by size (the draws of one
    size together); ``sizes`` says, per size, its fraction, units and passages per draw; ``notes`` why
    a size was left out.

    >>> from effdepth.numerics.hsic_resample import Units
    >>> s = Subsamples.draw(Units.blocks(64, 64), seed=0, draws=3)
    >>> s.weights.shape, [z["passages"] for z in s.sizes], s.notes
    ((9, 64), [[8, 8, 8], [16, 16, 16], [32, 32, 32]], [])
    >>> bool((s.weights[6] >= s.weights[3]).all() and (s.weights[3] >= s.weights[0]).all())   # nested, draw by draw
    True
    """

    weights: np.ndarray
    sizes: list
    draws: int
    notes: list = field(default_factory=list)

    @classmethod
    def none(cls, units) -> "Subsamples":
        """No subsample at all."""
        return cls(np.zeros((0, units.count)), [], 0)

    @classmethod
    def draw(cls, units, seed: int, draws: int = SUBSAMPLE_DRAWS) -> "Subsamples":
        """``draws`` random orders of the units (under ``seed``); size N/f takes the first G/f units of each."""
        g = units.count
        rng = np.random.default_rng([int(seed), 5331])
        orders = [rng.permutation(g) for _ in range(draws)]
        rows, sizes, notes = [], [], []
        for fraction in SUBSAMPLE_FRACTIONS:
            k = g // fraction
            passages = [int(units.sizes[order[:k]].sum()) for order in orders]
            if k < 1 or min(passages) < MIN_SUBSAMPLE:
                notes.append(
                    f"N/{fraction}: {min(passages)} passage(s), below the {MIN_SUBSAMPLE} a subsample needs; left out"
                )
                continue
            for order in orders:
                row = np.zeros(g)
                row[order[:k]] = 1.0
                rows.append(row)
            sizes.append({"fraction": f"N/{fraction}", "units": k, "passages": passages})
        weights = np.asarray(rows, dtype=np.float64).reshape(len(rows), g)
        return cls(weights, sizes, draws, notes)


def subsample_curve(subsamples: Subsamples, rows: np.ndarray, full: float, full_ci: list | None, samples: int) -> dict:
    """D_eff of one estimator on the subsamples (``rows`` ``(S,)``, one per row of ``subsamples.weights``)
    beside the full estimate: per size, the mean, standard deviation and range over the draws; ``last_doubling``
    is how far the mean at N/2 sits from the full D_eff, against the full interval's half-width.

    >>> from effdepth.numerics.hsic_resample import Units
    >>> s = Subsamples.draw(Units.blocks(64, 64), seed=0, draws=2)
    >>> c = subsample_curve(s, np.array([1.0, 1.2, 1.1, 1.1, 1.2, 1.2]), 1.25, [1.1, 1.4], 64)
    >>> [p["deff"] for p in c["points"]], c["last_doubling"]["moved"], c["last_doubling"]["exceeds_half_width"]
    ([1.1, 1.1, 1.2, 1.25], 0.05, False)
    """
    rows = np.asarray(rows, dtype=np.float64)
    points = []
    for i, size in enumerate(subsamples.sizes):
        values = rows[i * subsamples.draws : (i + 1) * subsamples.draws]
        finite = values[np.isfinite(values)]
        points.append(
            {
                "fraction": size["fraction"],
                "passages": round(float(np.mean(size["passages"])), 1),
                "deff": _round(finite.mean()) if len(finite) else None,
                "sd": _round(finite.std(ddof=1)) if len(finite) > 1 else None,
                "range": [_round(finite.min()), _round(finite.max())] if len(finite) else None,
                "draws": int(len(finite)),
            }
        )
    points.append(
        {
            "fraction": "N",
            "passages": float(samples),
            "deff": _round(full),
            "sd": None,
            "interval": None if full_ci is None else [_round(x) for x in full_ci],
            "draws": 1,
        }
    )
    half = None if full_ci is None else (full_ci[1] - full_ci[0]) / 2
    last = None
    if len(points) > 1 and points[-2]["fraction"] == "N/2" and points[-2]["deff"] is not None:
        moved = abs(full - points[-2]["deff"])
        last = {
            "moved": _round(moved),
            "half_width": None if half is None else _round(half),
            "exceeds_half_width": None if half is None else bool(moved > half),
        }
    return {"points": points, "last_doubling": last}


def _round(x) -> float:
    return round(float(x), 6)


def confound_table(draws: dict, reference: float, level: float) -> dict:
    """D_eff of ``default`` and each control with its interval, and each control's paired difference to
    ``default``. ``draws`` maps each view to its D_eff under the estimate (row 0) and every resample
    (the same rows for every view); ``outside`` says whether a control's D_eff lies outside default's
    interval (``None`` without resamples).

    >>> t = confound_table({"default": np.array([1.0, 0.9, 1.1, 1.0]), "length": np.array([1.5, 1.4, 1.6, 1.5])}, 2.0, 0.95)
    >>> t["length"]["difference"], t["length"]["outside"], t["length"]["ratio"]
    (0.5, True, 0.75)
    """
    base = np.asarray(draws["default"], dtype=np.float64)
    base_ci = percentile_interval(base[1:], level)
    out = {}
    for view, values in draws.items():
        values = np.asarray(values, dtype=np.float64)
        ci = percentile_interval(values[1:], level)
        row = {
            "deff": _round(values[0]),
            "ci": ci,
            "ratio": _round(values[0] / reference),
            "ratio_ci": None if ci is None else [_round(x / reference) for x in ci],
        }
        if view != "default":
            difference = values - base
            row.update(
                {
                    "difference": _round(difference[0]),
                    "difference_ci": percentile_interval(difference[1:], level),
                    "outside": None if base_ci is None else bool(not base_ci[0] <= values[0] <= base_ci[1]),
                }
            )
        out[view] = row
    return out
