"""The token reduction: a passage gives its tokens as samples, not their mean (docs/method.md#token-reduction).

Per passage, the positions a view keeps, or ``k`` of them drawn without replacement under the seed
(memory stays bounded). Every later stage is the passage analysis's; the bootstrap's units are blocks
of whole passages (:func:`sample_units`). A passage's draw depends on the seed, its index and the
view's selection alone, never on its batch; views that select alike (``default`` and ``token-norm``)
draw the same positions, so their numbers are paired token by token.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from effdepth.errors import EffdepthError
from effdepth.numerics.hsic_resample import Units
from effdepth.numerics.pooling import TOKEN_SUMS, MeanReduction, token_sums
from effdepth.numerics.views import parse_view, views_variants


def sample_reduction(pooling: str, tokens_per_passage: int | None = None, seed: int = 0):
    """The reduction ``--pooling`` names: ``mean`` (one sample per passage) or ``none`` (its tokens).

    >>> sample_reduction("none", 8).pooler(["default"], 2).k
    8
    """
    return MeanReduction() if pooling == "mean" else TokenReduction(tokens_per_passage, seed)


@dataclass(frozen=True)
class TokenReduction:
    """The token reduction: ``k`` positions per passage (``None``: every kept token), drawn under ``seed``;
    a reduction as :class:`~effdepth.numerics.pooling.MeanReduction` is (only the views' variants: the
    controls are about a passage's mean)."""

    k: int | None = None
    seed: int = 0

    def variants(self, views) -> tuple:
        return views_variants(views)

    def pooler(self, variants, num_layers: int) -> "TokenSampler":
        return TokenSampler(variants, num_layers, k=self.k, seed=self.seed)

    def fingerprint(self) -> dict:
        return {"tokens": {"reduction": "tokens", "tokens_per_passage": self.k, "seed": self.seed}}

    def offsets(self, lengths, starts_with_bos, variants) -> dict:
        """``{variant: (N+1,)}``: where each passage's samples start, per variant (:func:`sample_offsets`), for
        passages of ``lengths`` tokens, ``starts_with_bos`` marking those whose first token is BOS."""
        for v in variants:
            kept = sample_counts(lengths, starts_with_bos, parse_view(v), None)
            short = np.flatnonzero(kept < (self.k or 0))
            if len(short):
                raise EffdepthError(
                    f"--tokens-per-passage {self.k} is more than passage(s) {', '.join(map(str, short[:4]))} hold "
                    f"(as few as {int(kept[short].min())} tokens under view {v}); lower it, leave it out for every "
                    "token, or give longer passages (--seq-len, --passage-split windows)"
                )
        return {v: sample_offsets(sample_counts(lengths, starts_with_bos, parse_view(v), self.k)) for v in variants}


def selection_key(variant) -> int:
    """A stable number for the tokens a variant selects (its selection steps alone: token-norm selects as default).

    >>> selection_key(parse_view("default")) == selection_key(parse_view("token-norm"))
    True
    """
    selection = "+".join(s.text for s in variant.steps if s.component.keep) or "all"
    return int.from_bytes(hashlib.sha256(selection.encode()).digest()[:4], "little")


def sample_positions(kept: np.ndarray, k: int | None, seed: int, passage: int, key: int) -> np.ndarray:
    """The positions of one passage's samples: those ``kept`` marks (``(T,)`` booleans), or ``k`` of them drawn
    without replacement under ``(seed, passage, key)``, in order.

    >>> kept = np.array([True, True, True, True, False])
    >>> sample_positions(kept, None, 0, 3, 1).tolist(), len(sample_positions(kept, 2, 0, 3, 1))
    ([0, 1, 2, 3], 2)
    >>> bool((sample_positions(kept, 2, 0, 3, 1) == sample_positions(kept, 2, 0, 3, 1)).all())
    True
    """
    positions = np.flatnonzero(kept)
    if k is None or k >= len(positions):
        return positions
    rng = np.random.default_rng([int(seed), int(passage), int(key)])
    return np.sort(rng.choice(positions, size=int(k), replace=False))


def sample_counts(lengths, starts_with_bos, variant, k: int | None) -> np.ndarray:
    """How many samples each passage gives under ``variant``: its kept positions, at most ``k``.

    >>> sample_counts([4, 6], [True, False], parse_view("drop-bos"), 4).tolist()
    [3, 4]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    dropped = np.zeros(len(lengths), dtype=np.int64)
    if variant.has("drop-pos0"):
        dropped[:] = 1
    elif variant.has("drop-bos"):
        dropped = np.asarray(starts_with_bos, dtype=np.int64)
    kept = np.clip(lengths - dropped, 0, None)
    return kept if k is None else np.minimum(kept, int(k))


def sample_offsets(counts) -> np.ndarray:
    """``(N+1,)`` where each passage's samples start in the store (the last: how many samples there are).

    >>> sample_offsets([3, 0, 2]).tolist()
    [0, 3, 3, 5]
    """
    return np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))]).astype(np.int64)


def sample_units(passage_units: Units, offsets: np.ndarray) -> Units:
    """The bootstrap's units in sample space: each unit's passages (blocks of consecutive passages) with
    all their samples, so a passage's tokens are resampled together.

    >>> sample_units(Units.blocks(4, 2), np.array([0, 3, 5, 6, 9])).bounds.tolist()
    [0, 5, 9]
    """
    return Units(np.asarray(offsets, dtype=np.int64)[passage_units.bounds])


class TokenSampler:
    """Keeps the sampled tokens of one batch's passages as the layers arrive: ``layer(l, states)`` for l = 0..L.

    ``start(mask, first_is_bos, indices)`` draws each variant's positions (``indices``: the passages' in the
    corpus); ``samples[variant]`` is then ``(L+1, s, d)`` float64 in batch order (token-norm variants divided
    by each token's norm); ``sums`` as :class:`~effdepth.numerics.pooling.PassagePooler` gives it.

    >>> t = TokenSampler(["default", "drop-pos0"], num_layers=1, k=None, seed=0)
    >>> t.start(torch.tensor([[1, 1, 1], [1, 1, 0]]), torch.tensor([False, False]), [7, 8])
    >>> for l in range(2): t.layer(l, torch.arange(12.0).reshape(2, 3, 2) + l)
    >>> t.samples["default"].shape, t.samples["drop-pos0"][1].tolist()
    (torch.Size([2, 5, 2]), [[3.0, 4.0], [5.0, 6.0], [9.0, 10.0]])
    """

    def __init__(self, variants, num_layers: int, *, k: int | None, seed: int):
        self.variants = tuple(variants)
        self._views = {v: parse_view(v) for v in self.variants}
        self._keys = {v: selection_key(view) for v, view in self._views.items()}
        self.num_layers, self.k, self.seed = int(num_layers), k, int(seed)
        self.samples: dict = {}
        self.sums: torch.Tensor | None = None

    def start(self, mask: torch.Tensor, first_is_bos: torch.Tensor, indices) -> None:
        """A new batch: its mask (B, T), which passages start with BOS, and the passages' indices in the corpus."""
        self._mask = mask
        self._index = {}
        for v, view in self._views.items():
            kept = view.kept(mask.cpu(), first_is_bos.cpu()).numpy() > 0
            positions = [
                sample_positions(kept[b], self.k, self.seed, int(i), self._keys[v]) for b, i in enumerate(indices)
            ]
            rows = np.concatenate([np.full(len(p), b, dtype=np.int64) for b, p in enumerate(positions)])
            self._index[v] = (torch.from_numpy(rows), torch.from_numpy(np.concatenate(positions).astype(np.int64)))
        self.reset()

    def reset(self) -> None:
        """Forget what the current batch gave (an out-of-memory retry runs it again)."""
        self.samples = {}
        self.sums = torch.zeros(
            self.num_layers, self._mask.shape[0], len(TOKEN_SUMS), dtype=torch.float64, device=self._mask.device
        )
        self._previous = self._previous_norms = None

    def output(self) -> dict:
        """``{variant: (L+1, s, d)}`` of the batch, on the CPU."""
        return {v: x.cpu() for v, x in self.samples.items()}

    def layer(self, index: int, states: torch.Tensor) -> None:
        """Keep layer ``index``'s samples (0 = the input of block 1) of the current batch."""
        s64 = states.detach().to(torch.float64)
        norms = torch.linalg.vector_norm(s64, dim=-1)
        for v in self.variants:
            rows, cols = (i.to(states.device) for i in self._index[v])
            picked = s64[rows, cols]
            if self._views[v].weighs_by_norm:
                picked = picked / torch.where(norms[rows, cols] > 0, norms[rows, cols], 1.0)[:, None]
            if v not in self.samples:
                self.samples[v] = torch.zeros(
                    (self.num_layers + 1,) + tuple(picked.shape), dtype=torch.float64, device=states.device
                )
            self.samples[v][index] = picked
        if index > 0:
            mask = self._mask.to(states.device)
            self.sums[index - 1] = token_sums(self._previous, s64, mask, self._previous_norms, norms).to(
                self.sums.device
            )
        self._previous, self._previous_norms = s64, norms

    def finish(self) -> None:
        """Drop the last layer's copy."""
        self._previous = self._previous_norms = None
