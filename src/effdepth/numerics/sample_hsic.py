"""HSIC between layers across samples (passages): a stack's unit sums by either route (docs/method.md#passage-mode).

A *stack* is M matrices ``Y_1..Y_M`` (N samples x d features each), given as a list or as a
:class:`LayerStack` that produces them one at a time, so the M matrices need never be in memory
together. For every pair the package gives two HSIC estimators of linear kernels: ``biased``,
``|Yc_i^T Yc_j|_F^2 / n^2`` with ``Yc`` column-centred (the V-statistic; the paper's CKA), and
``debiased``, the unbiased estimator of Song et al. (2012) over distinct samples.

This module makes a stack's unit sums (:class:`StackSums`) by the route
:mod:`~effdepth.numerics.hsic_plan` picks. Everything is float64 unless ``dtype`` says otherwise for
the Gram tiles (products of *centred* data; a test bounds the float32 error).
"""

from __future__ import annotations

import numpy as np
import torch

from effdepth.numerics.hsic_plan import DEFAULT_BUDGET_BYTES, hsic_route, stack_plan
from effdepth.numerics.hsic_resample import StackSums, Units


class LayerStack:
    """M matrices of N samples x d features produced one at a time, in order (see the module docstring).

    Subclasses set ``count``, ``samples``, ``width`` and ``device`` and implement :meth:`layers`; a
    second call of :meth:`layers` produces the same matrices again.
    """

    count: int
    samples: int
    width: int
    device: torch.device

    def layers(self, start: int = 0):
        """The matrices ``start..M-1``: float64 (N, d) tensors on ``device``."""
        raise NotImplementedError


class TensorStack(LayerStack):
    """A stack of matrices already in memory (any dtype; each converted to float64 when produced).

    >>> s = TensorStack([torch.ones(3, 2), torch.zeros(3, 2)])
    >>> s.count, s.samples, s.width, [float(y.sum()) for y in s.layers(1)]
    (2, 3, 2, [0.0])
    """

    def __init__(self, matrices):
        self.matrices = [m if isinstance(m, torch.Tensor) else torch.from_numpy(np.asarray(m)) for m in matrices]
        if not self.matrices:
            raise ValueError("a stack needs at least one matrix")
        self.count = len(self.matrices)
        self.samples, self.width = (int(x) for x in self.matrices[0].shape)
        if any(tuple(m.shape) != (self.samples, self.width) for m in self.matrices):
            raise ValueError("every matrix of a stack needs the same samples and features")
        self.device = self.matrices[0].device

    def layers(self, start: int = 0):
        for m in self.matrices[start:]:
            yield m.to(torch.float64)


def as_stack(matrices) -> LayerStack:
    """A :class:`LayerStack` as it is, anything else (a list of matrices) as a :class:`TensorStack`."""
    return matrices if isinstance(matrices, LayerStack) else TensorStack(matrices)


def centred(matrix: torch.Tensor) -> torch.Tensor:
    """Column-centred float64 copy (the mean over samples removed).

    >>> centred(torch.tensor([[1.0], [3.0]])).tolist()
    [[-1.0], [1.0]]
    """
    y = matrix.to(torch.float64)
    return y - y.mean(dim=0, keepdim=True)


def stack_sums(
    matrices, units: Units, *, budget_bytes: int = DEFAULT_BUDGET_BYTES, dtype=torch.float64, route: str | None = None
) -> StackSums:
    """The unit-level sums of a stack (a :class:`LayerStack` or a list of N x d matrices of any dtype;
    centred here in float64) by ``route`` (``None``: :func:`hsic_route`). Both routes give the same
    sums; ``dtype`` applies to the Gram route's tiles. A budget below :func:`least_stack_bytes` still
    works, one unit per tile.

    >>> y = [torch.randn(40, 3, dtype=torch.float64) for _ in range(3)]
    >>> a, b = (stack_sums(y, Units.blocks(40, 8), route=r) for r in ("gram", "feature"))
    >>> bool(torch.allclose(a.pair_blocks, b.pair_blocks)), bool(torch.allclose(a.rows, b.rows))
    (True, True)
    """
    stack = as_stack(matrices)
    if units.samples != stack.samples:
        raise ValueError(f"units cover {units.samples} samples, the matrices {stack.samples}")
    route = route or hsic_route(stack.count, stack.samples, stack.width, units.count, budget_bytes)
    if route == "feature":
        return _feature_sums(stack, units, int(budget_bytes))
    if route != "gram":
        raise ValueError(f"route must be gram or feature, got {route!r}")
    return _gram_sums(stack, units, int(budget_bytes), dtype)


class CentredLayers:
    """A stack's centred layers, kept after the first pass when they fit the budget, else produced again
    on every pass."""

    def __init__(self, stack: LayerStack, keep: bool):
        self.stack, self.keep, self.kept = stack, keep, None

    def __iter__(self):
        if self.kept is not None:
            yield from self.kept
            return
        kept = [] if self.keep else None
        for y in self.stack.layers():
            y = centred(y)
            if kept is not None:
                kept.append(y)
            yield y
        self.kept = kept


def _pairs(count: int, device) -> tuple:
    pairs = [(i, j) for i in range(count) for j in range(i, count)]
    ii, jj = (torch.tensor(ix, device=device) for ix in zip(*pairs))
    return pairs, ii, jj


def _gram_sums(stack: LayerStack, units: Units, budget: int, dtype) -> StackSums:
    """The Gram route: column tiles of whole units of every K_m, each reduced at once.

    K_m is symmetric, so a tile of column units ``lo..hi`` forms only the rows of units ``lo`` and on;
    the blocks above are mirrored, and their row sums are the tile's column sums. Each unit is padded
    with zero samples to the largest (adding nothing to any sum); one batched product of the (unit, unit)
    blocks with themselves gives every pair's block sums.
    """
    count, n, d = stack.count, stack.samples, stack.width
    device = stack.device
    g, size = units.count, int(units.sizes.max())
    plan = stack_plan(count, n, d, units, budget, "gram")
    per_unit = plan["tile_units"]
    layers = CentredLayers(stack, keep=plan["resident"])
    unit_of, within = units.index(device), _offsets_in_units(units, device)
    pairs, ii, jj = _pairs(count, device)
    pair_blocks = torch.zeros(len(pairs), g, g, dtype=torch.float64, device=device)
    rows = torch.zeros(count, n, g, dtype=torch.float64, device=device)
    diag = torch.zeros(count, n, dtype=torch.float64, device=device)
    for lo in range(0, g, per_unit):
        hi = min(g, lo + per_unit)
        below = slice(int(units.bounds[lo]), n)  # the samples of units lo..g-1: the tile's rows
        cols = slice(int(units.bounds[lo]), int(units.bounds[hi]))
        row_unit, col_unit = unit_of[below] - lo, unit_of[cols] - lo
        # blocks[a, b, m, p, q] = K_m[p-th sample of unit lo+a, q-th sample of unit lo+b]
        blocks = torch.zeros(g - lo, hi - lo, count, size, size, dtype=torch.float64, device=device)
        where = (row_unit[:, None], col_unit[None, :], within[below][:, None], within[cols][None, :])
        for m, y in enumerate(layers):
            if lo == 0:
                diag[m] = (y * y).sum(dim=1)
            tile = (y[below].to(dtype) @ y[cols].to(dtype).T).to(torch.float64)  # (rows, samples of the tile's units)
            blocks[:, :, m][where] = tile
            rows[m, below, lo:hi] = torch.zeros(tile.shape[0], hi - lo, dtype=torch.float64, device=device).index_add_(
                1, col_unit, tile
            )
            # the row sums of the tile's own samples over the units below it: K is symmetric
            if hi < g:
                below_tile = torch.zeros(g - lo, tile.shape[1], dtype=torch.float64, device=device).index_add_(
                    0, row_unit, tile
                )
                rows[m, cols, hi:] = below_tile[hi - lo :].T
            del tile
        # sum_{a in g, b in h} K_i[a,b] K_j[a,b] for every (g, h) and every (i, j): one batched product
        # of the stack's (g, h) blocks with themselves.
        flat = blocks.view((g - lo) * (hi - lo), count, size * size)
        inner = torch.bmm(flat, flat.transpose(1, 2)).view(g - lo, hi - lo, count, count)
        del flat, blocks
        pair_blocks[:, lo:, lo:hi] = inner[:, :, ii, jj].permute(2, 0, 1)
        pair_blocks[:, lo:hi, hi:] = pair_blocks[:, hi:, lo:hi].transpose(1, 2)  # the blocks above the tile's
        del inner
    pair_diag = torch.zeros(len(pairs), g, dtype=torch.float64, device=device).index_add_(
        1, unit_of, diag[ii] * diag[jj]
    )
    return StackSums(pair_blocks, pair_diag, rows, diag, pairs, units, "gram")


def _feature_sums(stack: LayerStack, units: Units, budget: int) -> StackSums:
    """The feature route: per pair, every unit's d x d cross-product; per matrix, its unit sums."""
    count, n, d = stack.count, stack.samples, stack.width
    device = stack.device
    g, size = units.count, int(units.sizes.max())
    slots = units.index(device) * size + _offsets_in_units(units, device)
    index = units.index(device)
    pairs, ii, jj = _pairs(count, device)
    where = {pair: p for p, pair in enumerate(pairs)}
    pair_blocks = torch.zeros(len(pairs), g, g, dtype=torch.float64, device=device)
    rows = torch.zeros(count, n, g, dtype=torch.float64, device=device)
    diag = torch.zeros(count, n, dtype=torch.float64, device=device)

    def padded(m: int, y: torch.Tensor) -> torch.Tensor:
        """The centred layer as (G, size, d), each unit padded with zero samples; its rows and diagonal on the way."""
        y = centred(y)
        diag[m] = (y * y).sum(dim=1)
        unit_sums = torch.zeros(g, d, dtype=torch.float64, device=device).index_add_(0, index, y)
        rows[m] = y @ unit_sums.T
        out = torch.zeros(g * size, d, dtype=torch.float64, device=device)
        out[slots] = y
        return out.reshape(g, size, d)

    for i, yi, j, yj in layer_pairs(stack, stack_plan(count, n, d, units, budget, "feature")["held"], padded):
        cross = torch.bmm(yi.transpose(1, 2), yj).reshape(g, d * d)  # C_g = Yc_i[g]^T Yc_j[g]
        pair_blocks[where[(i, j)]] = cross @ cross.T
        del cross
    pair_diag = torch.zeros(len(pairs), g, dtype=torch.float64, device=device).index_add_(1, index, diag[ii] * diag[jj])
    return StackSums(pair_blocks, pair_diag, rows, diag, pairs, units, "feature")


def layer_pairs(stack: LayerStack, held: int, transform=None):
    """Every pair ``(i, x_i, j, x_j)``, i <= j, of a stack's transformed layers (``transform(m, y)``;
    the layer itself without one), each pair once: a block of ``held`` layers is kept and the rest of
    the stack streams past it, so the stack is produced ceil(M / held) times.

    >>> s = TensorStack([torch.full((2, 1), float(v)) for v in range(3)])
    >>> [(i, j) for i, _, j, _ in layer_pairs(s, 1)]
    [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
    """
    transform = transform or (lambda m, y: y)
    held = max(1, int(held))
    for first in range(0, stack.count, held):
        block: list = []
        for m, y in enumerate(stack.layers(first), start=first):
            x = transform(m, y)
            for i, xi in block:
                yield i, xi, m, x
            if m < first + held:
                block.append((m, x))
                yield m, x, m, x
            del x


def _offsets_in_units(units: Units, device) -> torch.Tensor:
    """Each sample's position within its unit."""
    starts = torch.as_tensor(units.bounds[:-1], device=device)
    return torch.arange(units.samples, device=device) - torch.repeat_interleave(
        starts, torch.as_tensor(units.sizes, device=device)
    )
