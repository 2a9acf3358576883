"""Linear CKA between every state of one result and every state of another, over the same samples
(docs/method.md#comparing-two-results).

The Gram route: each state's centred Gram matrix ``K = Yc Yc^T`` (N x N, the same whatever the width),
formed in tiles of rows, of the lower triangle only (a tile of rows ``r0:r1`` forms columns ``:r1``;
the part left of its own block stands for its mirror image too, so it counts twice). Of every pair
(l of A, m of B) three numbers make both estimators: ``T = <K_A^l, K_B^m>_F``, the diagonals
``a = diag(K_A^l)``, ``b = diag(K_B^m)`` and their sums (the traces ``t``):

- ``biased`` (the V-statistic, as :mod:`~effdepth.numerics.hsic_resample`'s): ``T / n^2``;
- ``debiased`` (Song et al. 2012, Gram matrices with zeroed diagonals ``K~``): for centred data
  ``K~ 1 = -a`` and ``1^T K~ 1 = -t``, so it is
  ``(T - n/(n-2) a.b + t_A t_B / ((n-1)(n-2))) / (n (n-3))``.

CKA is ``HSIC(l, m) / sqrt(HSIC(l, l) HSIC(m, m))``, as :func:`~effdepth.numerics.metrics.cka` makes it.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from effdepth.errors import EffdepthError
from effdepth.numerics.hsic_plan import DEFAULT_BUDGET_BYTES, F64, byte_size
from effdepth.numerics.hsic_resample import MIN_SAMPLES
from effdepth.numerics.metrics import cka
from effdepth.numerics.sample_hsic import CentredLayers, LayerStack
from effdepth.numerics.similarities import SIMILARITIES

#: Gram rows per tile at most: T tiles of the lower triangle form N^2 d (1 + 1/T) flops of Gram matrices,
#: whole ones 2 N^2 d.
TILE_ROWS = 128


def cross_cka(
    stack_a: LayerStack, stack_b: LayerStack, *, budget_bytes: int = DEFAULT_BUDGET_BYTES, device=None
) -> dict:
    """``{"cka": (M_A, M_B), "cka-debiased": (M_A, M_B), "memory": plan}``: linear CKA of every state of A
    against every state of B (estimates; widths may differ), within ``budget_bytes``
    (:func:`cross_cka_memory`), computed on ``device`` (default A's).

    >>> from effdepth.numerics.stacks import PooledStates
    >>> a = PooledStates(np.cumsum(np.random.default_rng(0).normal(size=(3, 50, 4)), axis=0), "cpu")
    >>> b = PooledStates(np.random.default_rng(1).normal(size=(2, 50, 7)), "cpu")
    >>> out = cross_cka(a, a); np.round(np.diagonal(out["cka"]), 12).tolist(), out["memory"]["route"]
    ([1.0, 1.0, 1.0], 'gram')
    >>> cross_cka(a, b)["cka-debiased"].shape
    (3, 2)
    """
    if stack_a.samples != stack_b.samples:
        raise EffdepthError(
            f"A holds {stack_a.samples} samples and B {stack_b.samples}: the cross-model CKA pairs the same "
            "passages; measure B on A's passages"
        )
    n = stack_a.samples
    if n < MIN_SAMPLES:
        raise EffdepthError(f"{n} passage(s): the debiased CKA pairs four distinct passages; use more passages")
    memory = cross_cka_memory(n, (stack_a.count, stack_b.count), (stack_a.width, stack_b.width), budget_bytes)
    device = torch.device(device) if device is not None else stack_a.device
    grams = _GramSums.of((stack_a, stack_b), memory, device)
    hsic = grams.hsic()
    m = stack_a.count
    out = {}
    for spec in (s for s in SIMILARITIES.values() if s.kernel):
        own, between = hsic[spec.estimator]
        joint = np.diag(np.concatenate(own))  # the joint matrix of A's and B's states: cka() normalises it
        joint[:m, m:], joint[m:, :m] = between, between.T
        out[spec.name] = cka(joint)[:m, m:]
    return {**out, "memory": memory}


def cross_cka_memory(samples: int, counts: tuple, widths: tuple, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> dict:
    """How :func:`cross_cka` of two stacks (``counts`` states of ``widths`` features each, N = ``samples``)
    holds within ``budget_bytes``: the centred states stay resident when they fit half of what is left
    (else each tile reads them again: ``passes``), and a tile holds ``tile_rows`` rows of every state's Gram
    matrix. ``least_bytes``: one row per tile, nothing resident; a budget below it is a one-line error.

    >>> m = cross_cka_memory(1024, (31, 31), (1024, 1024)); m["resident"], m["tiles"], m["peak_bytes"] < 1 << 30
    (True, 8, True)
    >>> cross_cka_memory(1024, (31, 31), (1024, 1024), 1 << 20)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: --max-memory 1.0 MiB is below the 25.0 MiB the cross-model CKA needs at least for 1,024 passages and 31 + 31 states; use --max-memory 25.0MiB or more
    """
    n, budget = int(samples), int(budget_bytes)
    states = sum(counts)
    layers = F64 * n * sum(c * w for c, w in zip(counts, widths))
    # a layer in flight (its float64 copy, the centred copy, their squares for the diagonal); every state's
    # Gram diagonal; the sums per pair
    fixed = 3 * F64 * n * max(widths) + F64 * states * n + 4 * F64 * (counts[0] * counts[1] + states)
    per_row = F64 * n * states  # a row of every state's Gram tile (one buffer per stack)
    least = fixed + per_row
    if budget < least:
        need = byte_size(least, round_up=True)
        raise EffdepthError(
            f"--max-memory {byte_size(budget)} is below the {need} the cross-model CKA needs at least for {n:,} "
            f"passages and {counts[0]} + {counts[1]} states; use --max-memory {need.replace(' ', '')} or more"
        )
    resident = layers <= (budget - fixed) // 2
    rows = int(max(1, min(n, TILE_ROWS, (budget - fixed - layers * resident) // per_row)))
    tiles = math.ceil(n / rows)
    return {
        "route": "gram",
        "budget_bytes": budget,
        "least_bytes": int(least),
        "peak_bytes": int(fixed + layers * resident + per_row * rows),
        "resident": bool(resident),
        "tile_rows": rows,
        "tiles": tiles,
        "passes": 1 if resident else tiles,
    }


class _GramSums:
    """Per stack, the Frobenius products of its centred Gram matrices and their diagonals; between the two
    stacks, the Frobenius products of every pair (see the module docstring)."""

    def __init__(self, n: int, counts: tuple, device):
        f64 = {"dtype": torch.float64, "device": device}
        self.n = n
        self.between = torch.zeros(*counts, **f64)
        self.own = [torch.zeros(c, **f64) for c in counts]
        self.diag = [torch.zeros(c, n, **f64) for c in counts]

    @classmethod
    def of(cls, stacks: tuple, memory: dict, device) -> "_GramSums":
        n = stacks[0].samples
        sums = cls(n, tuple(s.count for s in stacks), device)
        layers = [CentredLayers(s, keep=memory["resident"]) for s in stacks]
        # one buffer per stack for all its tiles: tiles of growing sizes, each allocated anew, fragment the heap
        buffers = [torch.empty(s.count * memory["tile_rows"] * n, dtype=torch.float64, device=device) for s in stacks]
        for r0 in range(0, n, memory["tile_rows"]):
            r1 = min(n, r0 + memory["tile_rows"])
            tiles = [sums._tile(k, layers[k], buffers[k], r0, r1, device) for k in range(len(stacks))]
            tiles[0][:, :, :r0] *= 2.0  # left of the diagonal block: each entry stands for its mirror image too
            sums.between += tiles[0].reshape(len(tiles[0]), -1) @ tiles[1].reshape(len(tiles[1]), -1).T
            del tiles
        return sums

    def _tile(self, k: int, layers, buffer: torch.Tensor, r0: int, r1: int, device) -> torch.Tensor:
        """Rows ``r0:r1``, columns ``:r1`` of every Gram matrix of stack ``k`` (in ``buffer``); adds their share
        of its own sums."""
        count = len(self.own[k])
        tile = buffer[: count * (r1 - r0) * r1].view(count, r1 - r0, r1)
        for m, y in enumerate(layers):
            y = y.to(device)
            torch.matmul(y[r0:r1], y[:r1].T, out=tile[m])
            if r0 == 0:
                self.diag[k][m] = (y * y).sum(dim=1)
        self.own[k] += 2.0 * _squares(tile[:, :, :r0]) + _squares(tile[:, :, r0:])
        return tile

    def hsic(self) -> dict:
        """``{estimator: ((own HSIC of A (M_A,), of B (M_B,)), between (M_A, M_B))}`` as numpy arrays."""
        n = self.n
        (diag_a, diag_b), traces = self.diag, [d.sum(dim=1) for d in self.diag]
        own_dots = [(d * d).sum(dim=1) for d in self.diag]

        def debiased(frobenius, dots, traces_product):
            return (frobenius - n / (n - 2) * dots + traces_product / ((n - 1) * (n - 2))) / (n * (n - 3))

        out = {
            "biased": ([o / n**2 for o in self.own], self.between / n**2),
            "debiased": (
                [debiased(o, d, t * t) for o, d, t in zip(self.own, own_dots, traces)],
                debiased(self.between, diag_a @ diag_b.T, torch.outer(*traces)),
            ),
        }
        return {k: ([o.cpu().numpy() for o in own], between.cpu().numpy()) for k, (own, between) in out.items()}


def _squares(tiles: torch.Tensor) -> torch.Tensor:
    """Each matrix's sum of squares, ``(count,)``, without a squared copy of the tiles."""
    return torch.linalg.vector_norm(tiles, dim=(1, 2)) ** 2
