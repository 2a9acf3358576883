"""Every similarity of both modes as a registered spec (docs/method.md#similarity).

A spec (:mod:`.spec`) says in one place what a similarity is: its name, mode
and labels, the unit its statistics are resampled in, the fewest samples it
needs and why, which references it has, its companions, whether a distributed
run can measure it and whether it needs a memory check of its own, and what it
is computed from. Token mode's specs are in :mod:`.token`, passage mode's in
:mod:`.passage`; :mod:`.registry` looks them up and parses ``--similarity``
for either mode. The accumulator, the analysis, the options, the metrics, the
claims and the reports ask the spec, never the name.

Adding a similarity: one spec in :mod:`.token` or :mod:`.passage` with what it
is computed from (docs/design.md, "Adding a plug-in", says when more is
needed), and its tests.
"""

from .registry import (
    COSINE_SIMILARITIES,
    KERNEL_SIMILARITIES,
    NAMES,
    PASSAGE_SIMILARITIES,
    REGISTRY,
    SIMILARITIES,
    all_similarities,
    default_similarity,
    fewest_samples,
    find_similarity,
    get_similarity,
    keeps_cosine_sums,
    names,
    names_where,
    parse_similarities,
    specs,
    validate_similarities,
)
from .spec import PASSAGE, POOLING, TOKEN, UNITS, PassageSimilarity, Similarity, TokenSimilarity

__all__ = [
    "COSINE_SIMILARITIES",
    "KERNEL_SIMILARITIES",
    "NAMES",
    "PASSAGE",
    "PASSAGE_SIMILARITIES",
    "POOLING",
    "REGISTRY",
    "SIMILARITIES",
    "TOKEN",
    "UNITS",
    "PassageSimilarity",
    "Similarity",
    "TokenSimilarity",
    "all_similarities",
    "default_similarity",
    "fewest_samples",
    "find_similarity",
    "get_similarity",
    "keeps_cosine_sums",
    "names",
    "names_where",
    "parse_similarities",
    "specs",
    "validate_similarities",
]
