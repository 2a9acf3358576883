"""How a stack's HSIC sums are computed within a memory budget: the route, the tiles, the passes.

Pure arithmetic on shapes (M matrices of N samples x d features, G units;
:mod:`~effdepth.numerics.sample_hsic` computes what it plans).

**Two routes to the same sums.** The *Gram route* forms ``K_m`` (N x N) in column tiles of whole
units, lower triangle of unit blocks only: 2 M N^2 d flops, then N^2 per pair, about half with narrow
tiles. The *feature route* forms, per pair and unit, ``C_g = Yc_i[g]^T Yc_j[g]`` (d x d): 2 N d^2 +
2 G^2 d^2 flops per pair. The Gram route shares its M Grams among the pairs, so it wins unless N is
large against d (about N > M d (1 + G^2 / N); Pythia-70M at N = 10,000 and G = 128: feature; every
wider model of Table 2: Gram).

**Memory.** ``budget_bytes`` bounds what a stack holds; centred layers stay resident when they fit in
half of what is left, else they are produced again per tile or block (more passes, the same numbers).

``units`` is a number of balanced blocks of consecutive samples or the
:class:`~effdepth.numerics.hsic_resample.Units` themselves (the token reduction's hold whole passages;
every unit is padded to the largest).
"""

from __future__ import annotations

import math

#: Bytes a stack may hold unless told otherwise (``--max-memory``'s default).
DEFAULT_BUDGET_BYTES = 4 << 30
#: Bytes of one float64 value.
F64 = 8
#: N x d float64 layers a stack may have in flight besides what it keeps, at worst the matched surrogate's:
#: its running sum, the previous and the current state, their difference and its permutation, and the
#: centred copy the sums are made of.
LAYERS_IN_FLIGHT = 6
#: (R, M, N) arrays the resampling holds at once per chunk of resamples.
RESAMPLE_ARRAYS = 6
#: (R, M, M) arrays the resampling holds at once per chunk of resamples, besides the estimators' output.
RESAMPLE_MATRICES = 6
#: The HSIC estimators a stack gives under every weight row, by key: (rows, M, M) each.
ESTIMATORS = ("biased", "debiased")
#: Resamples computed together at most.
RESAMPLE_CHUNK = 128


def unit_shape(samples: int, units) -> tuple:
    """``(count, largest)``: how many units and the samples of the largest, for a number of balanced
    blocks or for :class:`~effdepth.numerics.hsic_resample.Units`.

    >>> unit_shape(10, 4)
    (4, 3)
    """
    if hasattr(units, "sizes"):
        return int(units.count), int(units.sizes.max())
    return int(units), -(-int(samples) // int(units))  # sizes differ by at most one


def gram_fraction(units: int, tile_units: int) -> float:
    """The share of a Gram matrix's unit blocks the Gram route forms with tiles of ``tile_units``
    column units: a tile forms the rows of its own units and of the units after them (the rest is
    its transpose).

    >>> gram_fraction(128, 1), gram_fraction(128, 128), round(gram_fraction(128, 10), 3)
    (0.50390625, 1.0, 0.539)
    """
    g, w = int(units), int(tile_units)
    return sum((g - lo) * (min(g, lo + w) - lo) for lo in range(0, g, w)) / (g * g)


def route_flops(count: int, samples: int, width: int, units: int, tile_units: int = 1) -> dict:
    """Float64 flops of one stack's unit sums by route (the resamples cost the same on both); the Gram
    route's with tiles of ``tile_units`` units (:func:`gram_fraction`).

    >>> f = route_flops(7, 10_000, 512, 128, tile_units=41); f["feature"] < f["gram"]
    True
    >>> f = route_flops(65, 10_000, 5120, 128, tile_units=46); f["feature"] < f["gram"]
    False
    """
    m, n, d, (g, _) = count, samples, width, unit_shape(samples, units)
    pairs = m * (m + 1) // 2
    return {
        "gram": (2 * m * n * n * d + 2 * m * m * n * n) * gram_fraction(g, tile_units),
        "feature": 2 * pairs * n * d * d + 2 * pairs * g * g * d * d + 2 * m * n * d * g,
    }


def persisted_bytes(count: int, samples: int, units) -> int:
    """The unit sums a stack keeps: rows, pair blocks and diagonals (:class:`~effdepth.numerics.hsic_resample.StackSums`)."""
    (g, _), pairs = unit_shape(samples, units), count * (count + 1) // 2
    return F64 * (count * samples * g + pairs * g * g + pairs * g + count * samples)


def fixed_bytes(count: int, samples: int, width: int, units) -> int:
    """What a stack holds on either route besides its tiles or cross-products and resident layers."""
    return persisted_bytes(count, samples, units) + LAYERS_IN_FLIGHT * F64 * samples * width


def gram_tile_bytes(count: int, samples: int, units, tile_units: int) -> int:
    """A tile of ``tile_units`` column units of every Gram matrix as (unit, unit) blocks (unit-padded), and
    besides it either one layer's tile as it is formed or the blocks' products: every pair of matrices'
    inner product of every block, (blocks, M, M), and its pairs i <= j.

    >>> gram_tile_bytes(3, 8, 4, 1) == 8 * (3 * 4 * 2 * 2 + 4 * (3 * 3 + 6))
    True
    """
    g, size = unit_shape(samples, units)
    blocks = g * tile_units
    pairs = count * (count + 1) // 2
    return F64 * blocks * (count * size * size + max(size * size, count * count + pairs))


def feature_pair_bytes(samples: int, width: int, units) -> int:
    """One pair's cross-products of every unit (and their flattened copy) and the two padded layers."""
    g, size = unit_shape(samples, units)
    return F64 * (2 * g * width * width + 2 * g * size * width)


def output_bytes(count: int, rows: int) -> int:
    """Both estimators of every pair of a stack under ``rows`` weight rows (the estimate and its resamples)."""
    return len(ESTIMATORS) * F64 * int(rows) * count * count


def resample_row_bytes(count: int, samples: int, units) -> int:
    """What one resample of a chunk holds: its (M, N) arrays, the pair blocks' quadratic forms and the
    (M, M) sums both estimators are made of."""
    g, _ = unit_shape(samples, units)
    pairs = count * (count + 1) // 2
    return F64 * (RESAMPLE_ARRAYS * count * samples + 2 * pairs * g + RESAMPLE_MATRICES * count * count)


def resample_bytes(count: int, samples: int, units, chunk: int, rows: int = 1) -> int:
    """The resampling of a stack: its sums, ``chunk`` resamples at once, and both estimators under all ``rows``."""
    return (
        persisted_bytes(count, samples, units)
        + chunk * resample_row_bytes(count, samples, units)
        + output_bytes(count, rows)
    )


def least_stack_bytes(count: int, samples: int, width: int, units, route: str | None = None, rows: int = 1) -> int:
    """The least budget a stack can be computed in: one unit per Gram tile (or one resident layer on
    the feature route), one resample at a time (of ``rows`` weight rows in all).

    >>> round(least_stack_bytes(65, 10_000, 5120, 128) / 2**30, 2)  # Qwen3.5-27B's stack at N = 10,000
    3.57
    """
    route = route or "gram"
    g, size = unit_shape(samples, units)
    build = fixed_bytes(count, samples, width, units) + (
        gram_tile_bytes(count, samples, units, 1)
        if route == "gram"
        else feature_pair_bytes(samples, width, units) + F64 * size * g * width
    )
    return max(build, resample_bytes(count, samples, units, 1, rows))


def hsic_route(
    count: int, samples: int, width: int, units, budget_bytes: int = DEFAULT_BUDGET_BYTES, rows: int = 1
) -> str:
    """``"gram"`` or ``"feature"``: the route of fewer flops whose least working set fits the budget.

    >>> hsic_route(7, 10_000, 512, 128), hsic_route(65, 10_000, 5120, 128), hsic_route(3, 12, 64, 12)
    ('feature', 'gram', 'gram')
    """
    tile_units = stack_plan(count, samples, width, units, budget_bytes, "gram", rows)["tile_units"]
    flops = route_flops(count, samples, width, units, tile_units)
    fits = least_stack_bytes(count, samples, width, units, "feature", rows) <= budget_bytes
    return "feature" if fits and flops["feature"] < flops["gram"] else "gram"


def resample_chunk(count: int, samples: int, units, budget_bytes: int, rows: int = 1) -> int:
    """Resamples computed at once: as many as the budget holds besides the sums and the output, 1 to
    :data:`RESAMPLE_CHUNK`.

    >>> resample_chunk(65, 10_000, 128, 4 << 30, 1001), resample_chunk(65, 10_000, 128, 1 << 30, 1001)
    (91, 1)
    """
    free = budget_bytes - persisted_bytes(count, samples, units) - output_bytes(count, rows)
    return int(max(1, min(RESAMPLE_CHUNK, free // resample_row_bytes(count, samples, units))))


def stack_plan(
    count: int,
    samples: int,
    width: int,
    units,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    route: str | None = None,
    rows: int = 1,
) -> dict:
    """How a stack is computed within ``budget_bytes``, and what it holds at its peak: the route, whether
    its centred layers stay resident (Gram) or how many are held per block (feature), the units per
    Gram tile, the passes over the stack's layers, the resamples per chunk (of ``rows`` weight rows:
    the estimate and its resamples) and the peak in bytes.

    >>> p = stack_plan(65, 10_000, 5120, 128, 4 << 30); p["route"], p["resident"], p["passes"], p["peak_bytes"] <= 4 << 30
    ('gram', False, 64, True)
    >>> p = stack_plan(65, 10_000, 5120, 128, 64 << 30); p["resident"], p["passes"], p["tile_units"]
    (True, 1, 91)
    """
    route = route or hsic_route(count, samples, width, units, budget_bytes, rows)
    g, size = unit_shape(samples, units)
    fixed = fixed_bytes(count, samples, width, units)
    layer = F64 * samples * width
    plan = {"route": route, "resident": False, "held": 0, "tile_units": 0}
    if route == "gram":
        free = budget_bytes - fixed
        plan["resident"] = count * layer <= free // 2
        tile_budget = free - (count * layer if plan["resident"] else 0)
        plan["tile_units"] = int(max(1, min(g, tile_budget // gram_tile_bytes(count, samples, units, 1))))
        tiles = -(-g // plan["tile_units"])
        plan["passes"] = 1 if plan["resident"] else tiles
        build = fixed + gram_tile_bytes(count, samples, units, plan["tile_units"]) + count * layer * plan["resident"]
    else:
        padded = F64 * size * g * width
        free = budget_bytes - fixed - feature_pair_bytes(samples, width, units)
        plan["held"] = int(max(1, min(count, free // padded)))
        plan["passes"] = -(-count // plan["held"])
        build = fixed + feature_pair_bytes(samples, width, units) + plan["held"] * padded
    plan["chunk"] = resample_chunk(count, samples, units, budget_bytes, rows)
    plan["peak_bytes"] = int(max(build, resample_bytes(count, samples, units, plan["chunk"], rows)))
    return plan


#: The units :func:`byte_size` writes sizes in, largest first.
BYTE_UNITS = {
    "binary": (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)),
    "decimal": (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)),
}


def byte_size(n: int | None, units: str = "binary", *, round_up: bool = False) -> str:
    """Bytes in the largest unit that keeps a number of at least 1, one decimal: ``units`` "binary" (as
    --max-memory takes them), "decimal" (as the hub shows them) or one unit, always used; ``round_up``: a
    size of at least ``n`` (what a budget must be).

    >>> byte_size(1 << 30), byte_size(3 * 2**20 // 2), byte_size(1000), byte_size(0), byte_size(None)
    ('1.0 GiB', '1.5 MiB', '1000 B', '0 B', '?')
    >>> byte_size(4242547840, round_up=True), byte_size(1025, round_up=True), byte_size(3, round_up=True)
    ('4.0 GiB', '1.1 KiB', '3 B')
    >>> byte_size(166_000_000, "decimal"), byte_size(0, "GiB")
    ('166.0 MB', '0.0 GiB')
    """
    if n is None:
        return "?"
    scales = BYTE_UNITS.get(units) or [u for u in BYTE_UNITS["binary"] + BYTE_UNITS["decimal"] if u[0] == units]
    for unit, scale in scales:
        if n >= scale or units == unit:
            value = math.ceil(n / scale * 10) / 10 if round_up else n / scale
            return f"{value:.1f} {unit}"
    return f"{int(n)} B"
