"""What a similarity is, as a spec: the fields both modes share, and each mode's own.

A spec says in one place what the rest of the package asks about a
similarity: its name and mode, its words and figure axis, the unit its
statistics are resampled in, the fewest samples it can be computed from and
why, which references it has, the similarities measured beside it, whether a
distributed run can measure it, whether it needs a memory check of its own,
and what it is computed from (token mode: additive statistics and how their
totals become its matrix; passage mode: an HSIC estimator or a resampled
matrix of the pooled vectors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

TOKEN, PASSAGE = "token", "passage"
#: The ``--pooling`` value that selects each mode.
POOLING = {TOKEN: "none", PASSAGE: "mean"}
#: The units each mode's statistics come in. Token mode: one per sequence (additive sums), one per
#: pair of consecutive sequences (cross-sequence cka), one for the whole run (pooled, not
#: resampled). Passage mode: blocks of consecutive passages.
UNITS = {TOKEN: ("sequence", "pair", "run"), PASSAGE: ("block",)}


@dataclass(frozen=True, kw_only=True)
class Similarity:
    """The fields every similarity has, in either mode.

    ``min_samples`` counts ``samples`` (tokens of a sequence or a view, or passages); ``min_reason``
    says why, in the words an error uses. ``companions`` are measured whenever this one is.
    ``not_distributed`` is why a distributed run cannot measure it (empty: it can).
    """

    mode: ClassVar[str]
    name: str
    label: str  # what it is, in words (headlines, captions)
    axis_label: str  # on a figure (may hold mathtext)
    unit: str
    min_samples: int = 1
    samples: str = ""
    min_reason: str = ""
    references: bool = True  # the matched references are defined
    calibrated: bool = True  # the calibrated references (surrogate streams) are defined
    companions: tuple = ()
    not_distributed: str = ""
    memory_check: bool = False  # checked against --max-memory before the first batch, on its own
    default: bool = False  # the mode's similarity unless told otherwise
    in_all: bool = True  # part of ``--similarity all``

    @property
    def resampled(self) -> bool:
        """Has more than one unit to resample (a pooled run has one)."""
        return self.unit != "run"

    @property
    def distributable(self) -> bool:
        """A distributed run (torchrun) can measure it."""
        return not self.not_distributed

    @property
    def companion_of(self) -> str | None:
        """The similarity that brings this one beside it, if any.

        >>> from effdepth.numerics.similarities import get_similarity
        >>> get_similarity("cka-debiased", "passage").companion_of, get_similarity("cka", "passage").companion_of
        ('cka', None)
        """
        from .registry import specs  # the registry is built from the specs

        return next((s.name for s in specs(self.mode) if self.name in s.companions), None)


@dataclass(frozen=True, kw_only=True)
class TokenSimilarity(Similarity):
    """A token-mode similarity (``--pooling none``), read from statistics summed over tokens.

    ``matrix(totals, analysed)`` is sim_ij over the analysed states (a slice of S_0..S_L), NaN where
    the totals hold nothing to compare; ``energies(totals)`` the sizes of S_0, U_1..U_L as the
    similarity sees them (the matched references), or the per-token reference matrices ``ref_*``
    when ``reference_matrices``.

    >>> from effdepth.numerics.similarities import get_similarity
    >>> get_similarity("cka").unit, get_similarity("cka").sequences_per_unit, get_similarity("cka-full").pooled
    ('pair', 2, True)
    """

    mode: ClassVar[str] = TOKEN
    deff_keys: tuple  # the additive statistics its D_eff reads
    matrix: Callable
    energies: Callable
    reference_matrices: bool = False
    needs_token_keys: bool = False  # the per-token cosine sums (accumulate.TOKEN_KEYS)

    @property
    def additive(self) -> bool:
        """Read from the additive per-sequence statistics (a cosine similarity)."""
        return self.unit == "sequence"

    @property
    def pooled(self) -> bool:
        """Summed over every token of the run into one unit."""
        return self.unit == "run"

    @property
    def sequences_per_unit(self) -> int | None:
        return {"sequence": 1, "pair": 2}.get(self.unit)


@dataclass(frozen=True, kw_only=True)
class PassageSimilarity(Similarity):
    """A passage-mode similarity (``--pooling mean``): across passages, from their pooled vectors.

    Made of one HSIC estimator (``estimator``: a key of
    :func:`~effdepth.numerics.hsic_resample.resampled_hsic`), or computed from the pooled vectors
    directly: ``matrix(stack, units, weights, budget, device)`` is its (R, M, M) similarity matrix
    under every resample (row 0 the estimate).

    >>> from effdepth.numerics.similarities import get_similarity
    >>> get_similarity("cka-debiased", "passage").estimator, get_similarity("cosine", "passage").kernel
    ('debiased', False)
    """

    mode: ClassVar[str] = PASSAGE
    unit: str = "block"
    samples: str = "passages"
    not_distributed: str = "passage mode is measured in one process"
    estimator: str | None = None
    matrix: Callable | None = None

    @property
    def kernel(self) -> bool:
        """A CKA estimator: made of an HSIC estimator, with matched references and an update similarity."""
        return self.estimator is not None
