"""Views of passage mode: what is pooled, and what is removed from the pooled matrices (docs/method.md#passage-mode).

A view is components joined with ``+``. Each component is a small
registered spec (:data:`COMPONENTS`) acting at one of two stages:

- ``tokens``, before pooling: ``drop-bos`` (pool from the first non-BOS
  token: the paper's first-non-BOS pooling) and ``token-norm`` (each token
  state divided by its norm);
- ``pooled``, on the N x d pooled matrix of each layer: ``top{k}pc`` (remove
  the top-k principal directions of the column-centred matrix, fitted
  exactly on all N pooled vectors).

Views that pool alike share one stored *variant* of pooled vectors
(``default``, ``drop-bos``, ``token-norm``, ``drop-bos+token-norm``); the
pooled stage is applied at analysis time, so ``effdepth analyse`` can add
any top-k view to a saved result without a forward pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import EffdepthError

#: ``--views paper`` in passage mode: the paper's controls (PAPER-PROTOCOL section 4).
PAPER_VIEWS = ("default", "drop-bos", "token-norm", "top1pc", "top3pc")


@dataclass(frozen=True)
class Component:
    """One view component: its name (a pattern for families such as top{k}pc), its stage, what it does."""

    name: str
    stage: str  # "tokens" or "pooled"
    description: str
    pattern: str | None = None

    def matches(self, text: str):
        return re.fullmatch(self.pattern, text) if self.pattern else (text == self.name or None)


COMPONENTS = (
    Component("drop-bos", "tokens", "pool from the first non-BOS token"),
    Component("token-norm", "tokens", "each token state divided by its norm before pooling"),
    Component("top{k}pc", "pooled", "remove the top-k principal directions of each layer's centred pooled matrix",
              pattern=r"top([1-9][0-9]*)pc"),
)


@dataclass(frozen=True)
class PassageView:
    """A parsed passage view. ``name`` is canonical (components in stage order).

    >>> v = parse_view("top1pc+token-norm")
    >>> v.name, v.variant, v.top_pcs
    ('token-norm+top1pc', 'token-norm', 1)
    """

    name: str
    drop_bos: bool = False
    token_norm: bool = False
    top_pcs: int = 0

    @property
    def variant(self) -> str:
        """The stored pooled vectors this view starts from."""
        return variant_name(self.drop_bos, self.token_norm)


def variant_name(drop_bos: bool, token_norm: bool) -> str:
    """``default``, ``drop-bos``, ``token-norm`` or ``drop-bos+token-norm``.

    >>> variant_name(True, True)
    'drop-bos+token-norm'
    """
    parts = [n for n, on in (("drop-bos", drop_bos), ("token-norm", token_norm)) if on]
    return "+".join(parts) or "default"


#: Every stored variant, in a fixed order.
VARIANTS = ("default", "drop-bos", "token-norm", "drop-bos+token-norm")


def parse_view(text: str) -> PassageView:
    """One view from its text; a one-line error names what is not a passage-mode component.

    >>> parse_view("default"), parse_view("drop-bos+top3pc").top_pcs
    (PassageView(name='default', drop_bos=False, token_norm=False, top_pcs=0), 3)
    >>> parse_view("drop-pos0")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: view 'drop-pos0' is not a passage-mode view (drop-pos0 is token mode's, for --pooling none); passage views combine drop-bos, token-norm, top{k}pc with '+', or use 'paper'
    """
    name = str(text).strip()
    if name == "default":
        return PassageView("default")
    found: dict = {}
    for part in name.split("+"):
        part = part.strip()
        component = next((c for c in COMPONENTS if c.matches(part)), None)
        if component is None:
            token_mode = " is token mode's, for --pooling none" if part in ("drop-pos0", "pos0-only", "center") or \
                part.endswith("-shared") else " is not a component"
            raise EffdepthError(f"view {name!r} is not a passage-mode view ({part}{token_mode}); passage views combine "
                                "drop-bos, token-norm, top{k}pc with '+', or use 'paper'")
        if component.name in found:
            raise EffdepthError(f"view {name!r} names {component.name} twice; give each component once")
        match = component.matches(part)
        found[component.name] = int(match.group(1)) if component.pattern else True
    top = found.get("top{k}pc", 0)
    view = PassageView("", drop_bos="drop-bos" in found, token_norm="token-norm" in found, top_pcs=top)
    parts = [n for n in ("drop-bos", "token-norm") if found.get(n)] + ([f"top{top}pc"] if top else [])
    return PassageView("+".join(parts), view.drop_bos, view.token_norm, view.top_pcs)


def parse_views(views) -> list:
    """Views from a comma list, ``paper``, or a sequence; duplicates kept once, in order.

    >>> [v.name for v in parse_views("paper")]
    ['default', 'drop-bos', 'token-norm', 'top1pc', 'top3pc']
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


def variants_for(views) -> tuple:
    """The stored variants the views need, in :data:`VARIANTS` order.

    >>> variants_for(parse_views("top1pc,drop-bos+token-norm"))
    ('default', 'drop-bos+token-norm')
    """
    needed = {v.variant for v in views}
    return tuple(v for v in VARIANTS if v in needed)


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
                f"min(N, d) = min({samples}, {width}) = {min(samples, width)}; use a smaller k or more passages (--num-seqs)")
