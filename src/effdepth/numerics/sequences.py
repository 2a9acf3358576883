"""A padded batch of states -> each sequence's real-token states, and the one error for non-finite states.

Batches come as ``(L+1, batch, seq, d)`` states and a ``(batch, seq)``
attention mask; every token-mode statistic takes the sequences' real tokens
only (:func:`real_sequences`), so padding never enters a sum. Non-finite
states (a model overflowing in its dtype) stop a run with one line naming
the first layer they appear in and the dtype to rerun with.
"""

from __future__ import annotations

import torch

from ..errors import EffdepthError
from .accumulate import nonfinite_layer


def real_counts(states: torch.Tensor, mask: torch.Tensor | None) -> tuple:
    """Non-empty sequences and real tokens of a batch ``(L+1, batch, seq, d)``.

    >>> real_counts(torch.zeros(2, 3, 4, 1), torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]))
    (2, 6)
    """
    if mask is None:
        return (states.shape[1], states.shape[1] * states.shape[2]) if states.shape[2] else (0, 0)
    lengths = mask.to(torch.bool).sum(dim=1)
    return int((lengths > 0).sum()), int(lengths.sum())


def real_sequences(states: torch.Tensor, mask: torch.Tensor | None):
    """Yield each sequence's real-token states ``(M, T_b, d)``; padding never enters, and a row
    that is all padding yields nothing.

    >>> [tuple(s.shape) for s in real_sequences(torch.zeros(2, 3, 4, 1), torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]))]
    [(2, 2, 1), (2, 4, 1)]
    """
    for b in range(states.shape[1]):
        if mask is None:
            if states.shape[2]:
                yield states[:, b]
        else:
            idx = torch.nonzero(mask[b].to(states.device), as_tuple=False).flatten()
            if idx.numel():
                yield states[:, b].index_select(1, idx)


def check_finite(pos0: dict, rest: dict | None, dtype: torch.dtype) -> None:
    """Non-finite states show up as non-finite energies: no extra pass over the states
    (``pos0``, ``rest``: a sequence's additive statistics of position 0 and of the others)."""
    for part in (pos0, rest):
        if part is not None and (layer := nonfinite_layer(part)) is not None:
            raise_nonfinite(layer, dtype)


def check_finite_states(seq: torch.Tensor, dtype: torch.dtype) -> None:
    """Non-finite states of a sequence ``(M, T, d)``, for an accumulator whose statistics carry no
    state energies (one pass over the states: a NaN or inf anywhere makes its layer's sum so).

    Summed in the states' own dtype first, or in float32 for half precision, whose sums
    accumulate in it anyway (a sum that converts to float64 as it goes runs many times slower):
    a finite sum proves every state finite; a non-finite one may be an overflow of large finite
    states, so only then the float64 sum, which cannot overflow, decides.
    """
    probe = torch.float32 if seq.dtype in (torch.float16, torch.bfloat16) else None
    if bool(torch.isfinite(seq.sum(dim=(1, 2), dtype=probe)).all()):
        return
    finite = torch.isfinite(seq.sum(dim=(1, 2), dtype=torch.float64)).tolist()
    if not all(finite):
        raise_nonfinite(finite.index(False), dtype)


def raise_nonfinite(layer: int, dtype: torch.dtype) -> None:
    """The one-line error for non-finite states in ``layer`` of a model run in ``dtype``.

    >>> raise_nonfinite(2, torch.float16)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: non-finite activations in the output of block 2 (S_2) with dtype float16; the model overflows in this dtype (common with float16 and massive activations): rerun with --dtype float32 or bfloat16
    """
    what = "the embedding output S_0" if layer == 0 else f"the output of block {layer} (S_{layer})"
    hint = "float32 or bfloat16" if dtype == torch.float16 else "float32"
    raise EffdepthError(
        f"non-finite activations in {what} with dtype {str(dtype).replace('torch.', '')}; "
        f"the model overflows in this dtype (common with float16 and massive activations): rerun with --dtype {hint}"
    )
