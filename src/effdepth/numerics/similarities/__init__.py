"""Every similarity as a registered spec (docs/method.md#similarity).

A spec (:mod:`.spec`) says in one place what a similarity is: its name and
labels, the fewest samples it needs and why, which references it has, its
companions, and what it is computed from. The specs are in :mod:`.builtin`;
:mod:`.registry` looks them up and parses ``--similarity``. The analysis,
the options, the claims and the reports ask the spec, never the name.

Adding a similarity: one spec in :mod:`.builtin` with what it is computed
from (docs/design.md, "Adding a plug-in"), and its tests.
"""

from effdepth.numerics.similarities.registry import (
    REMOVED,
    SIMILARITIES,
    all_similarities,
    default_similarity,
    fewest_samples,
    find_similarity,
    get_similarity,
    names,
    names_where,
    parse_similarities,
    similarity_choices,
    specs,
)
from effdepth.numerics.similarities.spec import Similarity

__all__ = [
    "REMOVED",
    "SIMILARITIES",
    "Similarity",
    "all_similarities",
    "default_similarity",
    "fewest_samples",
    "find_similarity",
    "get_similarity",
    "names",
    "names_where",
    "parse_similarities",
    "similarity_choices",
    "specs",
]
