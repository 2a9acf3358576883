"""Similarity matrices, decay profile and D_eff (docs/method.md#similarity and #deff)."""

from __future__ import annotations

import numpy as np


def squared_cosine_from_gram(gram: np.ndarray) -> np.ndarray:
    """Frobenius similarity ``<S_i,S_j>^2 / (|S_i|^2 |S_j|^2)`` from a Gram matrix.

    >>> squared_cosine_from_gram(np.array([[1.0, 1.0], [1.0, 2.0]]))
    array([[1. , 0.5],
           [0.5, 1. ]])
    """
    g = np.asarray(gram, dtype=np.float64)
    diag = np.diagonal(g, axis1=-2, axis2=-1)
    denom = diag[..., :, None] * diag[..., None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.where(denom > 0, g * g / np.where(denom > 0, denom, 1.0), 0.0)
    # A zero state is identical to itself; elsewhere rounding can push a
    # squared cosine a hair above 1.
    n = g.shape[-1]
    sim[..., np.arange(n), np.arange(n)] = 1.0
    return np.clip(sim, 0.0, 1.0)


def cka_from_hsic(hsic: np.ndarray, clip: bool = True) -> np.ndarray:
    """Linear CKA ``h_ij / sqrt(h_ii h_jj)`` from (summed) HSIC matrices.

    Biased HSIC of PSD kernels is never negative, so CKA lies in [0, 1]
    (``clip`` keeps rounding there); a cross-sequence HSIC may dip below 0,
    and ``clip=False`` leaves it, unbiased. A layer with zero centred energy
    is identical to itself and unlike the rest.

    >>> cka_from_hsic(np.array([[4.0, 1.0], [1.0, 1.0]]))
    array([[1. , 0.5],
           [0.5, 1. ]])
    """
    h = np.asarray(hsic, dtype=np.float64)
    diag = np.diagonal(h, axis1=-2, axis2=-1)
    denom = np.sqrt(np.clip(diag[..., :, None] * diag[..., None, :], 0.0, None))
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.where(denom > 0, h / np.where(denom > 0, denom, 1.0), 0.0)
    n = h.shape[-1]
    sim[..., np.arange(n), np.arange(n)] = 1.0
    # A non-finite HSIC stays NaN: read as "unlike the rest", it would look like a real result.
    broken = ~np.isfinite(diag[..., :, None]) | ~np.isfinite(diag[..., None, :]) | ~np.isfinite(h)
    return np.where(broken, np.nan, np.clip(sim, 0.0, 1.0) if clip else sim)


def cosine_from_gram(gram: np.ndarray) -> np.ndarray:
    """Signed cosine ``<A_i,A_j> / (|A_i| |A_j|)`` from a Gram matrix.

    >>> cosine_from_gram(np.array([[4.0, -2.0], [-2.0, 1.0]]))
    array([[ 1., -1.],
           [-1.,  1.]])
    """
    g = np.asarray(gram, dtype=np.float64)
    norms = np.sqrt(np.clip(np.diagonal(g, axis1=-2, axis2=-1), 0.0, None))
    denom = norms[..., :, None] * norms[..., None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(denom > 0, g / np.where(denom > 0, denom, 1.0), 0.0)
    return np.clip(cos, -1.0, 1.0)


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


def deff_from_profile(profile: np.ndarray) -> np.ndarray:
    """D_eff = N / (1 + 2 sum_{k>=1} (1 - k/N) P(k)), the integrated-autocorrelation form.

    Equals :func:`deff` of a symmetric similarity matrix.

    >>> float(deff_from_profile(np.array([1.0, 0.0, 0.0])))
    3.0
    """
    p = np.asarray(profile, dtype=np.float64)
    n = p.shape[-1]
    k = np.arange(1, n)
    return n / (1.0 + 2.0 * ((1.0 - k / n) * p[..., 1:]).sum(axis=-1))
