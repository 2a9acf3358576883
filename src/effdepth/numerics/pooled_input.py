"""Pooled vectors a user brings (:func:`effdepth.from_pooled`): checked and shaped ``(L+1, N, d)`` float64,
with one-line errors that say what is wrong in the user's terms (no model ran here)."""

from __future__ import annotations

import numpy as np

from effdepth.errors import EffdepthError
from effdepth.numerics.similarities import fewest_samples


def checked_pooled(pooled, lengths=None) -> np.ndarray:
    """``pooled`` (an ``(L+1, N, d)`` array or a list of ``(N, d)`` matrices) as one float64 array;
    a one-line error for mismatched shapes, one state, too few passages, non-finite values, or
    lengths that are not one whole count of at least 1 per passage.

    >>> checked_pooled([np.ones((4, 2)), np.zeros((4, 2))]).shape
    (2, 4, 2)
    >>> checked_pooled([np.ones((4, 2)), np.zeros((5, 2))])
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: pooled state 1 is 5 x 2 where state 0 is 4 x 2: every state needs one row per passage and the same width
    """
    layers = list(pooled) if isinstance(pooled, (list, tuple)) else None
    if layers is not None:
        shapes = [np.shape(m) for m in layers]
        for i, shape in enumerate(shapes):
            if len(shape) != 2 or shape != shapes[0]:
                raise EffdepthError(
                    f"pooled state {i} is {' x '.join(map(str, shape))} where state 0 is "
                    f"{' x '.join(map(str, shapes[0]))}: every state needs one row per passage and the "
                    "same width"
                )
        array = np.stack([np.asarray(m, dtype=np.float64) for m in layers]) if layers else np.zeros((0, 0, 0))
    else:
        array = np.asarray(pooled.detach().cpu() if hasattr(pooled, "detach") else pooled, dtype=np.float64)
    if array.ndim != 3:
        raise EffdepthError(
            f"pooled vectors must be (L+1, N, d) (states x passages x width) or a list of (N, d), got "
            f"shape {array.shape}"
        )
    count, samples, _ = array.shape
    if count < 2:
        raise EffdepthError(
            f"pooled vectors of {count} state(s): D_eff compares at least two states (S_0..S_L with "
            "L >= 1); give one matrix per state"
        )
    least = fewest_samples()
    if samples < least.min_samples:
        raise EffdepthError(
            f"pooled vectors of {samples} passage(s): similarity across passages needs at least "
            f"{least.min_samples} ({least.min_reason}); give {least.min_samples} or more rows per state"
        )
    finite = np.isfinite(array).reshape(count, samples, -1).all(axis=2)
    if not finite.all():
        state, passage = (int(x[0]) for x in np.nonzero(~finite))
        raise EffdepthError(
            f"pooled state {state} holds non-finite values (NaN or infinite), first at passage {passage}; "
            "drop or recompute those passages"
        )
    if lengths is not None:
        n = np.asarray(lengths)
        if n.shape != (samples,) or not np.issubdtype(n.dtype, np.integer) or (n < 1).any():
            raise EffdepthError(
                f"lengths must be one whole token count >= 1 per passage ({samples}), got {n.dtype} of shape {n.shape}"
            )
    return array
