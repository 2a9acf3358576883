"""What the figures share, so a reference or a title reads the same in every figure."""

from __future__ import annotations

import math
import textwrap

import numpy as np
from matplotlib.figure import Figure

from effdepth.errors import EffdepthError
from effdepth.report.sources import result_label
from effdepth.report.style import OKABE_ITO
from effdepth.results.result import Result, ViewResult

#: How each reference profile is drawn: (label, colour, line style, marker).
REFERENCE_STYLES = {
    "fl": (r"$F_N$: orthogonal equal updates", OKABE_ITO["orange"], "--", "^"),
    "init": (r"$R_\mathrm{init}$: + initial state", OKABE_ITO["sky_blue"], "-.", "v"),
    "size": (r"$R_\mathrm{size}$: + update sizes", OKABE_ITO["bluish_green"], ":", "D"),
    "matched": (r"$R_\mathrm{matched}$: both", OKABE_ITO["vermillion"], (0, (6, 2)), "s"),
    "corr": (r"$R_\mathrm{corr}$: + measured update correlation", OKABE_ITO["yellow"], (0, (5, 1, 1, 1, 1, 1)), "*"),
    # Calibrated references: surrogate streams through the same similarity (docs/method.md#calibrated-references).
    "structural_cal": (r"$R_\mathrm{structural\,cal}$: surrogate, equal updates", OKABE_ITO["black"], (0, (1, 1)), "x"),
    "matched_cal": (
        r"$R_\mathrm{matched\,cal}$: surrogate, measured energies",
        OKABE_ITO["reddish_purple"],
        (0, (3, 1, 1, 1)),
        "P",
    ),
}

DEFF, R_INIT, R_MATCHED = r"$D_\mathrm{eff}$", r"$R_\mathrm{init}$", r"$R_\mathrm{matched}$"
F_N, F_L = "$F_N$", "$F_L$"  # the structural reference: the L block outputs (an old token-mode result: its N states)


def chosen_view(result: Result | ViewResult, view: str | None) -> tuple[ViewResult, dict]:
    """``(the view, its context)``: the first view unless ``view`` names one.

    >>> import effdepth, torch
    >>> v, ctx = chosen_view(effdepth.from_states(torch.randn(3, 8, 4, 8)), None)
    >>> v.name, ctx["reference"]
    ('default', '$F_L$')
    """
    if isinstance(result, ViewResult):  # a bare view does not say its mode: the general symbol
        return result, {"similarity": result.definition, "reference": F_N}
    if view is None:
        return result.default, context(result)
    if view not in result.views:
        raise EffdepthError(f"no view {view!r} in this result; it has: {', '.join(result.views)}")
    return result.views[view], context(result)


def context(result: Result) -> dict:
    """Whose figure it is and in which mode: label, similarity, several views or not, the reference's symbol.

    >>> import effdepth, torch
    >>> context(effdepth.from_states(torch.randn(3, 8, 4, 8)))["similarity"]
    'cka'
    """
    # Passage mode's N states are the L block outputs; the paper names their reference F_L.
    return {
        "label": result_label(result),
        "similarity": result.primary_similarity,
        "multi": len(result.views) > 1,
        "passages": result.passages,
        "reference": F_L if result.passages else F_N,
        "first_layer": 0 if result.config.get("include_embedding") else 1,
    }


def figure_title(what: str, v: ViewResult | None, ctx: dict, similarity: bool = True) -> str:
    """What the figure shows, then on its own (wrapped) line whose it is: model ids can be long.

    >>> figure_title("Decay profile", None, {"label": "acme/m", "similarity": "cka"})
    'Decay profile\\nacme/m · similarity cka'
    """
    whose = [ctx["label"]] if ctx.get("label") else []
    if v is not None and (ctx.get("multi") or v.name != "default"):
        whose.append(f"view {v.name}")
    name = (v.definition if v is not None else ctx.get("similarity")) if similarity else None
    if name:
        whose.append(f"similarity {name}")
    return "\n".join([what, *textwrap.wrap(" \u00b7 ".join(whose), 72)])


def caption(fig: Figure, text: str) -> None:
    """A small grey line under the figure."""
    fig.supxlabel(text, fontsize=7.5, color="#444444")


def pair(ci):
    """``(lo, hi)`` as floats, or None when absent or not finite (saved as null).

    >>> pair([0.1, 0.2]), pair([None, 0.2]), pair(None)
    ((0.1, 0.2), None, None)
    """
    if not ci or any(x is None or not math.isfinite(float(x)) for x in ci):
        return None
    return float(ci[0]), float(ci[1])


def num(x) -> float:
    """A saved number as a float, NaN for ``None``."""
    return float("nan") if x is None else float(x)


def array(xs) -> np.ndarray:
    """A saved list as a float64 array, NaN for ``None`` (drawn as a gap)."""
    return np.array([np.nan if x is None else x for x in (xs or [])], dtype=np.float64)


def matrix(rows) -> np.ndarray:
    """A saved list of rows as a float64 matrix, NaN for ``None``."""
    return np.array([[np.nan if x is None else x for x in row] for row in rows], dtype=np.float64)


def positive(a: np.ndarray) -> np.ndarray:
    """``a`` with every value at or below 0 a gap.

    >>> positive(np.array([1.0, 0.0])).tolist()
    [1.0, nan]
    """
    # A log axis cannot show 0; a gap says "nothing here" more honestly than a clipped floor.
    return np.where(a > 0, a, np.nan)


def layer_ticks(first: int, last: int, most: int = 10) -> list[int]:
    """Tick positions for a layer axis: the first layer, then round multiples.

    >>> layer_ticks(1, 30)
    [1, 5, 10, 15, 20, 25, 30]
    >>> layer_ticks(0, 3)
    [0, 1, 2, 3]
    """
    span = max(1, last - first)
    step = next(s for s in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 10**9) if span / s <= most)
    ticks = [first] + [t for t in range(step * (first // step + 1), last + 1, step) if t - first >= step / 2]
    return ticks
