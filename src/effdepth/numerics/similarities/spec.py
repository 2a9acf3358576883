"""What a similarity is, as a spec: what the rest of the package asks about one, in one place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True, kw_only=True)
class Similarity:
    """A similarity between layers, across samples (pooled passages, or their tokens).

    ``min_samples`` counts samples; ``min_reason`` says why, in the words an error uses.
    ``companions`` are measured whenever this one is. Made of one HSIC estimator
    (``estimator``: a key of :func:`~effdepth.numerics.hsic_resample.resampled_hsic`), or computed
    from the samples directly: ``matrix(stack, units, weights, budget, device)`` is its (R, M, M)
    similarity matrix under every resample (row 0 the estimate).

    >>> from effdepth.numerics.similarities import get_similarity
    >>> get_similarity("cka-debiased").estimator, get_similarity("cosine").kernel
    ('debiased', False)
    >>> get_similarity("cka-debiased").companion_of, get_similarity("cka").companion_of
    ('cka', None)
    """

    name: str
    label: str  # what it is, in words (headlines, captions)
    axis_label: str  # on a figure (may hold mathtext)
    min_samples: int = 1
    min_reason: str = ""
    references: bool = True  # the matched references are defined
    companions: tuple = ()
    default: bool = False  # the similarity unless told otherwise
    in_all: bool = True  # part of ``--similarity all``
    estimator: str | None = None
    matrix: Callable | None = None
    # The similarity that brings this one beside it, if any: filled by the registry from the others' companions.
    companion_of: str | None = None

    @property
    def kernel(self) -> bool:
        """A CKA estimator: made of an HSIC estimator, with matched references and an update similarity."""
        return self.estimator is not None
