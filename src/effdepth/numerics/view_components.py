"""View components as registered specs, for both modes (docs/method.md#views, #passage-mode).

A view is components joined with ``+`` (``default``: none). Each
:class:`Component` of :data:`COMPONENTS` says in one place what it is: its
name (a pattern for a family such as ``top{k}pc``, k >= 1), its label, the
modes it exists in, its slot, and what it does in each mode. Slots fix how
components compose: at most one component per slot, and whatever order a
view is written in, its components apply in the order of :data:`SLOTS`
(selection, token-norm, center, length, principal directions).

What a component does:

- token mode (per sequence of states ``(M, T, d)``): ``select`` keeps some
  positions (``parts``: which of position 0 and the rest they are;
  ``max_tokens``: how many a sequence keeps at most); ``tokens`` transforms
  each token; ``apply`` acts with a fit estimated on the view's token set
  (each layer's ``mean``, and what ``fit`` makes of the covariance when it has
  one). ``centred_away`` marks a step that shifts every token of a layer
  alike: an estimator that centres each layer over the tokens itself (cka)
  skips it, since the centring removes it anyway;
- passage mode, before pooling: ``keep`` (which tokens are pooled) and
  ``weigh`` (each token's pooling weight, given the token norms); after
  pooling: ``pooled``, a transform of each layer's N x d pooled matrices (a
  layer stack, :mod:`effdepth.numerics.passage_stacks`), called as
  ``pooled(stack, k, lengths)`` with each passage's token count.

:func:`parse_steps` reads a view's text in one mode from the registry; the
modes' view specs are :class:`effdepth.numerics.views.ViewSpec` (token) and
:class:`effdepth.numerics.passage_views.PassageView` (passage).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import EffdepthError
from .fits import relative_eigengap, remove_directions, top_eigenpairs
from .passage_stacks import LengthRegressed, TopRemoved

#: The two modes: "token" (``--pooling none``) and "passage" (``--pooling mean``).
MODES = ("token", "passage")
#: A view holds at most one component per slot, and applies them in this order.
SLOTS = ("selection", "token-norm", "center", "length", "principal directions")
#: Position 0 and the rest of a sequence: the parts token mode accumulates apart.
PARTS = ("pos0", "rest")
_POOLING = {"token": "--pooling none", "passage": "--pooling mean"}


@dataclass(frozen=True)
class Component:
    """One view component: what it is and what it does in each mode it exists in (see the module docstring).

    >>> get_component("top{k}pc").modes, get_component("center").centred_away
    (('token', 'passage'), True)
    """

    name: str
    label: str
    modes: tuple
    slot: str
    # token mode
    select: Callable | None = None
    parts: tuple = PARTS
    max_tokens: int | None = None
    tokens: Callable | None = None
    apply: Callable | None = None
    fit: Callable | None = None
    centred_away: bool = False
    # passage mode
    keep: Callable | None = None
    weigh: Callable | None = None
    pooled: Callable | None = None

    @property
    def pattern(self) -> re.Pattern:
        """The texts it stands for: its name, with ``{k}`` any whole number."""
        return re.compile("([0-9]+)".join(re.escape(piece) for piece in self.name.split("{k}")))

    @property
    def family(self) -> bool:
        """Whether it takes a whole number k (``top{k}pc``)."""
        return "{k}" in self.name


@dataclass(frozen=True)
class Step:
    """A component in a view, with its k for a family (``None`` otherwise).

    >>> Step(get_component("top{k}pc"), 3).text
    'top3pc'
    """

    component: Component
    k: int | None = None

    @property
    def text(self) -> str:
        return self.component.name.replace("{k}", str(self.k))


# -- what the components do ------------------------------------------------------------


def drop_first(states: torch.Tensor) -> torch.Tensor:
    """Every position of a sequence ``(M, T, d)`` but the first.

    >>> drop_first(torch.arange(3.0).reshape(1, 3, 1)).flatten().tolist()
    [1.0, 2.0]
    """
    return states[:, 1:]


def first_only(states: torch.Tensor) -> torch.Tensor:
    """The first position of a sequence ``(M, T, d)`` alone.

    >>> first_only(torch.arange(3.0).reshape(1, 3, 1)).flatten().tolist()
    [0.0]
    """
    return states[:, :1]


def unit_tokens(states: torch.Tensor) -> torch.Tensor:
    """Each token (the last axis) divided by its norm; a zero token stays zero.

    >>> unit_tokens(torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64)).tolist()
    [[0.6, 0.8], [0.0, 0.0]]
    """
    norms = torch.linalg.vector_norm(states, dim=-1, keepdim=True)
    return states / torch.where(norms > 0, norms, torch.ones_like(norms))


def subtract_mean(states: torch.Tensor, fit: dict, k: None = None) -> torch.Tensor:
    """States ``(M, T, d)`` less each layer's fitted mean (``fit["mean"]``, ``(M, d)``).

    >>> subtract_mean(torch.ones(1, 2, 2), {"mean": torch.tensor([[1.0, 0.0]])}).tolist()
    [[[0.0, 1.0], [0.0, 1.0]]]
    """
    return states - fit["mean"][:, None, :].to(states)


def remove_fitted_directions(states: torch.Tensor, fit: dict, k: int | None = None) -> torch.Tensor:
    """States ``(M, T, d)`` without the span of the fitted directions ``fit["pcs"]`` ``(M or 1, d, k)``.

    >>> remove_fitted_directions(torch.ones(1, 1, 2), {"pcs": torch.tensor([[[1.0], [0.0]]])}).tolist()
    [[[0.0, 1.0]]]
    """
    return remove_directions(states, fit["pcs"].to(states))


def layer_directions(covariance: torch.Tensor, k: int) -> dict:
    """Each layer's top-k principal directions ``pcs`` ``(M, d, k)`` from its covariance ``(M, d, d)``,
    and ``eigengap``, each layer's relative eigen-gap after the k-th
    (:func:`~effdepth.numerics.fits.relative_eigengap`).

    >>> fit = layer_directions(torch.diag(torch.tensor([1.0, 4.0], dtype=torch.float64))[None], 1)
    >>> fit["pcs"].flatten().abs().tolist(), fit["eigengap"]
    ([0.0, 1.0], [0.75])
    """
    vectors, values = top_eigenpairs(covariance, k)
    return {"pcs": vectors, "eigengap": relative_eigengap(values, k)}


def shared_directions(covariance: torch.Tensor, k: int) -> dict:
    """One set of top-k directions ``(1, d, k)`` for every layer, from the mean of the layers' covariances.

    >>> covariance = torch.stack([torch.diag(torch.tensor(v, dtype=torch.float64)) for v in ([3.0, 0.0], [0.0, 1.0])])
    >>> shared_directions(covariance, 1)["pcs"].flatten().abs().tolist()
    [1.0, 0.0]
    """
    return layer_directions(covariance.mean(0, keepdim=True), k)


def without_bos(tokens: torch.Tensor, first_is_bos: torch.Tensor) -> torch.Tensor:
    """Token weights ``(B, T)`` with each passage's first real token set to 0 where it is a BOS
    (``first_is_bos`` ``(B,)``).

    >>> without_bos(torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]]), torch.tensor([True, False])).tolist()
    [[0.0, 0.0, 1.0], [1.0, 1.0, 0.0]]
    """
    first = tokens.argmax(dim=1)  # the first real token, whichever side the padding is
    kept = tokens.clone()
    rows = torch.arange(tokens.shape[0], device=tokens.device)[first_is_bos]
    kept[rows, first[first_is_bos]] = 0.0
    return kept


def without_first(tokens: torch.Tensor, first_is_bos: torch.Tensor | None = None) -> torch.Tensor:
    """Token weights ``(B, T)`` with each passage's first real token set to 0, whatever token it holds.

    >>> without_first(torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])).tolist()
    [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    """
    kept = tokens.clone()
    kept[torch.arange(tokens.shape[0], device=tokens.device), tokens.argmax(dim=1)] = 0.0
    return kept


def divide_by_norms(weights: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """Pooling weights ``(B, T)`` of tokens divided by their norms ``(B, T)`` (a zero state stays zero).

    >>> divide_by_norms(torch.ones(1, 2), torch.tensor([[2.0, 0.0]])).tolist()
    [[0.5, 1.0]]
    """
    return weights / torch.where(norms > 0, norms, 1.0)


# -- the registry ----------------------------------------------------------------------

#: Every view component, in the order errors and help list them.
COMPONENTS = (
    Component(
        "drop-pos0",
        "remove each sequence's position 0, whatever token it holds (passage mode: pool from the second token)",
        ("token", "passage"),
        "selection",
        select=drop_first,
        parts=("rest",),
        keep=without_first,
    ),
    Component(
        "pos0-only",
        "keep only each sequence's position 0 (the contrast)",
        ("token",),
        "selection",
        select=first_only,
        parts=("pos0",),
        max_tokens=1,
    ),
    Component("drop-bos", "pool from the first non-BOS token", ("passage",), "selection", keep=without_bos),
    Component(
        "length",
        "regress each passage's token count n out of each layer's pooled matrix (least squares on "
        "1/n and log n beside the mean; the identity when every passage has the same length)",
        ("passage",),
        "length",
        pooled=LengthRegressed,
    ),
    Component(
        "token-norm",
        "each token state divided by its norm (a zero state stays zero)",
        ("token", "passage"),
        "token-norm",
        tokens=unit_tokens,
        weigh=divide_by_norms,
    ),
    Component(
        "center",
        "subtract each layer's mean state, fitted on the view's token set",
        ("token",),
        "center",
        apply=subtract_mean,
        centred_away=True,
    ),
    Component(
        "top{k}pc",
        "remove each layer's top-k principal directions (of its mean-centred states; in passage mode, "
        "of its column-centred pooled matrix, fitted exactly)",
        ("token", "passage"),
        "principal directions",
        apply=remove_fitted_directions,
        fit=layer_directions,
        pooled=TopRemoved,
    ),
    Component(
        "top{k}pc-shared",
        "remove one set of top-k principal directions for every layer, from the mean covariance",
        ("token",),
        "principal directions",
        apply=remove_fitted_directions,
        fit=shared_directions,
    ),
)


def get_component(name: str) -> Component:
    """A registered component by its name (``top{k}pc`` for the family).

    >>> get_component("drop-bos").modes
    ('passage',)
    """
    for component in COMPONENTS:
        if component.name == name:
            return component
    raise KeyError(f"no view component {name!r}; have {', '.join(c.name for c in COMPONENTS)}")


def known(mode: str) -> str:
    """The components of a mode, as a list for messages and help.

    >>> known("passage")
    'drop-pos0, drop-bos, length, token-norm, top{k}pc'
    """
    return ", ".join(c.name for c in COMPONENTS if mode in c.modes)


def parse_steps(text: str, mode: str) -> tuple:
    """The steps of the view written ``text`` in ``mode``, in slot order (``()`` for ``default``);
    a one-line error for an unknown component, one of the other mode, a k below 1, or two in one slot.

    >>> [s.text for s in parse_steps("top2pc+drop-pos0", "token")]
    ['drop-pos0', 'top2pc']
    >>> parse_steps("drop-bos", "token")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: view 'drop-bos' is not a token-mode view (drop-bos is passage mode's, for --pooling mean); token-mode views combine drop-pos0, pos0-only, token-norm, center, top{k}pc, top{k}pc-shared with '+', or use 'paper'
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    name = str(text).strip()
    if not name:
        raise EffdepthError(f"empty view name; use e.g. --views default or --views paper ({mode} mode: {known(mode)})")
    steps: dict = {}
    for part in (p.strip() for p in name.split("+")):
        if part == "default":
            continue
        step = _step(part, name, mode)
        slot = step.component.slot
        if slot in steps:
            raise EffdepthError(
                f"view {name!r} has two {slot} components ({steps[slot].text} and {step.text}); use one"
            )
        steps[slot] = step
    return tuple(steps[slot] for slot in SLOTS if slot in steps)


def _step(part: str, name: str, mode: str) -> Step:
    """One written component of the view ``name`` as a :class:`Step` of ``mode``."""
    for component in COMPONENTS:
        match = component.pattern.fullmatch(part)
        if match is None:
            continue
        if mode not in component.modes:
            other = component.modes[0]
            raise EffdepthError(
                f"view {name!r} is not a {mode}-mode view ({part} is {other} mode's, for "
                f"{_POOLING[other]}); {mode}-mode views combine {known(mode)} with '+', or use 'paper'"
            )
        k = int(match.group(1)) if component.family else None
        if k is not None and k < 1:
            raise EffdepthError(f"view {name!r}: {component.name} needs k >= 1, got {k}")
        return Step(component, k)
    raise EffdepthError(
        f"unknown view component {part!r} in {name!r}; {mode}-mode views combine {known(mode)} with '+', or use 'paper'"
    )


def pooled_variants() -> tuple:
    """Every way passage mode can pool (the components acting before pooling, at most one per slot),
    as canonical names: the variants of pooled vectors a passage-mode result may store.

    >>> pooled_variants()
    ('default', 'drop-pos0', 'drop-bos', 'token-norm', 'drop-pos0+token-norm', 'drop-bos+token-norm')
    """
    before = [c for c in COMPONENTS if "passage" in c.modes and (c.keep or c.weigh)]
    combos = [
        combo
        for r in range(len(before) + 1)
        for combo in itertools.combinations(before, r)
        if len({c.slot for c in combo}) == r
    ]
    return tuple(
        "+".join(c.name for c in sorted(combo, key=lambda c: SLOTS.index(c.slot))) or "default" for combo in combos
    )
