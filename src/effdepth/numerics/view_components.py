"""View components as registered specs (docs/method.md#views).

A view is components joined with ``+`` (``default``: none). Each :class:`Component` says in one
place its name (a pattern such as ``top{k}pc``), label, slot and what it does before pooling (``keep``,
``weigh``) or after it (``pooled``). A view holds at most one component per slot and applies them in
:data:`SLOTS` order, whatever order it is written in.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Callable

import torch

from effdepth.errors import EffdepthError
from effdepth.numerics.stacks import LengthRegressed, TopRemoved

#: A view holds at most one component per slot, and applies them in this order.
SLOTS = ("selection", "token-norm", "length", "principal directions")
#: Views of the token-level statistics that the token reduction replaced, and what to use instead.
REMOVED = {
    "pos0-only": "measure position 0 alone from your own states with effdepth.from_pooled",
    "center": "every estimator centres each layer across samples already",
    "top{k}pc-shared": "use top{k}pc (each layer's own directions)",
}


@dataclass(frozen=True)
class Component:
    """One view component: what it is and what it does (see the module docstring).

    >>> [(c.name, c.slot) for c in COMPONENTS][-1], COMPONENTS[0].keep is not None
    (('top{k}pc', 'principal directions'), True)
    """

    name: str
    label: str
    slot: str
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

    >>> Step(COMPONENTS[-1], 3).text
    'top3pc'
    """

    component: Component
    k: int | None = None

    @property
    def text(self) -> str:
        return self.component.name.replace("{k}", str(self.k))


# -- what the components do ------------------------------------------------------------


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
    return without_bos(tokens, torch.ones(tokens.shape[0], dtype=torch.bool, device=tokens.device))


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
        "leave out each passage's position 0, whatever token it holds (pool or sample from the second token)",
        "selection",
        keep=without_first,
    ),
    Component("drop-bos", "leave out the first token where it is a BOS", "selection", keep=without_bos),
    Component(
        "length",
        "regress each passage's token count n out of each layer's pooled matrix (least squares on "
        "1/n and log n beside the mean; the identity when every passage has the same length)",
        "length",
        pooled=LengthRegressed,
    ),
    Component(
        "token-norm",
        "each token state divided by its norm (a zero state stays zero)",
        "token-norm",
        weigh=divide_by_norms,
    ),
    Component(
        "top{k}pc",
        "remove each layer's top-k principal directions (of its column-centred matrix of samples, fitted exactly)",
        "principal directions",
        pooled=TopRemoved,
    ),
)


def known() -> str:
    """The components, as a list for messages and help.

    >>> known()
    'drop-pos0, drop-bos, length, token-norm, top{k}pc'
    """
    return ", ".join(c.name for c in COMPONENTS)


def parse_steps(text: str) -> tuple:
    """The steps of the view written ``text``, in slot order (``()`` for ``default``); a one-line error
    for an unknown or removed component, a k below 1, or two in one slot.

    >>> [s.text for s in parse_steps("top2pc+drop-pos0")]
    ['drop-pos0', 'top2pc']
    >>> parse_steps("center")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: view 'center' is gone with the old token-level statistics (every estimator centres each layer across samples already); views combine drop-pos0, drop-bos, length, token-norm, top{k}pc with '+', or use 'paper'
    """
    name = str(text).strip()
    if not name:
        raise EffdepthError(f"empty view name; use e.g. --views default or --views paper (components: {known()})")
    steps: dict = {}
    for part in (p.strip() for p in name.split("+")):
        if part == "default":
            continue
        step = _step(part, name)
        slot = step.component.slot
        if slot in steps:
            raise EffdepthError(
                f"view {name!r} has two {slot} components ({steps[slot].text} and {step.text}); use one"
            )
        steps[slot] = step
    return tuple(steps[slot] for slot in SLOTS if slot in steps)


def _step(part: str, name: str) -> Step:
    """One written component of the view ``name`` as a :class:`Step`."""
    for component in COMPONENTS:
        match = component.pattern.fullmatch(part)
        if match is None:
            continue
        k = int(match.group(1)) if component.family else None
        if k is not None and k < 1:
            raise EffdepthError(f"view {name!r}: {component.name} needs k >= 1, got {k}")
        return Step(component, k)
    for removed, instead in REMOVED.items():
        if re.fullmatch("[0-9]+".join(re.escape(piece) for piece in removed.split("{k}")), part):
            raise EffdepthError(
                f"view {name!r} is gone with the old token-level statistics ({instead}); views combine "
                f"{known()} with '+', or use 'paper'"
            )
    raise EffdepthError(
        f"unknown view component {part!r} in {name!r}; views combine {known()} with '+', or use 'paper'"
    )


def pooled_variants() -> tuple:
    """Every way a passage can give its samples (the components acting before pooling, at most one per
    slot), as canonical names: the variants a result may store.

    >>> pooled_variants()
    ('default', 'drop-pos0', 'drop-bos', 'token-norm', 'drop-pos0+token-norm', 'drop-bos+token-norm')
    """
    before = [c for c in COMPONENTS if c.keep or c.weigh]
    combos = [
        combo
        for r in range(len(before) + 1)
        for combo in itertools.combinations(before, r)
        if len({c.slot for c in combo}) == r
    ]
    return tuple(
        "+".join(c.name for c in sorted(combo, key=lambda c: SLOTS.index(c.slot))) or "default" for combo in combos
    )
