"""HSIC between layers across samples (passages), with every bootstrap resample (docs/method.md#passage-mode).

A *stack* is M matrices ``Y_1..Y_M`` (N samples x d features each: one
pooled vector per passage and layer). For every pair of matrices this module
gives the two HSIC estimators of linear kernels:

- ``biased``: ``|Yc_i^T Yc_j|_F^2 / n^2`` with ``Yc`` column-centred (the
  V-statistic; the paper's CKA is built from it);
- ``debiased``: the unbiased estimator of Song et al. (2012),
  ``S2/(n)_2 - 2 S3/(n)_3 + S4/(n)_4`` over distinct samples.

**The Gram route.** ``K_m = Yc_m Yc_m^T`` (N x N) is formed in column tiles
that fit a memory budget, and reduced at once to sums over *units*:
contiguous blocks of samples, the bootstrap's resampling units (each sample
its own unit when N is at most the number of units asked for). What is kept
(:class:`StackSums`) is small and independent of the resamples:

- per pair (i, j): ``M_gh = sum_{a in g, b in h} K_i[a,b] K_j[a,b]`` (G x G)
  and ``diag_g = sum_{a in g} K_i[a,a] K_j[a,a]`` (G);
- per matrix: ``R_m[a, h] = sum_{b in h} K_m[a, b]`` (N x G) and ``K_m[a, a]``.

**Resamples.** A resample draws units with replacement: weights ``c`` (R x G,
row 0 all ones = the estimate itself). Every term of both estimators under
weights is a quadratic form in ``c`` of the sums above (``c^T M c``,
``sum_a c_a (R_i c)_a (R_j c)_a``, ...), so 1,000 resamples cost
``R G^2`` per pair, whatever N. The biased estimator under weights is
exactly the V-statistic of the resampled data (duplicates included); the
debiased one is the weighted U-statistic over pairs of *distinct* original
samples (a sample never pairs with its own copy), which is the unbiased
estimator when every weight is 1.

Everything is float64 unless ``dtype`` says otherwise for the Gram tiles
(products of *centred* data; a test bounds the float32 error).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

#: Bytes of Gram tiles a stack may hold at once unless told otherwise.
DEFAULT_BUDGET_BYTES = 1 << 30
#: The debiased estimator needs four distinct samples.
MIN_SAMPLES = 4


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


@dataclass
class StackSums:
    """Unit-level sums of one stack's Gram matrices (see the module docstring); resample-free."""

    pair_blocks: torch.Tensor  # (P, G, G)
    pair_diag: torch.Tensor  # (P, G)
    rows: torch.Tensor  # (M, N, G)
    diag: torch.Tensor  # (M, N)
    pairs: list  # (i, j), i <= j
    units: Units

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


def stack_sums(matrices, units: Units, *, budget_bytes: int = DEFAULT_BUDGET_BYTES, dtype=torch.float64) -> StackSums:
    """The unit-level Gram sums of ``matrices`` (each N x d, any dtype; centred here in float64).

    Every unit is padded with zero samples to the size of the largest, so unit
    sums are reshapes (a zero sample adds nothing to any sum). Column tiles of
    whole units are sized so the products of one matrix with the rest of the
    stack (M x N x width) stay within ``budget_bytes``; at least one unit per tile.
    """
    ys = [centred(m) for m in matrices]
    count, n = len(ys), int(ys[0].shape[0])
    if any(int(y.shape[0]) != n for y in ys):
        raise ValueError("every matrix of a stack needs the same samples")
    if units.samples != n:
        raise ValueError(f"units cover {units.samples} samples, the matrices {n}")
    device = ys[0].device
    g, size = units.count, int(units.sizes.max())
    slots = units.index(device) * size + _offsets_in_units(units, device)  # each sample's padded position
    padded = torch.zeros(count, g * size, ys[0].shape[1], dtype=dtype, device=device)
    padded[:, slots] = torch.stack(ys).to(dtype)
    pairs = [(i, j) for i in range(count) for j in range(i, count)]
    ii, jj = (torch.tensor(ix, device=device) for ix in zip(*pairs))
    pair_blocks = torch.zeros(len(pairs), g, g, dtype=torch.float64, device=device)
    rows = torch.zeros(count, g * size, g, dtype=torch.float64, device=device)
    per_unit = max(1, int(budget_bytes) // max(1, 3 * count * g * size * size * 8))  # a tile, its reordered copy
    for lo in range(0, g, per_unit):
        hi = min(g, lo + per_unit)
        tiles = torch.bmm(padded, padded[:, lo * size:hi * size].transpose(1, 2)).to(torch.float64)  # (M, gN, width)
        rows[:, :, lo:hi] = tiles.reshape(count, g * size, hi - lo, size).sum(-1)
        # sum_{a in g, b in h} K_i[a,b] K_j[a,b] for every (g, h) and every (i, j): one batched product
        # of the stack's (g, h) blocks with themselves.
        blocks = tiles.reshape(count, g, size, hi - lo, size).permute(1, 3, 0, 2, 4).reshape(g * (hi - lo), count, size * size)
        inner = torch.bmm(blocks, blocks.transpose(1, 2)).reshape(g, hi - lo, count, count)
        pair_blocks[:, :, lo:hi] = inner[:, :, ii, jj].permute(2, 0, 1)
        del tiles, blocks, inner
    diag = torch.stack([(y * y).sum(dim=1) for y in ys])
    index = units.index(device)
    pair_diag = torch.zeros(len(pairs), g, dtype=torch.float64, device=device).index_add_(1, index, diag[ii] * diag[jj])
    return StackSums(pair_blocks, pair_diag, rows[:, slots], diag, pairs, units)


def _offsets_in_units(units: Units, device) -> torch.Tensor:
    """Each sample's position within its unit."""
    starts = torch.as_tensor(units.bounds[:-1], device=device)
    return torch.arange(units.samples, device=device) - torch.repeat_interleave(starts, torch.as_tensor(units.sizes, device=device))


def resampled_hsic(sums: StackSums, weights, *, chunk: int = 128) -> dict:
    """``{"biased": (R, M, M), "debiased": (R, M, M)}`` HSIC of every pair under every row of
    ``weights`` (R x G unit counts; row 0 all ones gives the estimates themselves).

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
    q = c * c
    cn = c[:, sums.units.index(c.device)]  # (R, N): each sample's weight
    r, (p, g) = c.shape[0], sums.pair_blocks.shape[:2]
    # Quadratic forms of the pair blocks: one product of every block with both weight vectors.
    y = (torch.cat([c, q]) @ sums.pair_blocks.reshape(p * g, g).T).reshape(2 * r, p, g)
    forms = torch.bmm(y[:r], torch.stack([c, q], dim=-1))  # (R, P, 2): c^T M c, c^T M q
    t_cc, t_cq = forms[..., 0], forms[..., 1]
    t_qq = torch.bmm(y[r:], q[..., None])[..., 0]
    d2, d3, d4 = q @ sums.pair_diag.T, (q * c) @ sums.pair_diag.T, (q * q) @ sums.pair_diag.T  # (R, P)
    # Row sums under the weights: u = K c, and u~ = K~ c (the diagonal left out).
    m, n = sums.diag.shape
    u = (c @ sums.rows.reshape(m * n, g).T).reshape(r, m, n)  # (R, M, N)
    u_off = u - sums.diag[None] * cn[:, None]
    s = (u * cn[:, None]).sum(-1)  # (R, M): c^T K c
    s_off = s - (cn * cn) @ sums.diag.T
    z = torch.bmm(u * cn[:, None], u.transpose(1, 2))  # (R, M, M): sum_a c_a u_i,a u_j,a
    z_off = torch.bmm(u_off * cn[:, None], u_off.transpose(1, 2))
    z_off_q = torch.bmm(u_off * (cn * cn)[:, None], u_off.transpose(1, 2))
    ii, jj = (torch.tensor(ix, device=c.device) for ix in zip(*sums.pairs))
    total = cn.sum(1)[:, None]  # (R, 1): samples in the resample
    biased = (t_cc - 2.0 * z[:, ii, jj] / total + s[:, ii] * s[:, jj] / (total * total)) / (total * total)
    p1, p2, p3, p4 = total[:, 0], (cn ** 2).sum(1), (cn ** 3).sum(1), (cn ** 4).sum(1)
    w2 = p1 ** 2 - p2
    w3 = p1 ** 3 - 3 * p1 * p2 + 2 * p3
    w4 = p1 ** 4 - 6 * p1 ** 2 * p2 + 3 * p2 ** 2 + 8 * p1 * p3 - 6 * p4
    s2 = t_cc - d2
    s2_q = t_qq - d4
    s2_c = t_cq - d3
    s3 = z_off[:, ii, jj] - s2_c
    s3_q = z_off_q[:, ii, jj] - s2_q
    s4 = s_off[:, ii] * s_off[:, jj] - 4.0 * s3_q - 2.0 * s2_q
    distinct = (cn > 0).sum(1) >= MIN_SAMPLES
    debiased = s2 / w2[:, None] - 2.0 * s3 / w3[:, None] + s4 / w4[:, None]
    debiased = torch.where(distinct[:, None], debiased, torch.nan)
    return {"biased": _symmetric(biased, sums), "debiased": _symmetric(debiased, sums)}


def _symmetric(values: torch.Tensor, sums: StackSums) -> torch.Tensor:
    """(R, P) values of the pairs i <= j -> (R, M, M) symmetric matrices."""
    m = sums.size
    out = torch.empty(values.shape[0], m, m, dtype=values.dtype, device=values.device)
    ii, jj = (torch.tensor(ix, device=values.device) for ix in zip(*sums.pairs))
    out[:, ii, jj] = values
    out[:, jj, ii] = values
    return out


def feature_hsic(matrices) -> dict:
    """The estimates alone (no resample) through the feature route, ``Yc_i^T Yc_j`` (d x d):
    cheaper than the Gram route when N exceeds about M d / 2. ``{"biased", "debiased"}``, (M, M) each.

    With centred data ``K 1 = 0``, so the row sums without the diagonal are
    ``-K[a, a]`` and ``1^T K~ 1 = -trace K``: every term of the unbiased
    estimator follows from ``|Yc_i^T Yc_j|_F^2`` and the per-sample norms.

    >>> y = [torch.randn(50, 3, dtype=torch.float64) for _ in range(2)]
    >>> gram = resampled_hsic(stack_sums(y, Units.blocks(50, 1)), resample_weights(1, 0, 0))
    >>> bool(np.allclose(feature_hsic(y)["debiased"], gram["debiased"][0]))
    True
    """
    ys = [centred(m) for m in matrices]
    n = float(ys[0].shape[0])
    count = len(ys)
    norms = torch.stack([(y * y).sum(1) for y in ys])  # (M, N): K_m[a, a]
    traces = norms.sum(1)
    frob = torch.empty(count, count, dtype=torch.float64, device=ys[0].device)
    for i in range(count):
        for j in range(i, count):
            frob[i, j] = frob[j, i] = ((ys[i].T @ ys[j]) ** 2).sum()
    dd = norms @ norms.T  # sum_a K_i[a,a] K_j[a,a]
    s2 = frob - dd
    s3 = dd - s2
    s4 = traces[:, None] * traces[None, :] - 4.0 * s3 - 2.0 * s2
    debiased = s2 / (n * (n - 1)) - 2.0 * s3 / (n * (n - 1) * (n - 2)) + s4 / (n * (n - 1) * (n - 2) * (n - 3))
    return {"biased": (frob / n ** 2).cpu().numpy(), "debiased": debiased.cpu().numpy()}
