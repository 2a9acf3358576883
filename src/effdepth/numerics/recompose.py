"""Offline recomposition of a measured stream from its increments (docs/method.md#residual-carry).

No model is run: for the frobenius similarity every state Gram matrix that
the recomposed stream would have follows from the Gram matrix ``G_X`` of the
increments X_0 = S_0, X_l = U_l = S_l - S_{l-1}, which every result keeps
(``ViewResult.statistics["gram_increments"]``).

- Carry sweep: ``S'_0 = S_0``, ``S'_l = lam * S'_{l-1} + U_l``, so
  ``S'_l = sum_{k<=l} lam^(l-k) X_k`` and ``G' = A G_X A^T`` with
  ``A[l, k] = lam^(l-k)`` for ``k <= l``. ``lam = 1`` gives back the measured
  states (A is the lower-triangular ones matrix T).
- Decorrelated recomposition: Gram-Schmidt on X_0, X_1, ..., X_L in that
  order, each result rescaled to its original energy |X_l|^2. The new
  increments are orthogonal with the same energies, so their Gram matrix is
  ``diag(|X_l|^2)`` and ``G' = A diag A^T``. At ``lam = 1`` this is the process
  R_matched describes, so its D_eff equals R_matched exactly. (It assumes
  enough dimensions for L+1 orthogonal increments, which the Gram matrix
  never checks: it is a statement about the process, not about one basis.)
"""

from __future__ import annotations

import numpy as np

from ..errors import EffdepthError
from .metrics import NO_COSINE_SUMMARIES, analysed_slice
from .references import reference_fl
from .similarity import deff, squared_cosine_from_gram


def carry_matrix(num_states: int, lam: float) -> np.ndarray:
    """``A[l, k] = lam^(l-k)`` for ``k <= l``, else 0 (``0^0 = 1``: the update itself).

    >>> carry_matrix(3, 0.5)
    array([[1.  , 0.  , 0.  ],
           [0.5 , 1.  , 0.  ],
           [0.25, 0.5 , 1.  ]])
    """
    idx = np.arange(num_states)
    power = idx[:, None] - idx[None, :]
    return np.where(power >= 0, np.power(float(lam), np.clip(power, 0, None)), 0.0)


def carried_gram(gram_increments: np.ndarray, lam: float) -> np.ndarray:
    """State Gram matrix ``A G_X A^T`` of the carry sweep with carry ``lam``.

    >>> carried_gram(np.eye(2), 1.0)
    array([[1., 1.],
           [1., 2.]])
    """
    g = np.asarray(gram_increments, dtype=np.float64)
    a = carry_matrix(g.shape[-1], lam)
    return a @ g @ a.T


def decorrelated_gram(gram_increments: np.ndarray, lam: float = 1.0) -> np.ndarray:
    """State Gram matrix of the increments orthogonalised in order, energies kept.

    >>> decorrelated_gram(np.array([[1.0, 0.9], [0.9, 1.0]]))
    array([[1., 1.],
           [1., 2.]])
    """
    g = np.asarray(gram_increments, dtype=np.float64)
    return carried_gram(np.diag(np.diagonal(g)), lam)


def state_gram_deff(gram_states: np.ndarray, include_embedding: bool) -> dict:
    """D_eff, F_N and their ratio from a state Gram matrix over S_0..S_L (frobenius).

    >>> state_gram_deff(np.eye(4), include_embedding=False)["deff"]
    3.0
    """
    sl = analysed_slice(include_embedding)
    sim = squared_cosine_from_gram(np.asarray(gram_states, dtype=np.float64)[sl, sl])
    d = float(deff(sim))
    fl = reference_fl(sim.shape[-1])
    return {"deff": d, "reference": fl, "ratio": d / fl}


def recompose_carry(result_or_view, carries, include_embedding: bool | None = None) -> list:
    """D_eff of the carry sweep of a measured stream, one dict per carry value.

    Each dict has ``lam``, ``deff``, ``reference`` (F_N), ``ratio`` and
    ``deff_decorrelated`` (the same sweep with the updates orthogonalised in
    order). ``result_or_view`` is a :class:`~effdepth.result.Result` (its
    first view), a :class:`~effdepth.result.ViewResult`, or a Gram matrix of
    the increments; ``include_embedding`` defaults to what the result used.
    Always the frobenius similarity: the Gram matrix holds nothing per token.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(5, 2, 8, 16, dtype=torch.float64), similarity="frobenius")
    >>> rows = recompose_carry(r, [1.0, 0.5])
    >>> abs(rows[0]["deff"] - r.default.deff) < 1e-12
    True
    """
    gram, include = _increment_gram(result_or_view, include_embedding)
    rows = []
    for lam in carries:
        lam = _check_lam(lam)
        row = {"lam": lam, **state_gram_deff(carried_gram(gram, lam), include)}
        row["deff_decorrelated"] = state_gram_deff(decorrelated_gram(gram, lam), include)["deff"]
        rows.append(row)
    return rows


def recompose_decorrelated(result_or_view, include_embedding: bool | None = None, carry: float = 1.0) -> dict:
    """D_eff of the stream rebuilt from its updates orthogonalised in order (energies kept).

    At ``carry = 1`` this equals R_matched (``view.references["matched"]``)
    for the frobenius similarity: the decorrelated stream is exactly the
    process that reference describes.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(5, 2, 8, 16, dtype=torch.float64), similarity="frobenius")
    >>> d = recompose_decorrelated(r)
    >>> abs(d["deff"] - r.default.references["matched"]) < 1e-12
    True
    """
    gram, include = _increment_gram(result_or_view, include_embedding)
    lam = _check_lam(carry)
    return {"lam": lam, **state_gram_deff(decorrelated_gram(gram, lam), include)}


def _increment_gram(result_or_view, include_embedding: bool | None) -> tuple:
    view = getattr(result_or_view, "default", result_or_view)
    config = getattr(result_or_view, "config", {}) or {}
    stats = getattr(view, "statistics", None)
    if stats is None:
        gram = np.asarray(result_or_view, dtype=np.float64)
    elif "gram_increments" in stats:
        gram = np.asarray(stats["gram_increments"], dtype=np.float64)
    elif "hsic" in stats or "hsic_full" in stats:
        raise EffdepthError(
            f"view {getattr(view, 'name', '?')!r} has no increment statistics (gram_increments): {NO_COSINE_SUMMARIES}"
        )
    else:
        raise EffdepthError(
            "this result has no increment statistics (gram_increments); re-measure it with this effdepth version"
        )
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1] or gram.shape[0] < 2:
        raise EffdepthError(f"need a square (L+1) x (L+1) increment Gram matrix with L >= 1, got shape {gram.shape}")
    if include_embedding is None:
        include_embedding = config.get("include_embedding")
    if include_embedding is None and stats is not None:
        # A bare view knows how many states it analysed: L+1 with the embedding, L without.
        include_embedding = int(view.num_states) == gram.shape[0]
    return gram, bool(include_embedding)


def _check_lam(lam) -> float:
    try:
        value = float(lam)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise EffdepthError(
            f"carry value {lam!r} is outside [0, 1]; 1 is the measured stream, 0 keeps only each update"
        )
    return value
