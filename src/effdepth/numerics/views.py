"""Token mode's views: components joined with ``+``, applied identically to every layer (docs/method.md#views).

The components are registered specs (:mod:`effdepth.numerics.view_components`):

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

:meth:`ViewSpec.transform` is the one per-token transform of a view: the
additive streams apply it to chunks of a sequence, cka and cka-full to the
kept positions (:meth:`ViewSpec.view_states`), skipping what their own
centring removes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import EffdepthError
from .view_components import PARTS, parse_steps

PAPER_VIEWS = ("default", "drop-pos0", "pos0-only", "token-norm", "top1pc", "token-norm+drop-pos0")


@dataclass(frozen=True)
class ViewSpec:
    """One parsed view: ``name`` as the user wrote it, ``steps`` its components in the order they apply.

    >>> v = parse_view("token-norm+drop-pos0")
    >>> v.selection, v.canonical, v.parts
    ('drop-pos0', 'drop-pos0+token-norm', ('rest',))
    """

    name: str
    steps: tuple = ()

    def _step(self, slot: str):
        return next((s for s in self.steps if s.component.slot == slot), None)

    @property
    def canonical(self) -> str:
        """The view's components in the order they apply: the name its saved statistics go by."""
        return "+".join(s.text for s in self.steps) or "default"

    @property
    def selection(self) -> str | None:
        """The component that picks positions (``drop-pos0``, ``pos0-only``), if any."""
        step = self._step("selection")
        return None if step is None else step.text

    @property
    def top_pcs(self) -> int:
        """How many principal directions the view removes (0: none)."""
        step = self._step("principal directions")
        return 0 if step is None else step.k

    @property
    def parts(self) -> tuple:
        """Which of position 0 and the rest of each sequence the view keeps."""
        step = self._step("selection")
        return PARTS if step is None else step.component.parts

    @property
    def max_tokens(self) -> int | None:
        """The most tokens of a sequence the view keeps (``None``: no limit)."""
        step = self._step("selection")
        return None if step is None else step.component.max_tokens

    @property
    def needs_fit(self) -> bool:
        """Whether a step acts with a fit (a mean, principal directions) estimated first."""
        return any(s.component.apply for s in self.steps)

    @property
    def needs_covariance(self) -> bool:
        """Whether its fit needs each layer's covariance, not only its mean."""
        return any(s.component.fit for s in self.steps)

    @property
    def transforms(self) -> bool:
        """Whether the view changes the states it keeps (not a selection alone)."""
        return any(s.component.tokens or s.component.apply for s in self.steps)

    @property
    def stream(self) -> tuple:
        """Views with the same stream share one set of per-part statistics.

        Selections only pick parts, unless a fit depends on the token set.
        """
        return (tuple(s.text for s in self.steps if not s.component.select), self.selection if self.needs_fit else None)

    @property
    def fit_key(self) -> tuple:
        """Views with the same fit key fit their means / PCs on the same data: the steps before the fitted ones."""
        return tuple(s.text for s in self.steps if not s.component.apply)

    def select(self, states: torch.Tensor) -> torch.Tensor:
        """The positions of one sequence ``(M, T, d)`` the view keeps (a slice, not a copy)."""
        step = self._step("selection")
        return states if step is None else step.component.select(states)

    def before_fit(self, states: torch.Tensor) -> torch.Tensor:
        """The per-token steps that come before any fitted one: what a fit is estimated on."""
        for step in self.steps:
            if step.component.tokens:
                states = step.component.tokens(states)
        return states

    def transform(self, states: torch.Tensor, fit: dict | None = None, *, centred: bool = False) -> torch.Tensor:
        """Every per-token step, in order, of float states ``(M, T, d)`` (any positions; the selection
        is :meth:`select`'s): token-norm, then the fitted steps with ``fit``. ``centred``: the caller
        centres each layer over the tokens itself, so the steps that centring removes anyway
        (``centred_away``: center) are skipped.

        >>> v = parse_view("token-norm+center")
        >>> x = torch.tensor([[[3.0, 0.0], [0.0, 2.0]]], dtype=torch.float64)
        >>> v.transform(x, centred=True).tolist()
        [[[1.0, 0.0], [0.0, 1.0]]]
        >>> v.transform(x, {"mean": torch.tensor([[0.5, 0.5]], dtype=torch.float64)}).tolist()
        [[[0.5, -0.5], [-0.5, 0.5]]]
        """
        for step in self.steps:
            component = step.component
            if component.tokens:
                states = component.tokens(states)
            elif component.apply and not (centred and component.centred_away):
                if fit is None:
                    raise ValueError(f"view {self.name!r} needs its fit first")
                states = component.apply(states, fit, step.k)
        return states

    def view_states(
        self,
        states: torch.Tensor,
        fit: dict | None = None,
        *,
        dtype: torch.dtype = torch.float64,
        centred: bool = False,
    ) -> torch.Tensor:
        """One sequence's kept positions ``(M, n, d)``, in ``dtype``, through :meth:`transform`.

        >>> parse_view("drop-pos0").view_states(torch.arange(3.0).reshape(1, 3, 1)).flatten().tolist()
        [1.0, 2.0]
        """
        return self.transform(self.select(states).to(dtype), fit, centred=centred)

    def check_width(self, width: int) -> None:
        """One-line error when the view would remove k >= d principal directions (everything)."""
        if self.top_pcs >= width:
            raise EffdepthError(
                f"view {self.name!r} removes {self.top_pcs} principal directions, but the states have width d = {width}: "
                f"with k >= d nothing but rounding noise is left; use top{{k}}pc with k < {width}"
            )


def parse_view(text: str) -> ViewSpec:
    """Parse one view such as ``"token-norm+drop-pos0"`` or ``"top3pc-shared"``.

    >>> parse_view("top2pc").top_pcs
    2
    >>> parse_view("bogus")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: unknown view component 'bogus' in 'bogus'; token-mode views combine drop-pos0, pos0-only, token-norm, center, top{k}pc, top{k}pc-shared with '+', or use 'paper'
    """
    name = str(text).strip()
    return ViewSpec(name=name, steps=parse_steps(name, "token"))


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
        spec.check_width(width)
