"""Token mode's similarities (``--pooling none``; docs/method.md#similarity).

Each spec reads totals of statistics summed over tokens: ``matrix`` turns
them into sim_ij, ``energies`` into the sizes of the matched references.
The accumulator (:mod:`~effdepth.numerics.streams`) keeps what ``unit`` and
``deff_keys`` say; everything after it asks the spec.
"""

from __future__ import annotations

import numpy as np

from ..passage_metrics import covariance_norms
from ..similarity import cka_from_hsic, squared_cosine_from_gram
from .spec import TokenSimilarity

#: The fewest tokens (of a sequence, or of a view for cka-full) a kernel similarity compares layers
#: from, and why.
MIN_TOKENS = 4
KERNEL_REASON = "fewer leave the centred states too few degrees of freedom to compare layers"


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


SPECS = (
    TokenSimilarity(
        name="frobenius",
        label="squared cosine of the flattened states",
        axis_label=r"$\cos^2(S_i, S_j)$",
        unit="sequence",
        samples="tokens per sequence",
        deff_keys=("n", "gram_states"),
        matrix=_frobenius,
        energies=_raw_energies,
    ),
    TokenSimilarity(
        name="token",
        label="mean per-token squared cosine",
        axis_label=r"token mean of $\cos^2(s_i, s_j)$",
        unit="sequence",
        samples="tokens per sequence",
        deff_keys=("n", "cos2_sum"),
        matrix=_token,
        energies=_raw_energies,
        reference_matrices=True,
        needs_token_keys=True,
    ),
    TokenSimilarity(
        name="cka",
        label="cross-sequence linear CKA",
        axis_label="cross-sequence linear CKA",
        unit="pair",
        min_samples=MIN_TOKENS,
        samples="tokens per sequence",
        min_reason=KERNEL_REASON,
        default=True,
        deff_keys=("n",),
        matrix=_cka,
        energies=_covariance_norms,
    ),
    TokenSimilarity(
        name="cka-full",
        label="pooled linear CKA",
        axis_label="linear CKA, tokens pooled",
        unit="run",
        min_samples=MIN_TOKENS,
        samples="tokens in a view",
        min_reason=KERNEL_REASON,
        calibrated=False,
        not_distributed="its pooled cross-products are not per sequence",
        memory_check=True,
        in_all=False,
        deff_keys=("n",),
        matrix=_cka_full,
        energies=_pooled_energies,
    ),
)
