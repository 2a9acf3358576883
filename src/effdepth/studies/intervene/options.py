"""``effdepth intervene``'s options, declared once (the command line's flags are built from them)."""

from __future__ import annotations

from dataclasses import dataclass

from effdepth.options import option
from effdepth.studies.intervene.hooks import CARRY_ON


def carries_option():
    """The carry values of a carry sweep, in the model (``intervene``) or offline (``recompose``)."""
    return option("1,0.9,0.75,0.5", "comma-separated carry values in [0, 1] (default {default})")


@dataclass(frozen=True)
class InterventionOptions:
    """``effdepth intervene``: which carries, in which blocks, and where in a block."""

    carry: str = carries_option()
    layers: str = option("all", "blocks to apply the carry to, 1-based: all (default), A-B, or a list like 1,3,5")
    carry_on: str = option(
        "blocks",
        "blocks (default): block output lam s_{l-1} + (s_l - s_{l-1}); sublayers (the paper's): "
        "h <- lam h + attn(LN h), then h <- lam h + mlp(LN h), in every chosen block",
        choices=CARRY_ON,
    )
