"""HSIC between layers across samples (passages), with every bootstrap resample (docs/method.md#passage-mode).

A *stack* is M matrices ``Y_1..Y_M`` (N samples x d features each: one
pooled vector per passage and layer), given as a list or as a
:class:`LayerStack` that produces them one at a time, in order, so that the
M matrices need never be in memory together. For every pair of matrices
this module gives the two HSIC estimators of linear kernels:

- ``biased``: ``|Yc_i^T Yc_j|_F^2 / n^2`` with ``Yc`` column-centred (the
  V-statistic; the paper's CKA is built from it);
- ``debiased``: the unbiased estimator of Song et al. (2012),
  ``S2/(n)_2 - 2 S3/(n)_3 + S4/(n)_4`` over distinct samples.

**Unit sums.** Samples fall into *units*: contiguous blocks of samples, the
bootstrap's resampling units (each sample its own unit when N is at most the
number of units asked for; one unit when there are no resamples). What both
estimators need under any resample is small and resample-free
(:class:`StackSums`), with ``K_m = Yc_m Yc_m^T``:

- per pair (i, j): ``M_gh = sum_{a in g, b in h} K_i[a,b] K_j[a,b]`` (G x G)
  and ``diag_g = sum_{a in g} K_i[a,a] K_j[a,a]`` (G);
- per matrix: ``R_m[a, h] = sum_{b in h} K_m[a, b]`` (N x G) and ``K_m[a, a]``.

**Two routes to the same sums** (:func:`hsic_route` picks one per stack):

- the *Gram route* forms ``K_m`` (N x N) in column tiles of whole units and
  reduces each tile at once: 2 M N^2 d flops for the Grams, then N^2 per pair;
- the *feature route* forms, per pair and unit, ``C_g = Yc_i[g]^T Yc_j[g]``
  (d x d): ``M_gh = <C_g, C_h>_F`` and ``R_m[a, h] = Yc_m[a] . sum_{b in h}
  Yc_m[b]``: 2 N d^2 + 2 G^2 d^2 flops per pair. With one unit (no
  resamples) ``M_11 = |Yc_i^T Yc_j|_F^2``, the textbook feature route.

The route of fewer flops is taken among those whose least working set fits
the memory budget. The Gram route shares its M Grams among the M (M+1)/2
pairs, so it wins unless N is large against d: the feature route is
cheaper from about N > M d (1 + G^2 / N) / 2 (G = 1 without resamples;
Pythia-70M's shape at N = 10,000 and G = 128: feature; every wider model of
Table 2: Gram). The resamples stay on unit sums on both
routes: on the feature side each pair of units costs a d x d inner product,
cheap exactly when d is small, which is when that route is chosen.

**Memory.** ``budget_bytes`` bounds what a stack holds: the unit sums, a few
layers in flight, the Gram tiles (or the units' cross-products), and the
centred layers kept resident when they fit in half of what is left (else
they are produced again for every tile or block of layers: more passes over
the stored vectors, the same numbers). :func:`least_stack_bytes` is the
least budget a stack can work in.

**Resamples.** A resample draws units with replacement: weights ``c`` (R x G,
row 0 all ones = the estimate itself). Every term of both estimators under
weights is a quadratic form in ``c`` of the sums above (``c^T M c``,
``sum_a c_a (R_i c)_a (R_j c)_a``, ...), so 1,000 resamples cost
``R G^2`` per pair, whatever N. Under weights a sample never pairs with
its own copy: the debiased estimator is the weighted U-statistic over
*distinct* original samples, and the biased one the V-statistic whose tuples
weigh the counts of their distinct samples (:func:`_biased` says why); both
are the estimates themselves when every weight is 1.

Everything is float64 unless ``dtype`` says otherwise for the Gram tiles
(products of *centred* data; a test bounds the float32 error).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

#: Bytes a stack may hold unless told otherwise (``--max-memory``'s default).
DEFAULT_BUDGET_BYTES = 4 << 30
#: The debiased estimator needs four distinct samples.
MIN_SAMPLES = 4
#: Bytes of one float64 value.
F64 = 8
#: N x d float64 layers a stack may have in flight besides what it keeps, at worst the matched surrogate's:
#: its running sum, the previous and the current state, their difference and its permutation, and the
#: centred copy the sums are made of.
LAYERS_IN_FLIGHT = 6
#: (R, M, N) arrays the resampling holds at once per chunk of resamples.
RESAMPLE_ARRAYS = 6
#: Resamples computed together at most.
RESAMPLE_CHUNK = 128


@dataclass(frozen=True)
class Units:
    """Contiguous blocks of samples: the bootstrap's resampling units.

    ``bounds[g]:bounds[g+1]`` are the samples of unit g; sizes differ by at most one.

    >>> Units.blocks(10, 4).sizes.tolist(), Units.blocks(3, 8).count
    ([2, 3, 3, 2], 3)
    """

    bounds: np.ndarray

    @classmethod
    def blocks(cls, samples: int, max_units: int) -> "Units":
        """``min(samples, max_units)`` blocks of consecutive samples."""
        if samples < 1 or max_units < 1:
            raise ValueError(f"need at least one sample and one unit, got {samples} and {max_units}")
        count = min(int(samples), int(max_units))
        return cls(np.linspace(0, samples, count + 1).round().astype(np.int64))

    @property
    def count(self) -> int:
        return len(self.bounds) - 1

    @property
    def samples(self) -> int:
        return int(self.bounds[-1])

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)

    def index(self, device="cpu") -> torch.Tensor:
        """The unit of every sample, ``(N,)``."""
        return torch.repeat_interleave(torch.arange(self.count, device=device), torch.as_tensor(self.sizes, device=device))

    def describe(self) -> dict:
        sizes = self.sizes
        return {"units": self.count, "samples": self.samples, "samples_per_unit": [int(sizes.min()), int(sizes.max())]}


def resample_weights(units: int, resamples: int, seed: int) -> np.ndarray:
    """Unit counts ``(1 + resamples, units)``: row 0 all ones (the estimate), then multinomial draws.

    >>> w = resample_weights(5, 3, seed=0); w.shape, w[0].tolist(), w.sum(axis=1).tolist()
    ((4, 5), [1.0, 1.0, 1.0, 1.0, 1.0], [5.0, 5.0, 5.0, 5.0])
    """
    draws = np.random.default_rng(seed).multinomial(units, np.full(units, 1.0 / units), size=resamples)
    return np.concatenate([np.ones((1, units)), draws]).astype(np.float64)


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


@dataclass
class StackSums:
    """Unit-level sums of one stack's Gram matrices (see the module docstring); resample-free."""

    pair_blocks: torch.Tensor  # (P, G, G)
    pair_diag: torch.Tensor  # (P, G)
    rows: torch.Tensor  # (M, N, G)
    diag: torch.Tensor  # (M, N)
    pairs: list  # (i, j), i <= j
    units: Units
    route: str = "gram"

    @property
    def size(self) -> int:
        return int(self.rows.shape[0])


def centred(matrix: torch.Tensor) -> torch.Tensor:
    """Column-centred float64 copy (the mean over samples removed).

    >>> centred(torch.tensor([[1.0], [3.0]])).tolist()
    [[-1.0], [1.0]]
    """
    y = matrix.to(torch.float64)
    return y - y.mean(dim=0, keepdim=True)


# --------------------------------------------------------------------------- costs and memory


def route_flops(count: int, samples: int, width: int, units: int) -> dict:
    """Float64 flops of one stack's unit sums by route (the resamples cost the same on both).

    >>> f = route_flops(7, 10_000, 512, 128); f["feature"] < f["gram"]
    True
    >>> f = route_flops(65, 10_000, 5120, 128); f["feature"] < f["gram"]
    False
    """
    m, n, d, g = count, samples, width, units
    pairs = m * (m + 1) // 2
    return {"gram": 2 * m * n * n * d + 2 * m * m * n * n,
            "feature": 2 * pairs * n * d * d + 2 * pairs * g * g * d * d + 2 * m * n * d * g}


def _unit_size(samples: int, units: int) -> int:
    return -(-int(samples) // int(units))  # the largest unit: sizes differ by at most one


def persisted_bytes(count: int, samples: int, units: int) -> int:
    """The unit sums a stack keeps: rows, pair blocks and diagonals (:class:`StackSums`)."""
    g, pairs = units, count * (count + 1) // 2
    return F64 * (count * samples * g + pairs * g * g + pairs * g + count * samples)


def fixed_bytes(count: int, samples: int, width: int, units: int) -> int:
    """What a stack holds on either route besides its tiles or cross-products and resident layers."""
    return persisted_bytes(count, samples, units) + LAYERS_IN_FLIGHT * F64 * samples * width


def gram_tile_bytes(count: int, samples: int, units: int, tile_units: int) -> int:
    """A tile of ``tile_units`` units of every Gram matrix and its reordered copy (unit-padded)."""
    size = _unit_size(samples, units)
    return 2 * F64 * count * units * size * tile_units * size


def feature_pair_bytes(samples: int, width: int, units: int) -> int:
    """One pair's cross-products of every unit (and their flattened copy) and the two padded layers."""
    size = _unit_size(samples, units)
    return F64 * (2 * units * width * width + 2 * units * size * width)


def resample_bytes(count: int, samples: int, units: int, chunk: int) -> int:
    """The resampling of a stack: its sums and the (R, M, N) arrays of ``chunk`` resamples."""
    return persisted_bytes(count, samples, units) + RESAMPLE_ARRAYS * F64 * chunk * count * samples


def least_stack_bytes(count: int, samples: int, width: int, units: int, route: str | None = None) -> int:
    """The least budget a stack can be computed in: one unit per Gram tile (or one resident layer on
    the feature route), one resample at a time.

    >>> round(least_stack_bytes(65, 10_000, 5120, 128) / 2**30, 2)  # Qwen3.5-27B's stack at N = 10,000
    3.95
    """
    route = route or "gram"
    build = fixed_bytes(count, samples, width, units) + (
        gram_tile_bytes(count, samples, units, 1) if route == "gram" else
        feature_pair_bytes(samples, width, units) + F64 * _unit_size(samples, units) * units * width)
    return max(build, resample_bytes(count, samples, units, 1))


def hsic_route(count: int, samples: int, width: int, units: int, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> str:
    """``"gram"`` or ``"feature"``: the route of fewer flops whose least working set fits the budget.

    >>> hsic_route(7, 10_000, 512, 128), hsic_route(65, 10_000, 5120, 128), hsic_route(3, 12, 64, 12)
    ('feature', 'gram', 'gram')
    """
    flops = route_flops(count, samples, width, units)
    fits = least_stack_bytes(count, samples, width, units, "feature") <= budget_bytes
    return "feature" if fits and flops["feature"] < flops["gram"] else "gram"


def resample_chunk(count: int, samples: int, units: int, budget_bytes: int) -> int:
    """Resamples computed at once: as many as the budget holds, 1 to :data:`RESAMPLE_CHUNK`.

    >>> resample_chunk(65, 10_000, 128, 4 << 30), resample_chunk(65, 10_000, 128, 1 << 30)
    (107, 3)
    """
    free = budget_bytes - persisted_bytes(count, samples, units)
    return int(max(1, min(RESAMPLE_CHUNK, free // (RESAMPLE_ARRAYS * F64 * count * samples))))


def stack_plan(count: int, samples: int, width: int, units: int, budget_bytes: int = DEFAULT_BUDGET_BYTES,
               route: str | None = None) -> dict:
    """How a stack is computed within ``budget_bytes``, and what it holds at its peak: the route, whether
    its centred layers stay resident (Gram) or how many are held per block (feature), the units per
    Gram tile, the passes over the stack's layers, the resamples per chunk and the peak in bytes.

    >>> p = stack_plan(65, 10_000, 5120, 128, 4 << 30); p["route"], p["resident"], p["passes"], p["peak_bytes"] <= 4 << 30
    ('gram', False, 128, True)
    >>> p = stack_plan(65, 10_000, 5120, 128, 64 << 30); p["resident"], p["passes"], p["tile_units"]
    (True, 1, 46)
    """
    route = route or hsic_route(count, samples, width, units, budget_bytes)
    fixed = fixed_bytes(count, samples, width, units)
    layer = F64 * samples * width
    plan = {"route": route, "resident": False, "held": 0, "tile_units": 0}
    if route == "gram":
        free = budget_bytes - fixed
        plan["resident"] = count * layer <= free // 2
        tile_budget = free - (count * layer if plan["resident"] else 0)
        plan["tile_units"] = int(max(1, min(units, tile_budget // gram_tile_bytes(count, samples, units, 1))))
        tiles = -(-units // plan["tile_units"])
        plan["passes"] = 1 if plan["resident"] else tiles
        build = fixed + gram_tile_bytes(count, samples, units, plan["tile_units"]) + count * layer * plan["resident"]
    else:
        padded = F64 * _unit_size(samples, units) * units * width
        free = budget_bytes - fixed - feature_pair_bytes(samples, width, units)
        plan["held"] = int(max(1, min(count, free // padded)))
        plan["passes"] = -(-count // plan["held"])
        build = fixed + feature_pair_bytes(samples, width, units) + plan["held"] * padded
    plan["chunk"] = resample_chunk(count, samples, units, budget_bytes)
    plan["peak_bytes"] = int(max(build, resample_bytes(count, samples, units, plan["chunk"])))
    return plan


# --------------------------------------------------------------------------- the unit sums


def stack_sums(matrices, units: Units, *, budget_bytes: int = DEFAULT_BUDGET_BYTES, dtype=torch.float64,
               route: str | None = None) -> StackSums:
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


class _CentredLayers:
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

    Every unit is padded with zero samples to the size of the largest, so unit sums are reshapes (a zero
    sample adds nothing to any sum). Tiles hold at least one unit.
    """
    count, n, d = stack.count, stack.samples, stack.width
    device = stack.device
    g, size = units.count, int(units.sizes.max())
    plan = stack_plan(count, n, d, g, budget, "gram")
    per_unit = plan["tile_units"]
    layers = _CentredLayers(stack, keep=plan["resident"])
    slots = units.index(device) * size + _offsets_in_units(units, device)  # each sample's padded position
    pairs, ii, jj = _pairs(count, device)
    pair_blocks = torch.zeros(len(pairs), g, g, dtype=torch.float64, device=device)
    rows = torch.zeros(count, n, g, dtype=torch.float64, device=device)
    diag = torch.zeros(count, n, dtype=torch.float64, device=device)
    for lo in range(0, g, per_unit):
        hi = min(g, lo + per_unit)
        cols = slice(int(units.bounds[lo]), int(units.bounds[hi]))
        col_slots = slots[cols] - lo * size
        tiles = torch.zeros(count, g * size, (hi - lo) * size, dtype=torch.float64, device=device)
        for m, y in enumerate(layers):
            if lo == 0:
                diag[m] = (y * y).sum(dim=1)
            tile = (y.to(dtype) @ y[cols].to(dtype).T).to(torch.float64)  # (N, samples of the tile's units)
            tiles[m][slots[:, None], col_slots[None, :]] = tile
            del tile
        rows[:, :, lo:hi] = tiles.reshape(count, g * size, hi - lo, size).sum(-1)[:, slots]
        # sum_{a in g, b in h} K_i[a,b] K_j[a,b] for every (g, h) and every (i, j): one batched product
        # of the stack's (g, h) blocks with themselves.
        blocks = tiles.reshape(count, g, size, hi - lo, size).permute(1, 3, 0, 2, 4).reshape(g * (hi - lo), count, size * size)
        del tiles
        inner = torch.bmm(blocks, blocks.transpose(1, 2)).reshape(g, hi - lo, count, count)
        pair_blocks[:, :, lo:hi] = inner[:, :, ii, jj].permute(2, 0, 1)
        del blocks, inner
    index = units.index(device)
    pair_diag = torch.zeros(len(pairs), g, dtype=torch.float64, device=device).index_add_(1, index, diag[ii] * diag[jj])
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

    for i, yi, j, yj in layer_pairs(stack, stack_plan(count, n, d, g, budget, "feature")["held"], padded):
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
    return torch.arange(units.samples, device=device) - torch.repeat_interleave(starts, torch.as_tensor(units.sizes, device=device))


def resampled_hsic(sums: StackSums, weights, *, chunk: int = RESAMPLE_CHUNK) -> dict:
    """``{"biased": (R, M, M), "debiased": (R, M, M)}`` HSIC of every pair under every row of
    ``weights`` (R x G unit counts; row 0 all ones gives the estimates themselves), ``chunk`` rows at
    a time (:func:`resample_chunk` sizes it to a budget).

    The debiased value needs at least :data:`MIN_SAMPLES` distinct samples with weight;
    otherwise it is NaN.
    """
    c_all = torch.as_tensor(np.asarray(weights), dtype=torch.float64, device=sums.rows.device)
    out = {"biased": [], "debiased": []}
    for start in range(0, c_all.shape[0], chunk):
        part = _resampled_chunk(sums, c_all[start:start + chunk])
        for key in out:
            out[key].append(part[key])
    return {key: torch.cat(values).cpu().numpy() for key, values in out.items()}


def _resampled_chunk(sums: StackSums, c: torch.Tensor) -> dict:
    w = _WeightedSums.of(sums, c)
    return {"biased": _symmetric(_biased(w), sums), "debiased": _symmetric(_debiased(w), sums)}


@dataclass
class _WeightedSums:
    """The sums both estimators are made of, under R rows of unit weights ``c``; (R, P) per pair unless noted.

    ``t_xy = x^T M y`` over the pair blocks, ``d_k = sum_a c_a^k K_i[a,a] K_j[a,a]``,
    ``u = K c`` (R, M, N) and ``u_off`` the same without the diagonal, ``s = c^T K c`` (R, M),
    ``z = sum_a c_a u_i,a u_j,a``, and ``distinct[k]`` the weighted number of k-tuples of distinct samples.
    """

    cn: torch.Tensor  # (R, N): each sample's weight
    diag: torch.Tensor  # (M, N)
    t_cc: torch.Tensor
    t_cq: torch.Tensor
    t_qq: torch.Tensor
    d: dict
    u_off: torch.Tensor
    s: torch.Tensor
    z: torch.Tensor
    distinct: dict
    ii: torch.Tensor
    jj: torch.Tensor

    @classmethod
    def of(cls, sums: StackSums, c: torch.Tensor) -> "_WeightedSums":
        q = c * c
        cn = c[:, sums.units.index(c.device)]
        r, (p, g) = c.shape[0], sums.pair_blocks.shape[:2]
        # Quadratic forms of the pair blocks: one product of every block with both weight vectors.
        y = (torch.cat([c, q]) @ sums.pair_blocks.reshape(p * g, g).T).reshape(2 * r, p, g)
        forms = torch.bmm(y[:r], torch.stack([c, q], dim=-1))  # (R, P, 2): c^T M c, c^T M q
        t_qq = torch.bmm(y[r:], q[..., None])[..., 0]
        d = {k: (c ** k) @ sums.pair_diag.T for k in (1, 2, 3, 4)}
        m, n = sums.diag.shape
        u = (c @ sums.rows.reshape(m * n, g).T).reshape(r, m, n)
        ii, jj = (torch.tensor(ix, device=c.device) for ix in zip(*sums.pairs))
        power = [(cn ** k).sum(1) for k in (1, 2, 3, 4)]
        p1, p2, p3, p4 = power
        distinct = {1: p1, 2: p1 ** 2 - p2, 3: p1 ** 3 - 3 * p1 * p2 + 2 * p3,
                    4: p1 ** 4 - 6 * p1 ** 2 * p2 + 3 * p2 ** 2 + 8 * p1 * p3 - 6 * p4}
        return cls(cn, sums.diag, forms[..., 0], forms[..., 1], t_qq, d, u - sums.diag[None] * cn[:, None],
                   (u * cn[:, None]).sum(-1), torch.bmm(u * cn[:, None], u.transpose(1, 2))[:, ii, jj], distinct, ii, jj)

    def pair(self, matrices: torch.Tensor) -> torch.Tensor:
        """(R, M, M) -> (R, P): the values of the pairs i <= j."""
        return matrices[:, self.ii, self.jj]

    def weighted_off(self, weights: torch.Tensor) -> torch.Tensor:
        """(R, P): ``sum_a weights_a u~_i,a u~_j,a``."""
        return self.pair(torch.bmm(self.u_off * weights[:, None], self.u_off.transpose(1, 2)))


def _biased(w: _WeightedSums) -> torch.Tensor:
    """(R, P) the biased HSIC under weights, with a passage's copies never paired with each other.

    The V-statistic ``T1/n^2 - 2 T2/n^3 + T3/n^4`` (``T1 = sum_ab K_ab L_ab``,
    ``T2 = sum_abc K_ab L_ac``, ``T3 = sum_abcd K_ab L_cd``) sums over tuples
    of passages. On resampled data a tuple that holds two copies of one
    passage pairs the passage with itself once more, so a resample carries
    about twice the self-pairs of the sample, and the estimator's self-pair
    bias with them: intervals shift off the estimate, the more so the larger
    d is against N. Here a tuple weighs the product of the counts of its
    *distinct* passages (``c_a`` however often passage a occurs in it), and
    each ``n^k`` is the sum of those weights; with every count 1 this is the
    estimate itself. Each term is the plain weighted sum less its
    coincident-passage parts, all of them diagonal (``x = c^2 - c``: the extra
    weight a repeated passage has in the plain sums).
    """
    d1, d2, d3, d4 = (w.d[k] for k in (1, 2, 3, 4))
    x = w.cn * w.cn - w.cn
    diag_x = w.diag[None] * x[:, None]  # (R, M, N)
    e = torch.bmm(diag_x, w.u_off.transpose(1, 2))  # sum_a x_a K_i[a,a] (K~_j c)_a
    cross = e[:, w.ii, w.jj] + e[:, w.jj, w.ii]
    t1 = w.t_cc - d2 + d1
    t2 = w.z - (cross + (w.t_cq - w.t_cc - d3 + d2) + (d3 - d1))
    s = w.s - diag_x.sum(-1)  # sum_ab K_ab with each passage paired with itself once per copy
    t3 = s[:, w.ii] * s[:, w.jj] - ((d2 - d1) + 2.0 * cross + 4.0 * (w.weighted_off(x) - (w.t_qq - w.t_cq - d4 + d3))
                                    + 2.0 * (w.t_qq - d4 - w.t_cc + d2))
    n1, n2, n3, n4 = (w.distinct[k][:, None] for k in (1, 2, 3, 4))
    # Sums over all k-tuples of those weights: distinct tuples grouped by Stirling numbers of the second kind.
    return t1 / (n2 + n1) - 2.0 * t2 / (n3 + 3.0 * n2 + n1) + t3 / (n4 + 6.0 * n3 + 7.0 * n2 + n1)


def _debiased(w: _WeightedSums) -> torch.Tensor:
    """(R, P) the weighted U-statistic of Song et al. (2012) over distinct samples (NaN with fewer than four)."""
    d2, d3, d4 = (w.d[k] for k in (2, 3, 4))
    cn2 = w.cn * w.cn
    s_off = w.s - cn2 @ w.diag.T
    s2, s2_q, s2_c = w.t_cc - d2, w.t_qq - d4, w.t_cq - d3
    s3 = w.weighted_off(w.cn) - s2_c
    s3_q = w.weighted_off(cn2) - s2_q
    s4 = s_off[:, w.ii] * s_off[:, w.jj] - 4.0 * s3_q - 2.0 * s2_q
    n2, n3, n4 = (w.distinct[k][:, None] for k in (2, 3, 4))
    debiased = s2 / n2 - 2.0 * s3 / n3 + s4 / n4
    return torch.where(((w.cn > 0).sum(1) >= MIN_SAMPLES)[:, None], debiased, torch.nan)


def _symmetric(values: torch.Tensor, sums: StackSums) -> torch.Tensor:
    """(R, P) values of the pairs i <= j -> (R, M, M) symmetric matrices."""
    m = sums.size
    out = torch.empty(values.shape[0], m, m, dtype=values.dtype, device=values.device)
    ii, jj = (torch.tensor(ix, device=values.device) for ix in zip(*sums.pairs))
    out[:, ii, jj] = values
    out[:, jj, ii] = values
    return out


def feature_hsic(matrices) -> dict:
    """The estimates alone (no resample) through the feature route: ``{"biased", "debiased"}``, (M, M) each.

    >>> y = [torch.randn(50, 3, dtype=torch.float64) for _ in range(2)]
    >>> gram = resampled_hsic(stack_sums(y, Units.blocks(50, 1), route="gram"), resample_weights(1, 0, 0))
    >>> bool(np.allclose(feature_hsic(y)["debiased"], gram["debiased"][0], rtol=1e-12))
    True
    """
    stack = as_stack(matrices)
    sums = stack_sums(stack, Units.blocks(stack.samples, 1), route="feature")
    return {key: value[0] for key, value in resampled_hsic(sums, resample_weights(1, 0, 0)).items()}
