"""Every similarity as a registered spec (docs/method.md#similarity).

A spec says in one place what a similarity is; the rest of the package asks the spec, never the name.
"""

from effdepth.numerics.similarities.registry import (
    REMOVED,
    SIMILARITIES,
    default_similarity,
    fewest_samples,
    find_similarity,
    get_similarity,
    names_where,
    parse_similarities,
    similarity_choices,
    specs,
)
from effdepth.numerics.similarities.spec import Similarity
