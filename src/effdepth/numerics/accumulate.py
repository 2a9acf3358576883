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

import functools
import math

import numpy as np
import torch

from .references import matched_energies, ratio_matrix_sum
from .similarities import get_similarity

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
#: Read by the "token" similarity alone (its D_eff and references): an accumulator for other
#: similarities skips them.
TOKEN_KEYS = ("cos2_sum", "ref_init", "ref_size", "ref_matched")
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
    return sums_in_chunks(states, {None: SequenceSums(include_embedding)}, {}, chunk_tokens)[None]


def sums_in_chunks(states: torch.Tensor, sums: dict, transforms: dict, chunk_tokens: int) -> dict:
    """Feed one sequence's states ``(M, T, d)`` to every :class:`SequenceSums` of ``sums``, chunk by
    chunk, and return each one's ``(pos0, rest)`` as numpy (``rest`` ``None`` when T = 1).

    Each chunk is converted to float64 once and shared; ``transforms[key]`` (when given) maps it
    for ``sums[key]``, and must act per token, so chunking is exact. One copy to the host per
    sequence: a device is waited for here, not per chunk.

    >>> x = torch.randn(3, 5, 4, dtype=torch.float64)
    >>> got = sums_in_chunks(x, {"a": SequenceSums(False), "b": SequenceSums(False)}, {"b": lambda z: 2 * z}, 2)
    >>> float(got["a"][1]["n"]), bool(np.allclose(got["b"][1]["gram_states"], 4 * got["a"][1]["gram_states"]))
    (4.0, True)
    """
    size = max(1, chunk_tokens)
    for start in range(0, states.shape[1], size):
        chunk = states[:, start : start + size].to(torch.float64)
        for key, total in sums.items():
            transform = transforms.get(key)
            total.add(chunk if transform is None else transform(chunk))
    return {
        key: tuple(None if part is None else statistics_to_numpy(part) for part in total.finish())
        for key, total in sums.items()
    }


def statistics_for(similarities) -> tuple:
    """The additive statistics an accumulator keeps for ``similarities``: every key, less
    :data:`TOKEN_KEYS` unless "token" is among them.

    >>> len(statistics_for(["cka", "frobenius"])), len(statistics_for(["token"])) == len(STAT_KEYS)
    (6, True)
    """
    needs_token_keys = any(get_similarity(s).needs_token_keys for s in similarities)
    return STAT_KEYS if needs_token_keys else tuple(k for k in STAT_KEYS if k not in TOKEN_KEYS)


def deff_statistics(similarities) -> tuple:
    """The additive statistics D_eff needs under ``similarities``, in :data:`STAT_KEYS` order.

    >>> deff_statistics(["cka", "frobenius"])
    ('n', 'gram_states')
    """
    wanted = {k for s in similarities for k in get_similarity(s).deff_keys}
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

    One chunk through :class:`SequenceSums`, its tokens taken as one part.

    >>> chunk_tensors(torch.ones(3, 2, 4), False, ("n", "gram_states"))["gram_states"].dtype
    torch.float64
    """
    sums = SequenceSums(include_embedding, keys, split_first=False)
    sums.add(states.to(torch.float64))
    return sums.finish()[1]


#: Bytes of one stream's per-token ``(tokens, M, M)`` float64 products reduced together (2 MiB:
#: a 256-token sequence of a 30-layer model, in cache). The products are formed chunk by chunk
#: (:data:`DEFAULT_CHUNK_TOKENS`) but reduced (the states' Gram, cosines, references, the sums)
#: once per group: most of the cost of a small chunk was its some 40 small operations.
GROUP_BYTES = 2 << 20


def group_tokens_for(num_states: int, chunk_tokens: int = 1) -> int:
    """Tokens whose per-token products :class:`SequenceSums` reduces at once: as many as
    :data:`GROUP_BYTES` holds, never fewer than a chunk.

    >>> group_tokens_for(31), group_tokens_for(31, 4096)
    (272, 4096)
    """
    return max(int(chunk_tokens), GROUP_BYTES // (8 * num_states * num_states), 1)


class SequenceSums:
    """The additive statistics (:data:`STAT_KEYS`, or ``keys``) of one sequence fed in chunks of
    tokens, as two parts: position 0 and the other positions (``split_first=False``: one part).

    Each chunk ``(M, t, d)`` (float64, in order) gives its tokens' increments'
    Gram in one batched product while the chunk is in cache. The products of
    up to :func:`group_tokens_for` tokens are then reduced together: the
    states' Gram by cumulative sums (checked for cancellation chunk by chunk,
    see :func:`_direct_state_gram`), the cosines, the references and each
    part's sums. Where chunks and groups end changes nothing beyond rounding.

    >>> s = torch.randn(3, 10, 4, dtype=torch.float64)
    >>> sums = SequenceSums(False); sums.add(s[:, :4]); sums.add(s[:, 4:])
    >>> pos0, rest = sums.finish()
    >>> float(pos0["n"]), float(rest["n"])
    (1.0, 9.0)
    >>> bool(torch.allclose(pos0["gram_states"] + rest["gram_states"], s.flatten(1) @ s.flatten(1).T))
    True
    """

    def __init__(
        self,
        include_embedding: bool,
        keys: tuple = STAT_KEYS,
        *,
        split_first: bool = True,
        group_tokens: int | None = None,
    ):
        self.include_embedding = include_embedding
        self.wanted = set(keys)
        self.split_first = split_first
        self.group_tokens = group_tokens
        self.per_token = bool(self.wanted & (_PER_TOKEN_KEYS | _REFERENCE_KEYS | _UPDATE_KEYS))
        self.state_gram = bool(self.wanted & (_PER_TOKEN_KEYS | _REFERENCE_KEYS | {"gram_states"}))
        self.parts: list = [None, None]  # position 0, the rest (everything when not split)
        # Per chunk not yet reduced: increments' Gram (t, M, M), state energies (t, M), direct Gram.
        self._pending: list = []
        self._pending_tokens = 0
        self._tokens = 0  # fed so far
        self._reduced = 0  # of those, reduced into the parts
        self._shape = None  # (M, dtype, device) of the first chunk

    def add(self, z: torch.Tensor) -> None:
        """Feed the next chunk of the sequence's states ``(M, t, d)``, float64."""
        m, t, _ = z.shape
        if self._shape is None:
            self._shape = (m, z.dtype, z.device)
            if self.group_tokens is None:
                self.group_tokens = group_tokens_for(m, t)
        if t == 0:
            return
        start = self._tokens
        self._tokens += t
        if not self.per_token:  # n and at most the states' Gram: no per-token product needed
            for part, lo, hi in self._part_ranges(start, t):
                sums = {"n": np.asarray(float(hi - lo))}
                if "gram_states" in self.wanted:
                    flat = z[:, lo:hi].reshape(m, -1)
                    sums["gram_states"] = flat @ flat.T
                self._add_part(part, sums)
            self._reduced = self._tokens
            return
        # The increments are written token-major, (t, M, d): the batched product below then reads
        # contiguous matrices (a sixth faster than through a transposed view, the same numbers).
        per_token = z.new_empty(t, m, z.shape[-1])
        increments = per_token.transpose(0, 1)  # (M, t, d)
        increments[0] = z[0]
        torch.sub(z[1:], z[:-1], out=increments[1:])
        increment_gram = per_token @ per_token.transpose(1, 2)  # (t, M, M): the one product
        energy = direct = None
        if self.state_gram:
            energy = torch.linalg.vecdot(z, z, dim=-1).T  # (t, M), direct (faster than square().sum())
            direct = _direct_state_gram(z, increment_gram, energy)
        self._pending.append((increment_gram, energy, direct))
        self._pending_tokens += t
        if self._pending_tokens >= self.group_tokens:
            self._reduce()

    def finish(self) -> tuple:
        """``(pos0, rest)`` as float64 tensors on the states' device (``n`` a number); a part
        without a token is ``None`` (``pos0`` always, when not split; ``rest`` then holds zeros
        for a sequence of no token)."""
        self._reduce()
        if self._tokens == 0 and not self.split_first:
            return None, self._zeros()
        return tuple(None if part is None else self._complete(part) for part in self.parts)

    def _part_ranges(self, start: int, t: int) -> list:
        """``(part, lo, hi)``: which of ``t`` tokens from sequence position ``start`` go to which part."""
        if not self.split_first or start > 0:
            return [(1, 0, t)]
        return [(0, 0, 1)] + ([(1, 1, t)] if t > 1 else [])

    def _add_part(self, part: int, sums: dict) -> None:
        self.parts[part] = sums if self.parts[part] is None else add_statistics(self.parts[part], sums)

    def _reduce(self) -> None:
        """Reduce the pending chunks' per-token products into the parts."""
        if not self._pending:
            return
        pending, self._pending, self._pending_tokens = self._pending, [], 0
        increment_gram = _joined([g for g, _, _ in pending])
        t = increment_gram.shape[0]
        token_gram = energy = None
        if self.state_gram:
            energy = _joined([e for _, e, _ in pending])
            token_gram = increment_gram.cumsum(1).cumsum(2)
            at = 0
            for g, _, direct in pending:
                if direct is not None:  # updates nearly erase a state here: formed from the states
                    token_gram[at : at + g.shape[0]] = direct
                at += g.shape[0]
            token_gram.diagonal(dim1=1, dim2=2).copy_(energy)
        cosines = _cosine_values(token_gram, self.wanted) if self.wanted & _PER_TOKEN_KEYS else {}
        refs = self.wanted & _REFERENCE_KEYS
        for part, lo, hi in self._part_ranges(self._reduced, t):
            sums = {"n": np.asarray(float(hi - lo)), "gram_increments": increment_gram[lo:hi].sum(0)}
            if "gram_states" in self.wanted:
                sums["gram_states"] = token_gram[lo:hi].sum(0)
            for key, values in cosines.items():
                sums[key] = values[lo:hi].sum(0)
            if refs:
                update_energy = increment_gram[lo:hi].diagonal(dim1=1, dim2=2)[:, 1:]  # (t, L)
                for name, e in matched_energies(energy[lo:hi, 0], update_energy, self.include_embedding).items():
                    if f"ref_{name}" in refs:
                        sums[f"ref_{name}"] = ratio_matrix_sum(e)
            self._add_part(part, sums)
        self._reduced += t

    def _complete(self, sums: dict) -> dict:
        """A part's statistics under :data:`STAT_KEYS` names, only those wanted: the cosine sums
        over the pairs i < j spread into full matrices, ``update_state_dot`` from the summed
        increments' Gram."""
        out = {"n": sums["n"]}
        m = self._shape[0]
        for key in STAT_KEYS[1:]:
            if key not in self.wanted:
                continue
            if key == "update_state_dot":
                # S_{l-1} = X_0 + U_1 + ... + U_{l-1}, so <U_l, S_{l-1}> sums row l of the increments'
                # Gram left of the diagonal: every term from explicit differences.
                out[key] = torch.tril(sums["gram_increments"], diagonal=-1).sum(dim=1)[1:]
            elif key in _PER_TOKEN_KEYS:
                out[key] = _spread_pairs(sums[key], m, 0.0 if key == "angle_sum" else float(sums["n"]))
            else:
                out[key] = sums[key]
        return out

    def _zeros(self) -> dict:
        """The statistics of no token at all."""
        m, dtype, device = self._shape
        zeros = empty_statistics(m, self.include_embedding)
        return {
            k: v if k == "n" else torch.as_tensor(v, dtype=dtype, device=device)
            for k, v in zeros.items()
            if k in self.wanted | {"n"}
        }


def _joined(tensors: list) -> torch.Tensor:
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


#: Most cancellation allowed when summing increments into the states' Gram: the squared sum of
#: the increments' norms may exceed a state's energy by this factor (about 4 of float64's 16
#: digits lost at worst); beyond it the states' Gram is formed directly.
CUMSUM_CANCELLATION = 1e4


def _direct_state_gram(z: torch.Tensor, increment_gram: torch.Tensor, energy: torch.Tensor) -> torch.Tensor | None:
    """The chunk's per-token Gram of the states ``(t, M, M)`` formed from the states where summing
    the increments' Gram would cancel; ``None`` (the usual case) where it would not.

    The rounding of <S_i, S_j> summed from increments is bounded by the
    products of the summed increment norms; where that bound exceeds a
    state's own energy (``energy`` ``(t, M)``, measured directly) by more
    than :data:`CUMSUM_CANCELLATION` (updates that nearly erase the state),
    the chunk's Gram is formed from the states. The diagonal (the energies
    every cosine divides by) is always taken from the states themselves.
    """
    reach = increment_gram.diagonal(dim1=1, dim2=2).clamp_min(0).sqrt().cumsum(1).square()
    if not bool((reach > CUMSUM_CANCELLATION * energy).any()):
        return None
    per_token = z.transpose(0, 1)
    return per_token @ per_token.transpose(1, 2)


def statistics_to_numpy(stats: dict) -> dict:
    """The statistics as float64 numpy arrays (tensors copied to the host).

    >>> statistics_to_numpy({"n": np.asarray(2.0), "gram_states": torch.eye(2, dtype=torch.float64)})["gram_states"]
    array([[1., 0.],
           [0., 1.]])
    """
    return {k: (v.cpu().numpy() if isinstance(v, torch.Tensor) else v) for k, v in stats.items()}


def _cosine_values(token_gram: torch.Tensor, wanted: set) -> dict:
    """Per-token cos, cos^2 and arccos/pi between states over the pairs i < j, ``(t, M(M-1)/2)``,
    from the per-token Gram ``(t, M, M)`` (the matrices are symmetric; the diagonal is set by
    :func:`_spread_pairs`). A pair with a zero state has cosine 0.
    """
    rows, cols = _pairs(token_gram.shape[-1], token_gram.device)
    norms = token_gram.diagonal(dim1=1, dim2=2).clamp_min(0).sqrt()  # (t, M)
    denom = norms[:, rows] * norms[:, cols]
    cos = torch.where(denom > 0, token_gram[:, rows, cols] / torch.where(denom > 0, denom, 1.0), 0.0).clamp(-1.0, 1.0)
    values = {"cos_sum": lambda: cos, "cos2_sum": lambda: cos * cos, "angle_sum": lambda: torch.arccos(cos) / math.pi}
    return {key: make() for key, make in values.items() if key in wanted}


@functools.lru_cache(maxsize=8)
def _pairs(m: int, device: torch.device) -> torch.Tensor:
    """Row and column indices ``(2, M(M-1)/2)`` of the pairs i < j, made once per size and device."""
    return torch.triu_indices(m, m, offset=1, device=device)


def _spread_pairs(pair_sums: torch.Tensor, m: int, diagonal: float) -> torch.Tensor:
    """The symmetric ``(M, M)`` matrix of sums over the pairs i < j, ``diagonal`` on its diagonal
    (a state compared with itself is identical even when it is zero: cos 1, angle 0, per token).

    >>> _spread_pairs(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), 3, 5.0).tolist()
    [[5.0, 1.0, 2.0], [1.0, 5.0, 3.0], [2.0, 3.0, 5.0]]
    """
    rows, cols = _pairs(m, pair_sums.device)
    full = pair_sums.new_full((m, m), diagonal)
    full[rows, cols] = pair_sums
    full[cols, rows] = pair_sums
    return full


def nonfinite_layer(stats: dict) -> int | None:
    """The first state index whose energy is not finite, from the statistics alone (``None``
    when they carry no state energies)."""
    if "gram_states" not in stats:
        return None
    energy = np.diagonal(stats["gram_states"])
    bad = np.nonzero(~np.isfinite(energy))[0]
    return int(bad[0]) if bad.size else None
