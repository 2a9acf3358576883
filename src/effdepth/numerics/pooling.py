"""Token states -> one pooled vector per passage and layer, summed in float64 (docs/method.md#passage-mode).

Called once per layer, so a batch's states are never held for all layers at once. Every variant is one
weighted sum over the passage's tokens, ``weights (B, V, T) @ states (B, T, d)``, with weights from
:meth:`~effdepth.numerics.views.PassageView.pooling_weights`. Three per-token sums per passage and layer
feed the update diagnostic and block influence (docs/method.md, section 9):
``cos(s_{l-1}^t, s_l^t)``, ``|s_l^t - s_{l-1}^t|`` and ``|s_{l-1}^t|``.
"""

from __future__ import annotations

import torch

from effdepth.numerics.views import parse_view, variants_for

#: The per-token sums kept per passage and layer l = 1..L.
TOKEN_SUMS = ("cos_prev", "update_norm", "prev_norm")


def pooling_weights(mask: torch.Tensor, first_is_bos: torch.Tensor, views, norms: torch.Tensor | None) -> torch.Tensor:
    """``(B, V, T)`` float64 weights whose product with a layer's states gives each view's mean.

    ``views`` are parsed variants (:func:`parse_view`), ``mask`` (B, T) marks real tokens,
    ``first_is_bos`` (B,) the passages whose first real token is a BOS, ``norms`` (B, T) the token
    norms (for token-norm).

    >>> views = [parse_view("default"), parse_view("drop-bos")]
    >>> m = torch.tensor([[1, 1, 1, 0]]); w = pooling_weights(m, torch.tensor([True]), views, None)
    >>> w[0].tolist()
    [[0.3333333333333333, 0.3333333333333333, 0.3333333333333333, 0.0], [0.0, 0.5, 0.5, 0.0]]
    """
    return torch.stack([v.pooling_weights(mask, first_is_bos, norms) for v in views], dim=1)


def token_sums(
    previous: torch.Tensor,
    states: torch.Tensor,
    mask: torch.Tensor,
    prev_norms: torch.Tensor | None = None,
    norms: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(B, 3)`` per-passage sums over real tokens of :data:`TOKEN_SUMS` between a block's input and
    output (both float64); ``prev_norms`` / ``norms`` are their per-token norms when already known.
    The update is an explicit difference, never expanded from norms (consecutive states are nearly parallel).

    >>> a = torch.tensor([[[1.0, 0.0]]], dtype=torch.float64); b = torch.tensor([[[1.0, 1.0]]], dtype=torch.float64)
    >>> token_sums(a, b, torch.ones(1, 1)).tolist()
    [[0.7071067811865475, 1.0, 1.0]]
    """
    real = mask.to(torch.float64)
    prev_norms = torch.linalg.vector_norm(previous, dim=-1) if prev_norms is None else prev_norms
    norms = torch.linalg.vector_norm(states, dim=-1) if norms is None else norms
    denom = prev_norms * norms
    dots = (previous * states).sum(-1)
    cos = torch.where(denom > 0, dots / torch.where(denom > 0, denom, 1.0), 0.0)
    update = torch.linalg.vector_norm(states - previous, dim=-1)
    return torch.stack([(cos * real).sum(1), (update * real).sum(1), (prev_norms * real).sum(1)], dim=1)


class MeanReduction:
    """The mean reduction, the paper's: a passage gives one sample per layer, the mean of its tokens.

    A reduction says which variants a measurement stores (the views' and the controls'), makes the
    pooler its forward passes feed, and says where each passage's samples start in the store (``None``:
    one row per passage); :class:`~effdepth.numerics.sampling.TokenReduction` is the other.

    >>> from effdepth.numerics.views import parse_views
    >>> MeanReduction().variants(parse_views("top1pc")), MeanReduction().offsets([3, 4], [False, False], ["default"])
    (('default', 'drop-pos0'), None)
    """

    def variants(self, views) -> tuple:
        return variants_for(views)

    def pooler(self, variants, num_layers: int) -> "PassagePooler":
        return PassagePooler(variants, num_layers)

    def offsets(self, lengths, starts_with_bos, variants) -> None:
        return None

    def fingerprint(self) -> dict:
        """What stored samples of this reduction add to a checkpoint's fingerprint (the mean: nothing)."""
        return {}


class PassagePooler:
    """Pools the layers of one batch as they arrive: ``layer(l, states)`` for l = 0..L in order.

    ``pooled`` is ``(V, L+1, B, d)`` float64 (the variants in the order given), ``sums`` ``(L, B, 3)``
    (:data:`TOKEN_SUMS`). Each layer's float64 copy and token norms are made once and kept for the next.

    >>> p = PassagePooler(["default"], num_layers=1)
    >>> p.start(torch.ones(2, 3), torch.tensor([False, False]))
    >>> for l in range(2): p.layer(l, torch.ones(2, 3, 4) * (l + 1))
    >>> p.pooled.shape, p.pooled[0, 1, 0, 0].item(), p.sums[0, 0].tolist()
    (torch.Size([1, 2, 2, 4]), 2.0, [3.0, 6.0, 6.0])
    """

    def __init__(self, variants, num_layers: int):
        self.variants = tuple(variants)
        self._views = tuple(parse_view(v) for v in self.variants)  # parsed once: the hooks run per layer
        self.num_layers = int(num_layers)
        self.norm_variants = any(v.weighs_by_norm for v in self._views)
        self.pooled: torch.Tensor | None = None
        self.sums: torch.Tensor | None = None
        self._mask = self._first_is_bos = self._plain_weights = None
        self._previous = self._previous_norms = None

    def start(self, mask: torch.Tensor, first_is_bos: torch.Tensor, indices=None) -> None:
        """A new batch: its mask (B, T) and which passages start with BOS (``indices``, the passages' indices
        in the corpus, serve the token reduction's draw: a mean needs no draw)."""
        self._mask, self._first_is_bos = mask, first_is_bos.to(mask.device)
        self._plain_weights = (
            None if self.norm_variants else pooling_weights(mask, self._first_is_bos, self._views, None)
        )
        self.pooled = None
        self.sums = torch.zeros(
            self.num_layers, mask.shape[0], len(TOKEN_SUMS), dtype=torch.float64, device=mask.device
        )
        self._previous = self._previous_norms = None

    def layer(self, index: int, states: torch.Tensor) -> None:
        """Pool layer ``index`` (0 = the input of block 1) of the current batch."""
        mask = self._mask.to(states.device)
        s64 = states.detach().to(torch.float64)
        norms = torch.linalg.vector_norm(s64, dim=-1)
        weights = self._plain_weights
        if weights is None:
            weights = pooling_weights(mask, self._first_is_bos.to(states.device), self._views, norms)
        pooled = torch.bmm(weights.to(states.device), s64)  # (B, V, d)
        if self.pooled is None:
            shape = (len(self.variants), self.num_layers + 1, states.shape[0], states.shape[-1])
            self.pooled = torch.zeros(shape, dtype=torch.float64, device=states.device)
        self.pooled[:, index] = pooled.transpose(0, 1)
        if index > 0:
            self.sums[index - 1] = token_sums(self._previous, s64, mask, self._previous_norms, norms).to(
                self.sums.device
            )
        self._previous, self._previous_norms = s64, norms

    def reset(self) -> None:
        """Forget what the current batch gave (an out-of-memory retry runs it again)."""
        self.pooled = None

    def output(self) -> dict:
        """``{variant: (L+1, B, d)}`` of the batch, on the CPU (as :class:`~effdepth.numerics.sampling.TokenSampler`)."""
        pooled = self.pooled.cpu()
        return {v: pooled[i] for i, v in enumerate(self.variants)}

    def finish(self) -> None:
        """Drop the last layer's copy."""
        self._previous = self._previous_norms = None
