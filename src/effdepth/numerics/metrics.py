"""From summed statistics to every number a view reports (docs/method.md, sections 2-4 and 8).

All functions take totals (dicts of arrays, see
:mod:`effdepth.numerics.accumulate`) with optional leading batch axes, so the
point estimate and a thousand bootstrap resamples go through the same code.
"""

from __future__ import annotations

import numpy as np

from .references import gap_attribution, matched_energies, reference_fl, reference_from_energies
from .similarities import get_similarity
from .similarity import cosine_from_gram, decay_profile, deff

REFERENCE_NAMES = ("init", "size", "matched")
ATTRIBUTION_NAMES = ("initial_state", "size_imbalance", "correlated_updates")
# The scalars that get bootstrap intervals.
SCALAR_NAMES = ("deff", "ratio", "gap_pct") + tuple(f"reference_{r}" for r in REFERENCE_NAMES) + ATTRIBUTION_NAMES


def analysed_slice(include_embedding: bool) -> slice:
    """Which of the states S_0..S_L enter D_eff: S_1..S_L, or all with the embedding."""
    return slice(0, None) if include_embedding else slice(1, None)


def similarity_matrix(totals: dict, similarity: str, include_embedding: bool) -> np.ndarray:
    """sim_ij over the analysed states: frobenius (squared cosine of flattened
    matrices), token (mean over tokens of the per-token squared cosine), cka
    (cross-sequence linear CKA, HSIC summed over pairs) or cka-full (pooled linear CKA).

    Totals without any token (frobenius, token), or without any pair that
    has a cka value (cka), give NaN, never a number: the bootstrap counts such
    resamples (``ci["nan_resamples"]``) and its percentiles skip them.

    >>> from effdepth.numerics.cka import empty_cka_unit
    >>> h = np.array([[9.0, 0.0, 0.0], [0.0, 4.0, 2.0], [0.0, 2.0, 4.0]])
    >>> similarity_matrix({**empty_cka_unit(3), "hsic": h, "cka_pairs": np.asarray(1.0)}, "cka", False)
    array([[1. , 0.5],
           [0.5, 1. ]])
    """
    return get_similarity(similarity).matrix(totals, analysed_slice(include_embedding))


def matched_references(totals: dict, similarity: str, include_embedding: bool) -> dict:
    """R_init, R_size and R_matched (docs/method.md#matched-references) for the chosen similarity."""
    if get_similarity(similarity).reference_matrices:
        n = np.asarray(totals["n"])
        size = totals["ref_init"].shape[-1]
        with np.errstate(invalid="ignore", divide="ignore"):
            return {r: size * size / (totals[f"ref_{r}"].sum(axis=(-2, -1)) / n) for r in REFERENCE_NAMES}
    e = reference_energies(totals, similarity, include_embedding)
    return {r: reference_from_energies(e[r]) for r in REFERENCE_NAMES}


def increment_energies(totals: dict, similarity: str) -> np.ndarray:
    """The sizes of S_0, U_1..U_L as the similarity sees them, shape ``(..., M)``.

    frobenius: the energies |S_0|^2, |U_l|^2 of the raw states; cka: the
    covariance norms n_l (docs/method.md, section 5.2) from the cross-pair
    update HSIC; cka-full: energies of the pooled centred states.

    >>> increment_energies({"update_hsic": np.diag([4.0, 1.0, 1.0])}, "cka").tolist()
    [2.0, 1.0, 1.0]
    """
    return get_similarity(similarity).energies(totals)


def reference_energies(totals: dict, similarity: str, include_embedding: bool) -> dict:
    """Cumulative energies of R_init, R_size and R_matched for a similarity (not one with
    ``reference_matrices``, token).

    >>> e = reference_energies({"update_hsic": np.diag([4.0, 1.0, 1.0])}, "cka", False)
    >>> e["matched"].tolist()
    [3.0, 4.0]
    """
    energies = increment_energies(totals, similarity)
    return matched_energies(energies[..., 0], energies[..., 1:], include_embedding)


def scalar_metrics(totals: dict, similarity: str, include_embedding: bool) -> dict:
    """D_eff, ratio to F_N, gap %, references and attribution (vectorised)."""
    sim = similarity_matrix(totals, similarity, include_embedding)
    n = sim.shape[-1]
    fl = reference_fl(n)
    d = deff(sim)
    refs = matched_references(totals, similarity, include_embedding)
    out = {"deff": d, "ratio": d / fl, "gap_pct": 100.0 * (1.0 - d / fl)}
    out.update({f"reference_{r}": v for r, v in refs.items()})
    out.update(gap_attribution(fl, refs["init"], refs["matched"], d))
    return out


def update_summary(totals: dict, include_embedding: bool = False) -> dict:
    """Update cosine matrix (N x N), cos(U_l, S_{l-1}) and |U_l|/|S_{l-1}|.

    The cosine matrix is over the increments of the analysed sequence:
    U_1..U_L, or S_0, U_1..U_L with the embedding. These are frobenius
    quantities whatever the similarity: they summarise the geometry the
    "correlated updates" term comes from.
    """
    gi = totals["gram_increments"]
    sl = analysed_slice(include_embedding)
    gs = totals["gram_states"]
    upd = np.diagonal(gi, axis1=-2, axis2=-1)[..., 1:]
    prev = np.diagonal(gs, axis1=-2, axis2=-1)[..., :-1]
    cross = totals["update_state_dot"]
    denom = np.sqrt(upd * prev)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        cos_prev = np.where(denom > 0, cross / np.where(denom > 0, denom, 1.0), 0.0)
        rel = np.where(prev > 0, np.sqrt(upd / np.where(prev > 0, prev, 1.0)), np.inf)
    return {
        "update_cosine": cosine_from_gram(gi[..., sl, sl]),
        "update_state_cosine": np.clip(cos_prev, -1.0, 1.0),
        "update_energy": upd,
        "relative_contribution": rel,
    }


def related_measures(totals: dict) -> dict:
    """Measures from related work (docs/method.md#related-measures), over all states S_0..S_L.

    ``block_influence[l-1]`` = 1 - mean_t cos(s_{l-1}, s_l) (ShortGPT);
    ``angular_distance[i][j]`` = mean_t arccos(cos(s_i, s_j)) / pi (Gromov et al.);
    ``relative_contribution`` and ``update_state_cosine`` as in Csordas et al.
    """
    n = np.asarray(totals["n"])[..., None, None]
    with np.errstate(invalid="ignore", divide="ignore"):  # no token (n = 0): NaN
        cos_mean = totals["cos_sum"] / n
        angles = totals["angle_sum"] / n
    upd = update_summary(totals)
    return {
        "block_influence": 1.0 - np.diagonal(cos_mean[..., :-1, 1:], axis1=-2, axis2=-1),
        "angular_distance": angles,
        "relative_contribution": upd["relative_contribution"],
        "update_state_cosine": upd["update_state_cosine"],
    }


#: Why a view has no update summary or related measures (see :func:`has_cosine_summaries`).
NO_COSINE_SUMMARIES = (
    "a transformed view measured under kernel similarities alone keeps no cosine sums "
    "(they describe the untransformed states); measure with --similarity cka,frobenius to have them"
)


def has_cosine_summaries(totals: dict) -> bool:
    """Whether totals carry what :func:`update_summary` and :func:`related_measures` read (a
    transformed view measured under kernel similarities alone does not, see
    :func:`effdepth.numerics.sequence_units.stream_statistics`).

    >>> has_cosine_summaries({"n": 3.0}), has_cosine_summaries({"n": 3.0, "gram_increments": 0, "cos_sum": 0})
    (False, True)
    """
    return "gram_increments" in totals and "cos_sum" in totals


def full_metrics(totals: dict, similarity: str, include_embedding: bool) -> dict:
    """Everything a view reports, for one set of totals (no batch axes); the update summary and
    the related measures only where the totals carry them (:func:`has_cosine_summaries`)."""
    sim = similarity_matrix(totals, similarity, include_embedding)
    out = scalar_metrics(totals, similarity, include_embedding)
    out["reference"] = reference_fl(sim.shape[-1])
    out["similarity"] = sim
    out["profile"] = decay_profile(sim)
    if has_cosine_summaries(totals):
        out.update(update_summary(totals, include_embedding))
        out["related"] = related_measures(totals)
    out["reference_profiles"] = reference_profiles(totals, similarity, include_embedding)
    return out


def reference_profiles(totals: dict, similarity: str, include_embedding: bool) -> dict:
    """Decay profiles of F_N and the matched references, for overlays."""
    from .references import energy_ratio_matrix

    n = similarity_matrix(totals, similarity, include_embedding).shape[-1]
    out = {"fl": decay_profile(energy_ratio_matrix(np.arange(1.0, n + 1.0)))}
    if get_similarity(similarity).reference_matrices:
        for r in REFERENCE_NAMES:
            out[r] = decay_profile(totals[f"ref_{r}"] / np.asarray(totals["n"]))
    else:
        e = reference_energies(totals, similarity, include_embedding)
        for r in REFERENCE_NAMES:
            out[r] = decay_profile(energy_ratio_matrix(e[r]))
    return out
