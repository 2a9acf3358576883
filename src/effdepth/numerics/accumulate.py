"""Sufficient statistics of one token set, computed from its states in float64.

This is the only place that touches activations, with :mod:`.cka` for the
kernel similarities (whose statistics do not add up over tokens) and
:mod:`.surrogate` for the calibrated references. Everything downstream
(metrics, references, bootstrap, views, recomposition) works from these small
(L+1) x (L+1) matrices, which add up over tokens and over sequences.

Keys (M = L+1 states S_0..S_L, N analysed states):

- ``n``: number of tokens.
- ``gram_states``: <S_i, S_j>_F.
- ``gram_increments``: <X_i, X_j>_F for the increments X_0 = S_0,
  X_l = U_l = S_l - S_{l-1}, formed as explicit differences (never by
  expanding the state Gram matrix: consecutive states are nearly parallel
  and that expansion cancels catastrophically).
- ``update_state_dot``: <U_l, S_{l-1}>_F for l = 1..L, from explicit
  per-token products, for cos(U_l, S_{l-1}).
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
    "update_state_dot",
    "cos_sum",
    "cos2_sum",
    "angle_sum",
    "ref_init",
    "ref_size",
    "ref_matched",
)

# Tokens per float64 working set: (tokens, M, M) per-token matrices and an
# (M, tokens, d) copy of the states. Small chunks stay in cache and reuse
# allocator memory instead of faulting in fresh pages (measured fastest on CPU).
DEFAULT_CHUNK_TOKENS = 64


def empty_statistics(num_states: int, include_embedding: bool) -> dict:
    """Zero statistics for M = ``num_states`` states, ready to be added to."""
    m = num_states
    n = m if include_embedding else m - 1
    out = {"n": np.zeros((), dtype=np.float64)}
    for key in ("gram_states", "gram_increments", "cos_sum", "cos2_sum", "angle_sum"):
        out[key] = np.zeros((m, m), dtype=np.float64)
    out["update_state_dot"] = np.zeros(m - 1, dtype=np.float64)
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
    first, rest = sequence_statistics(states, include_embedding, chunk_tokens)
    return add_statistics(first, rest) if rest is not None else first


def add_statistics(a: dict, b: dict) -> dict:
    return {k: a[k] + b[k] for k in STAT_KEYS}


def sequence_statistics(
    states: torch.Tensor,
    include_embedding: bool = False,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
) -> tuple:
    """Statistics of position 0 and of the other positions of one sequence.

    ``states`` is ``(M, T, d)`` (real tokens only, in order). Returns
    ``(pos0, rest)``; ``rest`` is ``None`` when T = 1. Both parts come from
    one pass over the tokens, so views that only select positions cost nothing
    extra.
    """
    if states.dim() != 3:
        raise ValueError(f"states must be (M, tokens, d), got shape {tuple(states.shape)}")
    m, t, _ = states.shape
    first = chunk_statistics(states[:, :1], include_embedding)
    rest = None
    for start in range(1, t, max(1, chunk_tokens)):
        part = chunk_statistics(states[:, start : start + chunk_tokens], include_embedding)
        rest = part if rest is None else add_statistics(rest, part)
    return first, rest


def chunk_statistics(states: torch.Tensor, include_embedding: bool) -> dict:
    """Statistics of a few tokens ``(M, tokens, d)``; add chunks with :func:`add_statistics`."""
    z = states.to(torch.float64)
    m, t, d = z.shape
    # Updates as explicit differences; the increments' Gram matrix is built
    # from blocks (S_0 with itself, with the updates, updates with each other).
    updates = z[1:] - z[:-1]  # (L, t, d)
    flat_states = z.reshape(m, t * d)
    flat_updates = updates.reshape(m - 1, t * d)
    gram_increments = torch.empty(m, m, dtype=torch.float64, device=z.device)
    s0 = flat_states[:1]
    gram_increments[:1, :1] = s0 @ s0.T
    gram_increments[1:, 1:] = flat_updates @ flat_updates.T
    gram_increments[:1, 1:] = s0 @ flat_updates.T
    gram_increments[1:, :1] = gram_increments[:1, 1:].T

    per_token = z.transpose(0, 1)  # (t, M, d)
    token_gram = per_token @ per_token.transpose(1, 2)  # (t, M, M)
    state_energy = token_gram.diagonal(dim1=1, dim2=2)  # (t, M)
    norms = state_energy.clamp_min(0).sqrt()
    denom = norms[:, :, None] * norms[:, None, :]
    cos = torch.where(denom > 0, token_gram / torch.where(denom > 0, denom, 1.0), 0.0).clamp(-1.0, 1.0)
    eye = torch.eye(m, dtype=torch.bool, device=z.device)
    # A state compared with itself is identical even when it is zero.
    cos = torch.where(eye, torch.ones_like(cos), cos)

    update_energy = torch.linalg.vector_norm(updates, dim=-1).square()  # (L, t)
    out = {
        "n": np.asarray(float(t)),
        "gram_states": token_gram.sum(0),
        "gram_increments": gram_increments,
        "update_state_dot": torch.bmm(flat_updates[:, None, :], flat_states[:-1, :, None]).flatten(),
        "cos_sum": cos.sum(0),
        "cos2_sum": (cos * cos).sum(0),
        "angle_sum": torch.arccos(cos).sum(0) / math.pi,
    }
    out = {k: (v.cpu().numpy() if isinstance(v, torch.Tensor) else v) for k, v in out.items()}
    update_energy = update_energy.T.cpu().numpy()  # (t, L)
    initial_energy = state_energy[:, 0].cpu().numpy()
    for name, energies in matched_energies(initial_energy, update_energy, include_embedding).items():
        out[f"ref_{name}"] = energy_ratio_matrix(energies).sum(0)
    return out


def nonfinite_layer(stats: dict) -> int | None:
    """The first state index whose energy is not finite, from the statistics alone."""
    energy = np.diagonal(stats["gram_states"])
    bad = np.nonzero(~np.isfinite(energy))[0]
    return int(bad[0]) if bad.size else None
