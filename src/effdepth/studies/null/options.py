"""``effdepth null``'s options, declared once."""

from __future__ import annotations

from dataclasses import dataclass

from effdepth.options import option


@dataclass(frozen=True)
class NullOptions:
    """``effdepth null``: the seeds of the random-weight null."""

    seeds: str = option(
        "5", "K seeds 0..K-1 (default {default}), or a comma-separated list of seeds", metavar="K|S1,S2,..."
    )
