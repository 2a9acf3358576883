"""From HSIC between layers across passages to every number a passage view reports (docs/method.md, sections 4-5).

Every function takes arrays with a leading resample axis (row 0 is the
estimate itself, see :func:`~effdepth.numerics.sample_hsic.resample_weights`)
so the point estimate and a thousand resamples go through the same code.
"""

from __future__ import annotations

import numpy as np

from effdepth.numerics.references import (
    energy_ratio_matrix,
    gap_attribution,
    headline,
    matched_energies,
    reference_fl,
    reference_from_energies,
)
from effdepth.numerics.similarity import decay_profile, deff

#: The matched references of a CKA estimator (docs/method.md#matched-references), by their paper names.
REFERENCE_NAMES = ("init", "size", "matched", "corr")


def cka(hsic: np.ndarray) -> np.ndarray:
    """``h_ij / sqrt(h_ii h_jj)`` (diagonal 1); NaN where a layer's own HSIC is not positive.

    Not clipped: the debiased estimator may dip below 0 or above 1, and
    clipping would bias it again.

    >>> cka(np.array([[4.0, 1.0], [1.0, 1.0]]))
    array([[1. , 0.5],
           [0.5, 1. ]])
    """
    h = np.asarray(hsic, dtype=np.float64)
    diag = np.diagonal(h, axis1=-2, axis2=-1)
    positive = diag > 0
    scale = np.sqrt(np.where(positive, diag, 1.0))
    sim = h / (scale[..., :, None] * scale[..., None, :])
    ok = positive[..., :, None] & positive[..., None, :]
    sim = np.where(ok, sim, np.nan)
    n = h.shape[-1]
    sim[..., np.arange(n), np.arange(n)] = np.where(positive, 1.0, np.nan)
    return sim


def analysed(include_embedding: bool) -> slice:
    """States S_0..S_L -> the analysed ones: S_1..S_L, or all with the embedding."""
    return slice(0, None) if include_embedding else slice(1, None)


def covariance_norms(hsic: np.ndarray) -> np.ndarray:
    """Each matrix's covariance norm ``|Yc^T Yc|_F / n = sqrt(HSIC(Y, Y))`` (0 where the estimate is not positive).

    >>> covariance_norms(np.array([[4.0, 0.0], [0.0, -1.0]])).tolist()
    [2.0, 0.0]
    """
    diag = np.diagonal(np.asarray(hsic, dtype=np.float64), axis1=-2, axis2=-1)
    return np.sqrt(np.clip(diag, 0.0, None))


def lag_profile(similarity: np.ndarray) -> np.ndarray:
    """``r_j = mean_k sqrt(max(sim_{k,k+j}, 0))`` for j = 0..L-1 (r_0 = 1): the update-similarity lag profile.

    >>> lag_profile(np.array([[1.0, 0.25], [0.25, 1.0]])).tolist()
    [1.0, 0.5]
    """
    root = np.sqrt(np.clip(np.nan_to_num(similarity, nan=0.0), 0.0, None))
    return decay_profile(root)


def correlated_reference_similarity(
    initial: np.ndarray, sizes: np.ndarray, lags: np.ndarray, include_embedding: bool
) -> np.ndarray:
    """The similarity matrix of R_corr (F_{h0+corr}): updates of sizes ``n_k`` whose cross-covariances
    are ``c_km = r_|k-m| sqrt(n_k n_m)``, an initial state of size ``n_0`` uncorrelated with them.

    ``s(i, j) = n_0 + sum_{k<=i, m<=j} c_km`` and ``sim_ij = s(i,j)^2 / (s(i,i) s(j,j))``;
    with ``r = (1, 0, 0, ...)`` this is min/max of the cumulative sizes (R_matched).

    >>> sim = correlated_reference_similarity(np.array(0.0), np.ones(3), np.array([1.0, 0.0, 0.0]), False)
    >>> bool(np.allclose(sim, energy_ratio_matrix(np.arange(1.0, 4.0))))
    True
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    initial = np.asarray(initial, dtype=np.float64)
    count = sizes.shape[-1]
    lag = np.abs(np.arange(count)[:, None] - np.arange(count)[None, :])
    root = np.sqrt(sizes)
    cross = np.take(lags, lag, axis=-1) * root[..., :, None] * root[..., None, :]
    s = initial[..., None, None] + np.cumsum(np.cumsum(cross, axis=-1), axis=-2)
    if include_embedding:
        pad = np.zeros(s.shape[:-2] + (count + 1, count + 1))
        pad[..., 1:, 1:] = s
        pad[..., 0, :] = initial[..., None]
        pad[..., :, 0] = initial[..., None]
        s = pad
    diag = np.diagonal(s, axis1=-2, axis2=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return s * s / (diag[..., :, None] * diag[..., None, :])


def kernel_numbers(state_hsic: np.ndarray, update_hsic: np.ndarray, include_embedding: bool) -> dict:
    """Every number of a CKA estimator from its HSIC of the states ``(R, L+1, L+1)`` (S_0..S_L) and of
    the updates ``(R, L, L)``: the similarity matrix, D_eff, the matched references, the attribution,
    the update similarity and the update diagnostic.

    >>> import numpy as np
    >>> h = np.eye(4)[None] * 1.0; h[0, 1:, 1:] = np.minimum.outer(np.arange(1.0, 4), np.arange(1.0, 4)) ** 2
    >>> hf = np.eye(3)[None]
    >>> out = kernel_numbers(h, hf, False); round(float(out["deff"][0]), 6), round(float(out["reference_size"][0]), 6)
    (1.5, 1.5)
    """
    sim = cka(state_hsic)[..., analysed(include_embedding), analysed(include_embedding)]
    n = sim.shape[-1]
    fl = reference_fl(n)
    d = deff(sim)
    sizes = covariance_norms(update_hsic)
    initial = covariance_norms(state_hsic)[..., 0]
    energies = matched_energies(initial, sizes, include_embedding)
    refs = {r: reference_from_energies(energies[r]) for r in ("init", "size", "matched")}
    update_sim = cka(update_hsic)
    corr_sim = correlated_reference_similarity(initial, sizes, lag_profile(update_sim), include_embedding)
    refs["corr"] = deff(corr_sim)
    out = {
        "similarity": sim,
        "deff": d,
        **headline(d, fl),
        "profile": decay_profile(sim),
    }
    out.update({f"reference_{r}": v for r, v in refs.items()})
    out.update(gap_attribution(fl, refs["init"], refs["matched"], d))
    out["update_similarity"] = update_sim
    out["update_deff"] = deff(update_sim)
    out["update_deff_per_layer"] = out["update_deff"] / update_sim.shape[-1]
    out["update_sizes"] = sizes
    out["reference_profiles"] = {
        "fl": _fl_profile(n, d.shape),
        **{r: decay_profile(energy_ratio_matrix(energies[r])) for r in ("init", "size", "matched")},
        "corr": decay_profile(corr_sim),
    }
    return out


def plain_numbers(sim: np.ndarray) -> dict:
    """The numbers of a similarity without matched references (``cosine``): D_eff against F_N.

    >>> round(float(plain_numbers(np.eye(3)[None])["deff"][0]), 6)
    3.0
    """
    n = sim.shape[-1]
    fl = reference_fl(n)
    d = deff(sim)
    return {
        "similarity": sim,
        "deff": d,
        **headline(d, fl),
        "profile": decay_profile(sim),
        "reference_profiles": {"fl": _fl_profile(n, d.shape)},
    }


def _fl_profile(n: int, batch: tuple) -> np.ndarray:
    """F_N's decay profile, repeated along the leading (resample) axes."""
    profile = decay_profile(energy_ratio_matrix(np.arange(1.0, n + 1.0)))
    return np.broadcast_to(profile, tuple(batch) + profile.shape).copy()
