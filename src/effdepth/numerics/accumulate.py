"""Sufficient statistics of one token set, computed from its states in float64.

This is the only place that touches activations, with :mod:`.cka` for the
kernel similarities (whose statistics do not add up over tokens) and
:mod:`.surrogate` for the calibrated references. Everything downstream
(metrics, references, bootstrap, views, recomposition) works from these small
(L+1) x (L+1) matrices, which add up over tokens and over sequences.

Keys (M = L+1 states S_0..S_L, N analysed states):

- ``n``: number of tokens.
- ``gram_states``: <S_i, S_j>_F, per token the increments' Gram summed up
  (S_i = X_0 + ... + X_i: additions, checked for cancellation; see
  :func:`chunk_tensors`).
- ``gram_increments``: <X_i, X_j>_F for the increments X_0 = S_0,
  X_l = U_l = S_l - S_{l-1}, formed as explicit differences (never by
  expanding the state Gram matrix: consecutive states are nearly parallel
  and that expansion cancels catastrophically).
- ``update_state_dot``: <U_l, S_{l-1}>_F for l = 1..L, for cos(U_l, S_{l-1}):
  the sum of <U_l, X_k>_F over k < l (row l of ``gram_increments``), never
  from the states' Gram.
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

from .references import matched_energies, ratio_matrix_sum

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
# allocator memory instead of faulting in fresh pages: 32 measured fastest on CPU
# inside a run (SmolLM2: 4.5 MB of float64 per chunk), where the forward pass has
# just evicted the caches; 64 was a quarter slower there.
DEFAULT_CHUNK_TOKENS = 32
_PER_TOKEN_KEYS = frozenset({"cos_sum", "cos2_sum", "angle_sum"})
_REFERENCE_KEYS = frozenset({"ref_init", "ref_size", "ref_matched"})
_UPDATE_KEYS = frozenset({"gram_increments", "update_state_dot"})
# On an accelerator the bytes of a chunk's float64 states instead: chunks of a few tokens
# would leave a GPU waiting on kernel launches (some 40 per chunk and stream).
DEVICE_CHUNK_BYTES = 256 << 20


def chunk_tokens_for(states: torch.Tensor) -> int:
    """Tokens per chunk for states ``(M, T, d)`` on their device: :data:`DEFAULT_CHUNK_TOKENS`
    on the CPU, as many as :data:`DEVICE_CHUNK_BYTES` of float64 holds elsewhere (never fewer).

    >>> chunk_tokens_for(torch.zeros(25, 8, 2048))
    32
    """
    if states.device.type == "cpu":
        return DEFAULT_CHUNK_TOKENS
    m, _, d = states.shape
    return max(DEFAULT_CHUNK_TOKENS, DEVICE_CHUNK_BYTES // (8 * m * d))


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
    return {k: a[k] + b[k] for k in a}


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


#: What each similarity needs of the additive statistics to give D_eff alone (the surrogate
#: streams of the calibrated references keep only these).
DEFF_KEYS = {"frobenius": ("n", "gram_states"), "token": ("n", "cos2_sum"), "cka": ("n",), "cka-full": ("n",)}


def deff_statistics(similarities) -> tuple:
    """The additive statistics D_eff needs under ``similarities``, in :data:`STAT_KEYS` order.

    >>> deff_statistics(["cka", "frobenius"])
    ('n', 'gram_states')
    """
    wanted = {k for s in similarities for k in DEFF_KEYS[s]}
    return tuple(k for k in STAT_KEYS if k in wanted)


def chunk_statistics(states: torch.Tensor, include_embedding: bool, keys: tuple = STAT_KEYS) -> dict:
    """Statistics of a few tokens ``(M, tokens, d)``; add chunks with :func:`add_statistics`.

    ``keys`` picks which of :data:`STAT_KEYS` to compute (always ``n``); the
    per-token products are formed only when a key needs them.

    >>> st = chunk_statistics(torch.ones(3, 2, 4), False, ("n", "gram_states"))
    >>> float(st["n"]), st["gram_states"][0].tolist()
    (2.0, [8.0, 8.0, 8.0])
    """
    return statistics_to_numpy(chunk_tensors(states, include_embedding, keys))


def chunk_tensors(states: torch.Tensor, include_embedding: bool, keys: tuple = STAT_KEYS) -> dict:
    """:func:`chunk_statistics` left on the states' device as float64 tensors (``n`` stays a number).

    Add chunks with :func:`add_statistics` and convert the sum once with
    :func:`statistics_to_numpy`: on a GPU the host then waits for the device
    once per sequence, not once per chunk.

    One batched product per chunk: the per-token Gram of the increments
    (explicit differences). The per-token Gram of the states follows from it
    by cumulative sums, S_i = X_0 + ... + X_i (additions only; where they
    would cancel more than :data:`CUMSUM_CANCELLATION` allows, it is formed
    directly, see :func:`_per_token_state_gram`).

    >>> chunk_tensors(torch.ones(3, 2, 4), False, ("n", "gram_states"))["gram_states"].dtype
    torch.float64
    """
    m, t, d = states.shape
    out = {"n": np.asarray(float(t))}
    wanted = set(keys)
    if not wanted & (_PER_TOKEN_KEYS | _REFERENCE_KEYS | _UPDATE_KEYS | {"gram_states"}):
        return out
    z = states.to(torch.float64)
    if not wanted & (_PER_TOKEN_KEYS | _REFERENCE_KEYS | _UPDATE_KEYS):
        flat_states = z.reshape(m, t * d)
        out["gram_states"] = flat_states @ flat_states.T
        return out
    increments = torch.empty_like(z)
    increments[0] = z[0]
    torch.sub(z[1:], z[:-1], out=increments[1:])
    per_token = increments.transpose(0, 1)  # (t, M, d)
    increment_gram = per_token @ per_token.transpose(1, 2)  # (t, M, M)
    gram_increments = increment_gram.sum(0)
    if "gram_increments" in wanted:
        out["gram_increments"] = gram_increments
    if "update_state_dot" in wanted:
        # S_{l-1} = X_0 + U_1 + ... + U_{l-1}, so <U_l, S_{l-1}> sums row l of the increments'
        # Gram left of the diagonal: every term from explicit differences.
        out["update_state_dot"] = torch.tril(gram_increments, diagonal=-1).sum(dim=1)[1:]
    if not wanted & (_PER_TOKEN_KEYS | _REFERENCE_KEYS | {"gram_states"}):
        return out
    token_gram = _per_token_state_gram(z, increment_gram)
    if "gram_states" in wanted:
        out["gram_states"] = token_gram.sum(0)
    if wanted & _PER_TOKEN_KEYS:
        out.update(_cosine_sums(token_gram, wanted))
    refs = [k for k in ("ref_init", "ref_size", "ref_matched") if k in wanted]
    if refs:
        update_energy = increment_gram.diagonal(dim1=1, dim2=2)[:, 1:]  # (t, L)
        initial_energy = token_gram[:, 0, 0]
        for name, energies in matched_energies(initial_energy, update_energy, include_embedding).items():
            if f"ref_{name}" in refs:
                out[f"ref_{name}"] = ratio_matrix_sum(energies)
    return out


#: Most cancellation allowed when summing increments into the states' Gram: the squared sum of
#: the increments' norms may exceed a state's energy by this factor (about 4 of float64's 16
#: digits lost at worst); beyond it the states' Gram is formed directly.
CUMSUM_CANCELLATION = 1e4


def _per_token_state_gram(z: torch.Tensor, increment_gram: torch.Tensor) -> torch.Tensor:
    """Per-token Gram of the states ``(t, M, M)``, from the increments' Gram by cumulative sums.

    The rounding of <S_i, S_j> summed from increments is bounded by the
    products of the summed increment norms; where that bound exceeds a
    state's own energy by more than :data:`CUMSUM_CANCELLATION` (updates that
    nearly erase the state), the chunk's Gram is formed from the states. The
    diagonal (the energies every cosine divides by) is always taken from the
    states themselves.
    """
    gram = increment_gram.cumsum(1).cumsum(2)
    energy = torch.linalg.vecdot(z, z, dim=-1).T  # (t, M), direct (faster than square().sum())
    reach = increment_gram.diagonal(dim1=1, dim2=2).clamp_min(0).sqrt().cumsum(1).square()
    if bool((reach > CUMSUM_CANCELLATION * energy).any()):
        per_token = z.transpose(0, 1)
        gram = per_token @ per_token.transpose(1, 2)
    gram.diagonal(dim1=1, dim2=2).copy_(energy)
    return gram


def statistics_to_numpy(stats: dict) -> dict:
    """The statistics as float64 numpy arrays (tensors copied to the host).

    >>> statistics_to_numpy({"n": np.asarray(2.0), "gram_states": torch.eye(2, dtype=torch.float64)})["gram_states"]
    array([[1., 0.],
           [0., 1.]])
    """
    return {k: (v.cpu().numpy() if isinstance(v, torch.Tensor) else v) for k, v in stats.items()}


def _cosine_sums(token_gram: torch.Tensor, wanted: set) -> dict:
    """Per-token sums of cos, cos^2 and arccos/pi between states, from the per-token Gram ``(t, M, M)``.

    Formed over the pairs i < j only (the matrices are symmetric); a state
    compared with itself is identical even when it is zero: cos 1, angle 0.
    """
    t, m, _ = token_gram.shape
    rows, cols = torch.triu_indices(m, m, offset=1, device=token_gram.device)
    norms = token_gram.diagonal(dim1=1, dim2=2).clamp_min(0).sqrt()  # (t, M)
    denom = norms[:, rows] * norms[:, cols]
    cos = torch.where(denom > 0, token_gram[:, rows, cols] / torch.where(denom > 0, denom, 1.0), 0.0).clamp(-1.0, 1.0)
    pairs = {"cos_sum": (cos, 1.0), "cos2_sum": (cos * cos, 1.0), "angle_sum": (torch.arccos(cos) / math.pi, 0.0)}
    out = {}
    for key, (values, same) in pairs.items():
        if key in wanted:
            full = token_gram.new_full((m, m), same * t)
            full[rows, cols] = values.sum(0)
            full[cols, rows] = full[rows, cols]
            out[key] = full
    return out


def nonfinite_layer(stats: dict) -> int | None:
    """The first state index whose energy is not finite, from the statistics alone (``None``
    when they carry no state energies)."""
    if "gram_states" not in stats:
        return None
    energy = np.diagonal(stats["gram_states"])
    bad = np.nonzero(~np.isfinite(energy))[0]
    return int(bad[0]) if bad.size else None
