"""``effdepth prune-check``'s options, declared once."""

from __future__ import annotations

from dataclasses import dataclass

from effdepth.options import option


@dataclass(frozen=True)
class PruneOptions:
    """``effdepth prune-check``: how many blocks to skip, and the held-out passages."""

    skip: str = option("1..4", "numbers of blocks to skip (default {default})", metavar="K|A..B")
    heldout: int = option(64, "held-out passages for the perplexity (default {default})", kind="int", metavar="N")
