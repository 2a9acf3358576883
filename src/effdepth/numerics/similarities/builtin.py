"""The similarities (docs/method.md#passage-mode).

Each compares layers across samples: made of one HSIC estimator (``estimator``), or a matrix computed
from the samples under every resample (``matrix``).
"""

from __future__ import annotations

import numpy as np
import torch

from effdepth.numerics.hsic_plan import F64
from effdepth.numerics.hsic_resample import MIN_SAMPLES, Units
from effdepth.numerics.sample_hsic import LayerStack, layer_pairs
from effdepth.numerics.similarities.spec import Similarity


def resampled_cosine(stack: LayerStack, units: Units, weights: np.ndarray, budget: int, device) -> np.ndarray:
    """(R, M, M) mean over passages of the cosine of (uncentred) pooled vectors, under every row of
    ``weights`` (R x G unit counts): per pair of layers, each unit's sum of its passages' cosines,
    holding at most half of ``budget`` bytes of layers.

    >>> from effdepth.numerics.sample_hsic import TensorStack
    >>> y = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    >>> resampled_cosine(TensorStack([y, y]), Units.blocks(2, 2), np.ones((1, 2)), 1 << 20, "cpu")[0].tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    """
    index = units.index(device)
    count = stack.count
    sums = torch.zeros(units.count, count, count, dtype=torch.float64, device=device)

    def unit(m, y):
        return y / torch.linalg.vector_norm(y, dim=-1, keepdim=True).clamp_min(1e-300)

    held = max(1, (budget // 2) // (F64 * stack.samples * stack.width))
    for i, ui, j, uj in layer_pairs(stack, held, unit):
        per_unit = torch.zeros(units.count, dtype=torch.float64, device=device).index_add_(0, index, (ui * uj).sum(-1))
        sums[:, i, j] = per_unit
        sums[:, j, i] = per_unit
    w = torch.as_tensor(weights, dtype=torch.float64, device=device)
    counts = w @ torch.as_tensor(units.sizes, dtype=torch.float64, device=device)
    return (torch.einsum("rg,gij->rij", w, sums) / counts[:, None, None]).cpu().numpy()


SPECS = (
    Similarity(
        name="cka",
        label="linear CKA across passages, biased HSIC: the paper's",
        axis_label="linear CKA across passages",
        min_samples=2,
        min_reason="centred over one passage, every pooled vector is zero",
        default=True,
        companions=("cka-debiased",),
        estimator="biased",
    ),
    Similarity(
        name="cka-debiased",
        label="linear CKA across passages, unbiased HSIC (Song et al. 2012)",
        axis_label="debiased linear CKA across passages",
        min_samples=MIN_SAMPLES,
        min_reason="the debiased estimator pairs four distinct passages",
        estimator="debiased",
    ),
    Similarity(
        name="cosine",
        label="mean over passages of the cosine of pooled vectors",
        axis_label="mean cosine of pooled vectors",
        references=False,
        matrix=resampled_cosine,
    ),
)
