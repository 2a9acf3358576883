"""Sufficient statistics of one token set, computed from its states in float64.

This is the only place that touches activations. Everything downstream
(metrics, references, bootstrap, views, recomposition) works from these small
(L+1) x (L+1) matrices, which add up over tokens and over sequences.

Keys (M = L+1 states S_0..S_L, N analysed states):

- ``n``: number of tokens.
- ``gram_states``: <S_i, S_j>_F.
- ``gram_increments``: <X_i, X_j>_F for the increments X_0 = S_0,
  X_l = U_l = S_l - S_{l-1}, formed as explicit differences (never by
  expanding the state Gram matrix: consecutive states are nearly parallel
  and that expansion cancels catastrophically).
- ``cross``: <X_i, S_j>_F, for cos(U_l, S_{l-1}).
- ``cos_sum``, ``cos2_sum``, ``angle_sum``: per-token sums of cos, cos^2 and
  arccos/pi between states (the "token" similarity and section 9 measures).
- ``ref_init``, ``ref_size``, ``ref_matched``: per-token sums of the matched
  references' similarity min(E_i,E_j)/max(E_i,E_j), over the N analysed
  states (the "token" similarity's references).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .references import energy_ratio_matrix, matched_energies

STAT_KEYS = (
    "n",
    "gram_states",
    "gram_increments",
    "cross",
    "cos_sum",
    "cos2_sum",
    "angle_sum",
    "ref_init",
    "ref_size",
    "ref_matched",
)

# Bounds the float64 working set of one call: (tokens, M, M) per-token
# matrices and an (M, tokens, d) copy of the states.
DEFAULT_CHUNK_TOKENS = 512


def empty_statistics(num_states: int, include_embedding: bool) -> dict:
    """Zero statistics for M = ``num_states`` states, ready to be added to."""
    m = num_states
    n = m if include_embedding else m - 1
    out = {"n": np.zeros((), dtype=np.float64)}
    for key in ("gram_states", "gram_increments", "cross", "cos_sum", "cos2_sum", "angle_sum"):
        out[key] = np.zeros((m, m), dtype=np.float64)
    for key in ("ref_init", "ref_size", "ref_matched"):
        out[key] = np.zeros((n, n), dtype=np.float64)
    return out


def token_set_statistics(
    states: torch.Tensor,
    include_embedding: bool = False,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
) -> dict:
    """Statistics of a token set given its states shaped ``(M, tokens, d)``.

    Computed in float64 on the tensor's device, in chunks of tokens so the
    working set stays bounded; the result is a dict of float64 numpy arrays.

    >>> s = torch.zeros(3, 5, 4, dtype=torch.float64)
    >>> s[0, :, 0] = 1; s[1, :, 0] = 1; s[1, :, 1] = 1; s[2] = s[1]; s[2, :, 2] = 1
    >>> st = token_set_statistics(s)
    >>> float(st["n"]), st["gram_increments"].diagonal().tolist()
    (5.0, [5.0, 5.0, 5.0])
    """
    if states.dim() != 3:
        raise ValueError(f"states must be (M, tokens, d), got shape {tuple(states.shape)}")
    m, t, _ = states.shape
    total = empty_statistics(m, include_embedding)
    for start in range(0, t, max(1, chunk_tokens)):
        part = _chunk_statistics(states[:, start : start + chunk_tokens], include_embedding)
        for key in STAT_KEYS:
            total[key] = total[key] + part[key]
    return total


def _chunk_statistics(states: torch.Tensor, include_embedding: bool) -> dict:
    z = states.to(torch.float64)
    m, t, d = z.shape
    increments = torch.cat([z[:1], z[1:] - z[:-1]], dim=0)

    per_token = z.transpose(0, 1)  # (t, M, d)
    token_gram = per_token @ per_token.transpose(1, 2)  # (t, M, M)
    state_energy = token_gram.diagonal(dim1=1, dim2=2)  # (t, M)
    norms = state_energy.clamp_min(0).sqrt()
    denom = norms[:, :, None] * norms[:, None, :]
    cos = torch.where(denom > 0, token_gram / torch.where(denom > 0, denom, 1.0), 0.0).clamp(-1.0, 1.0)
    eye = torch.eye(m, dtype=torch.bool, device=z.device)
    # A state compared with itself is identical even when it is zero.
    cos = torch.where(eye, torch.ones_like(cos), cos)

    flat_inc = increments.reshape(m, t * d)
    flat_states = z.reshape(m, t * d)
    out = {
        "n": np.asarray(float(t)),
        "gram_states": token_gram.sum(0),
        "gram_increments": flat_inc @ flat_inc.T,
        "cross": flat_inc @ flat_states.T,
        "cos_sum": cos.sum(0),
        "cos2_sum": (cos * cos).sum(0),
        "angle_sum": torch.arccos(cos).sum(0) / math.pi,
    }
    out = {k: (v.cpu().numpy() if isinstance(v, torch.Tensor) else v) for k, v in out.items()}

    update_energy = (increments[1:] * increments[1:]).sum(-1).T.cpu().numpy()  # (t, L)
    initial_energy = state_energy[:, 0].cpu().numpy()
    for name, energies in matched_energies(initial_energy, update_energy, include_embedding).items():
        out[f"ref_{name}"] = energy_ratio_matrix(energies).sum(0)
    return out
