"""HSIC across samples written out naively (numpy, Gram matrices in full): what both test tiers check
effdepth's sample-level estimators against."""

from __future__ import annotations

import numpy as np


def naive_biased(x: np.ndarray, y: np.ndarray) -> float:
    """The V-statistic |Xc^T Yc|_F^2 / n^2 of the column-centred matrices."""
    xc, yc = x - x.mean(0), y - y.mean(0)
    return float(np.linalg.norm(xc.T @ yc) ** 2 / len(x) ** 2)


def naive_debiased(x: np.ndarray, y: np.ndarray) -> float:
    """Song et al. (2012), written out from its Gram matrices with zeroed diagonals."""
    n = len(x)
    k, l = x @ x.T, y @ y.T
    np.fill_diagonal(k, 0.0)
    np.fill_diagonal(l, 0.0)
    one = np.ones(n)
    return float(
        (
            np.trace(k @ l)
            + (one @ k @ one) * (one @ l @ one) / ((n - 1) * (n - 2))
            - 2.0 / (n - 2) * (one @ k @ l @ one)
        )
        / (n * (n - 3))
    )


def naive_copy_aware_biased(x: np.ndarray, y: np.ndarray, counts) -> float:
    """The biased HSIC of a resample (``counts[a]`` copies of sample a) in which a sample's copies never pair
    with each other: every tuple of samples weighs the product of the counts of its distinct samples, and
    each ``n^k`` is the sum of those weights (Gram matrices of the sample's own centred matrices)."""
    import itertools

    xc, yc = x - x.mean(0), y - y.mean(0)
    k, l = xc @ xc.T, yc @ yc.T
    n, c = len(x), np.asarray(counts, dtype=np.float64)

    def weight(*tuple_):
        return float(np.prod([c[a] for a in set(tuple_)]))

    t1 = n2 = t2 = n3 = t3 = n4 = 0.0
    for a, b in itertools.product(range(n), repeat=2):
        w = weight(a, b)
        t1, n2 = t1 + w * k[a, b] * l[a, b], n2 + w
    for a, b, d in itertools.product(range(n), repeat=3):
        w = weight(a, b, d)
        t2, n3 = t2 + w * k[a, b] * l[a, d], n3 + w
    for a, b, d, e in itertools.product(range(n), repeat=4):
        w = weight(a, b, d, e)
        t3, n4 = t3 + w * k[a, b] * l[d, e], n4 + w
    return t1 / n2 - 2.0 * t2 / n3 + t3 / n4
