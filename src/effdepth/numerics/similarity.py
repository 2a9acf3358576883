"""A similarity matrix -> its decay profile and D_eff (docs/method.md#deff)."""

from __future__ import annotations

import numpy as np


def deff(similarity: np.ndarray) -> np.ndarray:
    """D_eff = N^2 / sum_ij sim_ij: the effective number of independent states.

    >>> float(deff(np.eye(4)))
    4.0
    >>> float(deff(np.ones((4, 4))))
    1.0
    """
    s = np.asarray(similarity, dtype=np.float64)
    n = s.shape[-1]
    return n * n / s.sum(axis=(-2, -1))


def decay_profile(similarity: np.ndarray) -> np.ndarray:
    """P(k) = mean_i sim_{i,i+k} for k = 0..N-1 (P(0) = 1).

    >>> decay_profile(np.array([[1.0, 0.5], [0.5, 1.0]]))
    array([1. , 0.5])
    """
    s = np.asarray(similarity, dtype=np.float64)
    n = s.shape[-1]
    return np.stack([np.diagonal(s, offset=k, axis1=-2, axis2=-1).mean(axis=-1) for k in range(n)], axis=-1)
