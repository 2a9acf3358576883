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
    return float((np.trace(k @ l) + (one @ k @ one) * (one @ l @ one) / ((n - 1) * (n - 2))
                  - 2.0 / (n - 2) * (one @ k @ l @ one)) / (n * (n - 3)))
