"""Views of passage mode: what is pooled, and what is removed from the pooled matrices (docs/method.md#passage-mode).

A view is components joined with ``+``, acting before pooling as weights (``drop-pos0``: without the
first position, whatever token it holds, our reading of the paper's position-0 control; ``drop-bos``;
``token-norm``) or after it on each layer's N x d matrix (``length``, ``top{k}pc``). :data:`CONTROLS`
are in every result (docs/method.md#the-first-token-x-length-confound).

Views that pool alike share one stored *variant* of pooled vectors (:data:`VARIANTS`); the stage after
pooling is applied at analysis time, so ``effdepth analyse`` can add any top-k view without a forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from effdepth.errors import EffdepthError
from effdepth.numerics.view_components import parse_steps, pooled_variants

#: ``--views paper`` in passage mode: the paper's controls (PAPER-PROTOCOL section 4), position 0 left out
#: symmetrically for every model, BOS or not.
PAPER_VIEWS = ("default", "drop-pos0", "token-norm", "top1pc", "top3pc")
#: The confound controls every passage-mode result holds beside ``default`` (docs/method.md#the-first-token-x-length-confound).
CONTROLS = ("drop-pos0", "length")
#: Every stored variant, in a fixed order.
VARIANTS = pooled_variants()


@dataclass(frozen=True)
class PassageView:
    """A parsed passage view. ``name`` is canonical (components in slot order); ``steps`` its components.

    >>> v = parse_view("top1pc+token-norm")
    >>> v.name, v.variant, v.top_pcs
    ('token-norm+top1pc', 'token-norm', 1)
    """

    name: str
    steps: tuple = ()

    @property
    def variant(self) -> str:
        """The stored pooled vectors this view starts from: its steps before pooling."""
        return "+".join(s.text for s in self.steps if _before_pooling(s)) or "default"

    @property
    def top_pcs(self) -> int:
        """How many principal directions the view removes from the pooled matrices (0: none)."""
        return next((s.k for s in self.steps if s.component.slot == "principal directions"), 0)

    @property
    def pooled_stage(self) -> tuple:
        """Its steps after pooling (views of one variant differ by these alone)."""
        return tuple(s for s in self.steps if s.component.pooled)

    @property
    def weighs_by_norm(self) -> bool:
        """Whether its pooling weights need the token norms."""
        return any(s.component.weigh for s in self.steps)

    def has(self, component: str) -> bool:
        """Whether the view holds the component of that name (``top{k}pc`` for any k).

        >>> parse_view("drop-bos+top2pc").has("drop-bos"), parse_view("top2pc").has("top{k}pc")
        (True, True)
        """
        return any(s.component.name == component for s in self.steps)

    def pooling_weights(
        self, mask: torch.Tensor, first_is_bos: torch.Tensor, norms: torch.Tensor | None
    ) -> torch.Tensor:
        """``(B, T)`` float64 weights whose product with a layer's states ``(B, T, d)`` gives the view's
        pooled vectors: the tokens it keeps (``mask`` marks real tokens, ``first_is_bos`` the passages
        whose first real token is a BOS) divided by their number, then weighed (``norms``: the token
        norms, for token-norm).

        >>> parse_view("drop-bos").pooling_weights(torch.tensor([[1, 1, 1, 0]]), torch.tensor([True]), None).tolist()
        [[0.0, 0.5, 0.5, 0.0]]
        """
        keep = self.kept(mask, first_is_bos)
        weights = keep / keep.sum(dim=1, keepdim=True).clamp_min(1.0)
        for step in self.steps:
            if step.component.weigh:
                weights = step.component.weigh(weights, norms)
        return weights

    def kept(self, mask: torch.Tensor, first_is_bos: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` float64: 1 for the tokens the view keeps (``mask``'s real tokens, less what its selection drops).

        >>> parse_view("drop-pos0").kept(torch.tensor([[1, 1, 1, 0]]), torch.tensor([False])).tolist()
        [[0.0, 1.0, 1.0, 0.0]]
        """
        keep = mask.to(torch.float64)
        for step in self.steps:
            if step.component.keep:
                keep = step.component.keep(keep, first_is_bos)
        return keep

    def after_pooling(self, stack, lengths=None):
        """The view's stage after pooling applied to a layer stack of pooled matrices (the stack itself
        when it has none), ``lengths`` each passage's token count; a fitted stage keeps what it fitted in
        ``.fit`` (the last step's)."""
        for step in self.steps:
            if step.component.pooled:
                stack = step.component.pooled(stack, step.k, lengths)
        return stack


def _before_pooling(step) -> bool:
    return bool(step.component.keep or step.component.weigh)


def parse_view(text: str) -> PassageView:
    """One view from its text; a one-line error names what is not a view component.

    >>> parse_view("default"), parse_view("drop-bos+top3pc").top_pcs
    (PassageView(name='default', steps=()), 3)
    >>> parse_view("center")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: view 'center' is gone with the old token-level statistics (every estimator centres each layer across samples already); views combine drop-pos0, drop-bos, length, token-norm, top{k}pc with '+', or use 'paper'
    """
    steps = parse_steps(text)
    return PassageView("+".join(s.text for s in steps) or "default", steps)


def parse_views(views) -> list:
    """Views from a comma list, ``paper``, or a sequence; duplicates kept once, in order.

    >>> [v.name for v in parse_views("paper")]
    ['default', 'drop-pos0', 'token-norm', 'top1pc', 'top3pc']
    """
    names = views.split(",") if isinstance(views, str) else list(views or ("default",))
    out: list = []
    for name in names:
        for n in PAPER_VIEWS if str(name).strip() == "paper" else (name,):
            view = parse_view(n)
            if view not in out:
                out.append(view)
    if not out:
        raise EffdepthError("--views is empty; use e.g. --views default or --views paper")
    return out


def views_variants(views) -> tuple:
    """The stored variants the views alone need (no control), in :data:`VARIANTS` order.

    >>> views_variants(parse_views("top1pc,token-norm"))
    ('default', 'token-norm')
    """
    needed = {v.variant for v in views}
    return tuple(v for v in VARIANTS if v in needed)


def variants_for(views) -> tuple:
    """The stored variants the views and the :data:`CONTROLS` need, in :data:`VARIANTS` order.

    >>> variants_for(parse_views("top1pc,drop-bos+token-norm"))
    ('default', 'drop-pos0', 'drop-bos+token-norm')
    """
    return views_variants([*views, *(parse_view(c) for c in CONTROLS)])


def check_top_pcs(views, samples: int, width: int) -> None:
    """``top{k}pc`` needs k below both the number of passages and the hidden size.

    >>> check_top_pcs(parse_views("top3pc"), 3, 64)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: view top3pc removes 3 principal directions, but the pooled matrices have rank at most min(N, d) = min(3, 64) = 3; use a smaller k or more passages (--num-seqs)
    """
    for view in views:
        if view.top_pcs and view.top_pcs >= min(samples, width):
            raise EffdepthError(
                f"view {view.name} removes {view.top_pcs} principal directions, but the pooled matrices have rank at most "
                f"min(N, d) = min({samples}, {width}) = {min(samples, width)}; use a smaller k or more passages (--num-seqs)"
            )
