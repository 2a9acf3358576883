"""Offline recomposition of a measured stream from its increments (docs/method.md#recomposition).

Pure numpy on a stack of states ``(L+1, N, d)`` (in passage mode, pooled vectors). Everything here
is linear in the states, as is mean pooling, so recomposing the pooled vectors is exactly pooling the
recomposed token stream.

- Increments: ``X_0 = S_0``, ``X_l = S_l - S_{l-1}`` (explicit differences).
- Carry sweep: ``S'_0 = S_0``, ``S'_l = lam S'_{l-1} + X_l``, so
  ``S'_l = sum_{k<=l} lam^(l-k) X_k = (A X)_l`` with ``A = carry_matrix(L+1, lam)``.
  ``lam = 1`` gives back the measured states (A is the lower-triangular ones
  matrix).
- Decorrelation: the increments centred across the N samples, orthogonalised in order (Gram-Schmidt
  under the Frobenius inner product), each rescaled to its original energy ``|X_l - mean|_F^2``: the
  process the matched reference describes. Under CKA it is not an identity (orthogonal increments may
  share covariance directions), so :mod:`effdepth.studies.recompose` reports the difference.
"""

from __future__ import annotations

import numpy as np

from effdepth.errors import EffdepthError

#: An increment whose part orthogonal to the earlier ones is below this fraction of its norm lies in their span.
SPAN_TOLERANCE = 1e-10


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


def increments(states) -> np.ndarray:
    """``X_0 = S_0``, ``X_l = S_l - S_{l-1}`` of a stack ``(L+1, ...)``, in float64.

    >>> increments(np.array([[1.0], [3.0], [2.0]])).ravel().tolist()
    [1.0, 2.0, -1.0]
    """
    s = np.asarray(states, dtype=np.float64)
    if s.ndim < 1 or s.shape[0] < 2:
        raise EffdepthError(f"need states S_0..S_L with L >= 1 stacked on the first axis, got shape {s.shape}")
    return np.concatenate([s[:1], np.diff(s, axis=0)])


def carried(incs, lam: float) -> np.ndarray:
    """The carry sweep ``S'_l = sum_{k<=l} lam^(l-k) X_k`` of increments ``(L+1, ...)``: ``A X``.

    >>> carried(np.array([[1.0], [1.0], [1.0]]), 0.5).ravel().tolist()
    [1.0, 1.5, 1.75]
    """
    x = np.asarray(incs, dtype=np.float64)
    a = carry_matrix(x.shape[0], lam)
    return (a @ x.reshape(x.shape[0], -1)).reshape(x.shape)


def centred(incs) -> np.ndarray:
    """Each increment ``(L+1, N, d)`` with its mean over the N samples (axis 1) taken out.

    >>> centred(np.array([[[1.0], [3.0]]])).ravel().tolist()
    [-1.0, 1.0]
    """
    x = np.asarray(incs, dtype=np.float64)
    return x - x.mean(axis=1, keepdims=True)


def decorrelated_increments(incs) -> np.ndarray:
    """The increments ``(L+1, N, d)`` centred across samples and orthogonalised in order under the
    Frobenius inner product (Gram-Schmidt, computed by a Householder QR), each rescaled to the
    energy it had centred. A zero increment stays zero; one that lies in the span of the earlier
    ones (more increments than N d, or a repeated one) cannot keep its energy and is refused.

    >>> x = np.array([[[1.0], [-1.0]], [[2.0], [0.0]]])   # L = 1, N = 2, d = 1: X_1 centred is (1, -1) = X_0
    >>> decorrelated_increments(x)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: increment 1 lies in the span of the increments before it (centred across the 2 samples, 1 feature(s) each): it has no part left to decorrelate; the decorrelated recomposition needs L+1 = 2 independent increments (more samples or width than increments)
    >>> z = decorrelated_increments(np.array([[[1.0, 0.0], [-1.0, 0.0]], [[3.0, 1.0], [1.0, -1.0]]]))
    >>> abs(float(np.sum(z[0] * z[1]))) < 1e-12, round(float(np.sum(z[1] ** 2)), 12)   # orthogonal, energy kept
    (True, 4.0)
    """
    c = centred(incs)
    count = c.shape[0]
    flat = c.reshape(count, -1)
    energy = np.linalg.norm(flat, axis=1)
    kept = np.flatnonzero(energy > 0)  # a zero increment stays zero and takes no direction from the others
    out = np.zeros_like(flat)
    if kept.size == 0:
        return out.reshape(c.shape)
    q, r = np.linalg.qr(flat[kept].T)  # q: (N d, m) with m = min(N d, increments kept)
    for j, layer in enumerate(kept):
        left = abs(r[j, j]) if j < r.shape[0] else 0.0
        if left <= SPAN_TOLERANCE * energy[layer]:
            samples, width = c.shape[1], int(np.prod(c.shape[2:], dtype=np.int64))
            raise EffdepthError(
                f"increment {layer} lies in the span of the increments before it (centred across the "
                f"{samples} samples, {width} feature(s) each): it has no part left to decorrelate; the "
                f"decorrelated recomposition needs L+1 = {count} independent increments (more samples or "
                "width than increments)"
            )
        out[layer] = q[:, j] * (np.sign(r[j, j]) * energy[layer])
    return out.reshape(c.shape)


def recomposed(states, lam: float, *, decorrelate: bool = False) -> np.ndarray:
    """States ``(L+1, N, d)`` rebuilt from their increments with carry ``lam`` (decorrelated first when asked).

    >>> s = np.cumsum(np.random.default_rng(0).normal(size=(4, 6, 3)), axis=0)
    >>> bool(np.allclose(recomposed(s, 1.0), s, rtol=0, atol=1e-12))
    True
    """
    x = increments(states)
    return carried(decorrelated_increments(x) if decorrelate else x, lam)
