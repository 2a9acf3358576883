"""Token mode's similarities as registered specs (docs/method.md#similarity).

A :class:`Similarity` says, in one place, what a similarity is: the unit its
statistics are kept and resampled in, which additive statistics its D_eff
reads, how its totals become the similarity matrix and the sizes of the
matched references, whether it has calibrated references, and how it is
named in words and on a figure. Everything else (the accumulator, the
metrics, the summaries, the report) asks the spec. Passage mode's
similarities across passages are specs of their own
(:data:`effdepth.numerics.passage_analysis.SIMILARITIES`).

Adding one: a spec here (its ``matrix`` and ``energies`` from totals), the
statistics it needs in :mod:`effdepth.numerics.streams` if they are new, and
its tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import EffdepthError
from .passage_metrics import covariance_norms
from .similarity import cka_from_hsic, squared_cosine_from_gram

#: The units a similarity's statistics come in: one per sequence (additive sums), one per pair
#: of consecutive sequences (cross-sequence cka), or one for the whole run (pooled, not resampled).
UNITS = ("sequence", "pair", "run")


@dataclass(frozen=True)
class Similarity:
    """One token-mode similarity.

    ``matrix(totals, analysed)`` is sim_ij over the analysed states (a slice
    of S_0..S_L), NaN where the totals hold nothing to compare;
    ``energies(totals)`` the sizes of S_0, U_1..U_L as the similarity sees
    them (the matched references), or the per-token reference matrices
    ``ref_*`` when ``reference_matrices``.

    >>> get_similarity("cka").unit, get_similarity("cka").sequences_per_unit
    ('pair', 2)
    """

    name: str
    label: str  # what it is, in words (headlines, captions)
    axis_label: str  # on a figure (may hold mathtext)
    unit: str
    deff_keys: tuple  # the additive statistics its D_eff reads
    matrix: Callable
    energies: Callable
    reference_matrices: bool = False
    calibrated: bool = True  # the calibrated references (surrogate streams) are defined
    needs_token_keys: bool = False  # the per-token cosine sums (accumulate.TOKEN_KEYS)

    @property
    def additive(self) -> bool:
        """Read from the additive per-sequence statistics (a cosine similarity)."""
        return self.unit == "sequence"

    @property
    def resampled(self) -> bool:
        """Has more than one unit to resample (a pooled run has one)."""
        return self.unit != "run"

    @property
    def sequences_per_unit(self) -> int | None:
        return {"sequence": 1, "pair": 2}.get(self.unit)


def _counted(totals: dict, sim: np.ndarray) -> np.ndarray:
    n = np.asarray(totals["n"])[..., None, None]
    return np.where(n > 0, sim, np.nan)


def _frobenius(totals: dict, sl: slice) -> np.ndarray:
    return _counted(totals, squared_cosine_from_gram(totals["gram_states"][..., sl, sl]))


def _token(totals: dict, sl: slice) -> np.ndarray:
    n = np.asarray(totals["n"])[..., None, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        return _counted(totals, totals["cos2_sum"][..., sl, sl] / np.where(n > 0, n, 1.0))


def _cka(totals: dict, sl: slice) -> np.ndarray:
    # Not clipped: a cross-pair HSIC may dip below 0 (or a CKA above 1), and clipping would bias it.
    sim = cka_from_hsic(totals["hsic"][..., sl, sl], clip=False)
    entered = np.asarray(totals["cka_pairs"])[..., None, None]
    return np.where(entered > 0, sim, np.nan)


def _cka_full(totals: dict, sl: slice) -> np.ndarray:
    return cka_from_hsic(totals["hsic_full"][..., sl, sl])


def _raw_energies(totals: dict) -> np.ndarray:
    return np.diagonal(totals["gram_increments"], axis1=-2, axis2=-1)


def _covariance_norms(totals: dict) -> np.ndarray:
    return covariance_norms(np.asarray(totals["update_hsic"], dtype=np.float64))


def _pooled_energies(totals: dict) -> np.ndarray:
    return np.asarray(totals["cka_full_energy"], dtype=np.float64)


SIMILARITIES = {
    s.name: s
    for s in (
        Similarity("frobenius", "squared cosine of the flattened states", r"$\cos^2(S_i, S_j)$",
                   "sequence", ("n", "gram_states"), _frobenius, _raw_energies),
        Similarity("token", "mean per-token squared cosine", r"token mean of $\cos^2(s_i, s_j)$",
                   "sequence", ("n", "cos2_sum"), _token, _raw_energies, reference_matrices=True,
                   needs_token_keys=True),
        Similarity("cka", "cross-sequence linear CKA", "cross-sequence linear CKA",
                   "pair", ("n",), _cka, _covariance_norms),
        Similarity("cka-full", "pooled linear CKA", "linear CKA, tokens pooled",
                   "run", ("n",), _cka_full, _pooled_energies, calibrated=False),
    )
}
NAMES = tuple(SIMILARITIES)


def get_similarity(name: str) -> Similarity:
    """The registered spec of ``name``; a one-line error for an unknown one.

    >>> get_similarity("token").reference_matrices
    True
    """
    try:
        return SIMILARITIES[name]
    except (KeyError, TypeError):
        raise EffdepthError(f"unknown similarity {name!r}; choose from {', '.join(NAMES)}") from None


def names_where(predicate) -> tuple:
    """The names of the similarities a predicate on the spec holds for, in registry order.

    >>> names_where(lambda s: s.additive)
    ('frobenius', 'token')
    """
    return tuple(name for name, spec in SIMILARITIES.items() if predicate(spec))


#: Similarities with statistics of their own (the additive ones are kept for every run).
KERNEL_SIMILARITIES = names_where(lambda s: not s.additive)
#: Similarities read from the additive statistics of every stream they measure.
COSINE_SIMILARITIES = names_where(lambda s: s.additive)


def validate_similarities(similarities) -> tuple:
    """The similarities as a tuple without repeats; a one-line error for an unknown one.

    >>> validate_similarities("cka,frobenius")
    ('cka', 'frobenius')
    """
    if isinstance(similarities, str):
        similarities = similarities.split(",")
    out: list = []
    for name in similarities:
        name = get_similarity(str(name).strip()).name
        if name not in out:
            out.append(name)
    return tuple(out)


def keeps_cosine_sums(similarities) -> bool:
    """Whether every stream keeps the additive (cosine) sums under ``similarities``: a cosine
    similarity (:data:`COSINE_SIMILARITIES`) among them, or none at all (the additive
    statistics alone are asked for).

    >>> keeps_cosine_sums(("cka",)), keeps_cosine_sums(("cka", "token")), keeps_cosine_sums(())
    (False, True, True)
    """
    return not similarities or any(s in COSINE_SIMILARITIES for s in similarities)
