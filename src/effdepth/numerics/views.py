"""Views: transforms applied identically to every layer's states (docs/method.md#views).

A view is written as components joined with ``+``:

- selections ``drop-pos0`` / ``pos0-only`` (position 0 is each sequence's
  first real token);
- ``token-norm`` (each token state divided by its norm);
- ``center`` (subtract each layer's mean state);
- ``top{k}pc`` / ``top{k}pc-shared`` (remove the top-k principal directions of
  each layer's mean-centred states, or of all layers pooled).

Whatever order they are written in, components apply in one documented
order: **selection, then token-norm, then center, then top-k PC**. So
``token-norm+drop-pos0`` and ``drop-pos0+token-norm`` are the same view (they
commute anyway), and ``center+drop-pos0`` centres on the tokens that remain
after dropping position 0. Means and principal directions are fitted on the
view's own token set after the transforms before them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from ..errors import EffdepthError

PAPER_VIEWS = ("default", "drop-pos0", "pos0-only", "token-norm", "top1pc", "token-norm+drop-pos0")
SELECTIONS = ("drop-pos0", "pos0-only")
_TOPK = re.compile(r"^top(\d+)pc(-shared)?$")
PARTS = ("pos0", "rest")


@dataclass(frozen=True)
class ViewSpec:
    """One parsed view. ``name`` is kept as the user wrote it.

    >>> v = parse_view("token-norm+drop-pos0")
    >>> v.selection, v.token_norm, v.parts
    ('drop-pos0', True, ('rest',))
    """

    name: str
    selection: str | None = None
    token_norm: bool = False
    center: bool = False
    top_pcs: int = 0
    shared_pcs: bool = False

    @property
    def needs_fit(self) -> bool:
        return self.center or self.top_pcs > 0

    @property
    def parts(self) -> tuple:
        if self.selection == "drop-pos0":
            return ("rest",)
        if self.selection == "pos0-only":
            return ("pos0",)
        return PARTS

    @property
    def stream(self) -> tuple:
        """Views with the same stream share one set of per-part statistics.

        Selections only pick parts, unless a fit depends on the token set.
        """
        return (
            self.token_norm,
            self.center,
            self.top_pcs,
            self.shared_pcs,
            self.selection if self.needs_fit else None,
        )

    @property
    def fit_key(self) -> tuple:
        """Views with the same fit key fit their means / PCs on the same data."""
        return (self.token_norm, self.selection)

    @property
    def canonical(self) -> str:
        parts = [self.selection] if self.selection else []
        if self.token_norm:
            parts.append("token-norm")
        if self.center:
            parts.append("center")
        if self.top_pcs:
            parts.append(f"top{self.top_pcs}pc" + ("-shared" if self.shared_pcs else ""))
        return "+".join(parts) or "default"


def parse_view(text: str) -> ViewSpec:
    """Parse one view such as ``"token-norm+drop-pos0"`` or ``"top3pc-shared"``.

    >>> parse_view("top2pc").top_pcs
    2
    """
    name = text.strip()
    if not name:
        raise EffdepthError("empty view name; use e.g. --views default,drop-pos0,token-norm,top1pc")
    fields: dict = {}
    for comp in name.split("+"):
        comp = comp.strip()
        if comp == "default":
            continue
        if comp in SELECTIONS:
            key, value = "selection", comp
        elif comp == "token-norm":
            key, value = "token_norm", True
        elif comp == "center":
            key, value = "center", True
        elif m := _TOPK.match(comp):
            k = int(m.group(1))
            if k < 1:
                raise EffdepthError(f"view {name!r}: top-k PC removal needs k >= 1, got {k}")
            key, value = "top_pcs", (k, bool(m.group(2)))
        else:
            raise EffdepthError(
                f"unknown view component {comp!r} in {name!r}; known: default, drop-pos0, pos0-only, "
                "token-norm, center, top{k}pc, top{k}pc-shared, joined with '+', or 'paper'"
            )
        if key in fields:
            raise EffdepthError(f"view {name!r} has two {key.replace('_', '-')} components; use one")
        fields[key] = value
    top = fields.pop("top_pcs", (0, False))
    return ViewSpec(name=name, top_pcs=top[0], shared_pcs=top[1], **fields)


def parse_views(views) -> list:
    """Parse ``"default,drop-pos0"``, ``"paper"`` or a sequence of names; keeps order, drops repeats.

    >>> [v.name for v in parse_views("paper")][:3]
    ['default', 'drop-pos0', 'pos0-only']
    """
    if views is None:
        views = ("default",)
    if isinstance(views, str):
        views = [v for v in views.split(",")]
    if all(isinstance(v, ViewSpec) for v in views):
        return list(views)
    names: list = []
    for v in views:
        expanded = PAPER_VIEWS if str(v).strip() == "paper" else (str(v).strip(),)
        for name in expanded:
            if name not in names:
                names.append(name)
    if not names:
        raise EffdepthError("no views given; use e.g. --views default or --views paper")
    return [parse_view(n) for n in names]


def check_width(views, width: int) -> None:
    """One-line error for a ``top{k}pc`` view that would remove k >= d directions (everything).

    >>> check_width(parse_views("default,top2pc"), 16)
    >>> check_width(parse_views("top16pc"), 16)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: view 'top16pc' removes 16 principal directions, but the states have width d = 16: with k >= d nothing but rounding noise is left; use top{k}pc with k < 16
    """
    for spec in parse_views(views):
        if spec.top_pcs >= width:
            raise EffdepthError(
                f"view {spec.name!r} removes {spec.top_pcs} principal directions, but the states have width d = {width}: "
                f"with k >= d nothing but rounding noise is left; use top{{k}}pc with k < {width}"
            )


def token_transform(states: torch.Tensor, spec: ViewSpec) -> torch.Tensor:
    """The per-token part of a view (token-norm), before any fitted step."""
    if spec.token_norm:
        norms = states.norm(dim=-1, keepdim=True)
        states = states / torch.where(norms > 0, norms, torch.ones_like(norms))
    return states


def fitted_transform(states: torch.Tensor, spec: ViewSpec, fit: dict | None) -> torch.Tensor:
    """The fitted part of a view (center, top-k PC removal) on ``(M, T, d)`` float64 states."""
    if not spec.needs_fit:
        return states
    if spec.center:
        states = states - fit["mean"][:, None, :].to(states)
    if spec.top_pcs:
        states = remove_directions(states, fit["pcs"].to(states))  # pcs (M or 1, d, k)
    return states


def remove_directions(states: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """``states - (states V) V^T``: ``states`` ``(..., T, d)`` without the span of the orthonormal
    ``directions`` ``(..., d, k)``.

    >>> remove_directions(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0], [0.0]])).tolist()
    [[0.0, 2.0], [0.0, 4.0]]
    """
    return states - (states @ directions) @ directions.transpose(-1, -2)
