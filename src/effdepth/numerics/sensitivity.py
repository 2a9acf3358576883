"""How D_eff moves with the choices behind it: maximum lag, taper and aggregation (docs/method.md#sensitivity).

All of them read one similarity matrix ``S`` (N x N, leading resample axes allowed), so they cost no
forward pass: lag-window forms ``D = N / (1 + 2 sum_{k=1}^{K} w(k/N) P(k))`` (``P`` the decay profile,
``K`` the maximum lag, ``w`` a taper: Bartlett ``1 - x``, the paper's Definition 2, Parzen,
Tukey-Hanning), and spectral aggregations of ``S`` (participation ratio ``(tr S)^2 / tr(S^2)``,
effective rank, the count of eigenvalues that cover 90% of ``tr S``).

Each variant's gap is measured against the same form applied to orthogonal equal updates
(``min(i,j)/max(i,j)``; F_N = 2N/(N+1) for full Bartlett), so "sub-reference" keeps its meaning.
"""

from __future__ import annotations

import numpy as np

from effdepth.numerics.references import energy_ratio_matrix, headline
from effdepth.numerics.similarity import decay_profile

TAPERS = ("bartlett", "parzen", "tukey-hanning")
#: The paper's maximum lags (S6); ``None`` is the full K = N - 1.
MAX_LAGS = (1, 5, 25, None)
THRESHOLD = 0.9


def taper(name: str, x: np.ndarray) -> np.ndarray:
    """Lag-window weights at ``x = k/N`` in [0, 1].

    >>> taper("bartlett", np.array([0.0, 0.5])).tolist(), taper("parzen", np.array([0.0, 0.5, 1.0])).tolist()
    ([1.0, 0.5], [1.0, 0.25, 0.0])
    >>> taper("tukey-hanning", np.array([0.0, 0.5])).round(6).tolist()
    [1.0, 0.5]
    """
    x = np.abs(np.asarray(x, dtype=np.float64))
    if name == "bartlett":
        return 1.0 - x
    if name == "parzen":
        return np.where(x <= 0.5, 1.0 - 6.0 * x**2 + 6.0 * x**3, 2.0 * (1.0 - x) ** 3)
    if name == "tukey-hanning":
        return 0.5 * (1.0 + np.cos(np.pi * x))
    raise ValueError(f"unknown taper {name!r}; one of {', '.join(TAPERS)}")


def lag_window_deff(similarity: np.ndarray, *, max_lag: int | None = None, taper_name: str = "bartlett") -> np.ndarray:
    """``N / (1 + 2 sum_{k=1}^{K} w(k/N) P(k))``, K = ``max_lag`` (at most N-1; default N-1).

    >>> s = np.array([[1.0, 0.5, 0.25], [0.5, 1.0, 0.5], [0.25, 0.5, 1.0]])
    >>> round(float(lag_window_deff(s)), 6), round(float(9 / s.sum()), 6), round(float(lag_window_deff(s, max_lag=1)), 6)
    (1.636364, 1.636364, 1.8)
    """
    profile = decay_profile(similarity)
    n = profile.shape[-1]
    lags = np.arange(1, n if max_lag is None else min(int(max_lag), n - 1) + 1)
    weights = taper(taper_name, lags / n)
    return n / (1.0 + 2.0 * (weights * profile[..., lags]).sum(axis=-1))


def _eigenvalues(similarity: np.ndarray) -> np.ndarray:
    """Eigenvalues of the symmetrised matrix, largest first, negatives (rounding, debiased dips) set to 0."""
    s = np.asarray(similarity, dtype=np.float64)
    finite = np.isfinite(s).all(axis=(-2, -1))
    symmetric = np.where(finite[..., None, None], 0.5 * (s + np.swapaxes(s, -1, -2)), 0.0)
    # A resample without a similarity has no spectrum.
    values = np.where(finite[..., None], np.linalg.eigvalsh(symmetric), np.nan)
    return np.clip(values[..., ::-1], 0.0, None)


def participation_ratio(similarity: np.ndarray) -> np.ndarray:
    """``(tr S)^2 / tr(S^2)``: N for orthogonal states, 1 for identical ones.

    >>> float(participation_ratio(np.eye(3))), float(participation_ratio(np.ones((3, 3))))
    (3.0, 1.0)
    """
    s = np.asarray(similarity, dtype=np.float64)
    trace = np.trace(s, axis1=-2, axis2=-1)
    return trace**2 / (s * np.swapaxes(s, -1, -2)).sum(axis=(-2, -1))


def effective_rank(similarity: np.ndarray) -> np.ndarray:
    """``exp(-sum p log p)`` of the normalised eigenvalues ``p`` (Roy and Vetterli 2007).

    >>> round(float(effective_rank(np.eye(4))), 6), round(float(effective_rank(np.ones((4, 4)))), 6)
    (4.0, 1.0)
    """
    values = _eigenvalues(similarity)
    p = values / values.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(axis=-1)
    return np.where(np.isfinite(values).all(axis=-1), np.exp(entropy), np.nan)


def threshold_count(similarity: np.ndarray, cover: float = THRESHOLD) -> np.ndarray:
    """How many eigenvalues, largest first, cover ``cover`` of their sum (``tr S`` for a similarity).

    >>> threshold_count(np.diag([5.0, 3.0, 1.0, 1.0])).tolist(), threshold_count(np.eye(10)).tolist()
    (3.0, 9.0)
    """
    values = _eigenvalues(similarity)
    covered = np.cumsum(values, axis=-1) / values.sum(axis=-1, keepdims=True)
    # A tiny tolerance so that exactly reaching the threshold counts (9 of 10 equal eigenvalues cover 90%).
    count = (covered < cover - 1e-12).sum(axis=-1).astype(np.float64) + 1.0
    return np.where(np.isfinite(values).all(axis=-1), count, np.nan)


def variants() -> list:
    """``(key, label, function of S)`` for every row of the sensitivity table, the paper's default first."""
    rows = [("bartlett", "Bartlett, full lag (the paper's)", lambda s: lag_window_deff(s))]
    rows += [
        (f"bartlett-max-lag-{k}", f"Bartlett, max lag {k}", lambda s, k=k: lag_window_deff(s, max_lag=k))
        for k in MAX_LAGS
        if k is not None
    ]
    rows += [
        ("parzen", "Parzen, full lag", lambda s: lag_window_deff(s, taper_name="parzen")),
        ("tukey-hanning", "Tukey-Hanning, full lag", lambda s: lag_window_deff(s, taper_name="tukey-hanning")),
    ]
    rows += [
        ("participation-ratio", "participation ratio", participation_ratio),
        ("effective-rank", "effective rank", effective_rank),
        ("threshold-count", f"threshold count ({THRESHOLD:.0%} of tr S)", threshold_count),
    ]
    return rows


LABELS = {key: label for key, label, _ in variants()}


def sensitivity_numbers(similarity: np.ndarray) -> dict:
    """``{variant: {"deff", "reference", "gap_pct"}}``, each an array over the leading (resample) axes.

    ``reference`` is the variant applied to orthogonal equal updates of the same N (a number).

    >>> out = sensitivity_numbers(energy_ratio_matrix(np.arange(1.0, 5.0))[None])
    >>> round(float(out["bartlett"]["deff"][0]), 4), round(float(out["bartlett"]["gap_pct"][0]), 6)
    (1.6, 0.0)
    """
    s = np.asarray(similarity, dtype=np.float64)
    n = s.shape[-1]
    equal_updates = energy_ratio_matrix(np.arange(1.0, n + 1.0))
    out = {}
    for name, _, function in variants():
        value = function(s)
        reference = float(function(equal_updates))
        out[name] = {
            "deff": value,
            "reference": np.full(value.shape, reference),
            "gap_pct": headline(value, reference)["gap_pct"],
        }
    return out


def spearman(a, b) -> float:
    """Spearman's rank correlation (ties get their average rank); NaN with fewer than 3 pairs or a constant side.

    >>> round(spearman([1, 2, 3, 4], [10, 20, 30, 25]), 6), spearman([1, 2, 3], [3, 2, 1])
    (0.8, -1.0)
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.size < 3:
        return float("nan")
    ra, rb = _ranks(a), _ranks(b)
    if np.std(ra) == 0 or np.std(rb) == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1, dtype=np.float64)
    for value in np.unique(x):
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks
