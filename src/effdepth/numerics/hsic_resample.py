"""The bootstrap over blocks of samples: units, resample weights, and both HSIC estimators under them.

Samples fall into *units*, contiguous blocks (each sample its own unit when N is at most the number
asked for). What both estimators need under any resample is small and resample-free
(:class:`StackSums`), with ``K_m = Yc_m Yc_m^T``:

- per pair (i, j): ``M_gh = sum_{a in g, b in h} K_i[a,b] K_j[a,b]`` (G x G)
  and ``diag_g = sum_{a in g} K_i[a,a] K_j[a,a]`` (G);
- per matrix: ``R_m[a, h] = sum_{b in h} K_m[a, b]`` (N x G) and ``K_m[a, a]``.

**Resamples.** A resample draws units with replacement: weights ``c`` (R x G, row 0 all ones = the
estimate). Every term of both estimators is a quadratic form in ``c`` of the sums above, so resamples
cost ``R G^2`` per pair, whatever N. A sample never pairs with its own copy: the debiased estimator
is the weighted U-statistic over *distinct* samples, the biased one a V-statistic whose tuples weigh
the counts of their distinct samples (:func:`_biased`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from effdepth.numerics.hsic_plan import ESTIMATORS, RESAMPLE_CHUNK

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
        return torch.repeat_interleave(
            torch.arange(self.count, device=device), torch.as_tensor(self.sizes, device=device)
        )

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
    route: str = "gram"

    @property
    def size(self) -> int:
        return int(self.rows.shape[0])


def resampled_hsic(sums: StackSums, weights, *, chunk: int = RESAMPLE_CHUNK) -> dict:
    """``{"biased": (R, M, M), "debiased": (R, M, M)}`` HSIC of every pair under every row of
    ``weights`` (R x G unit counts; all ones: the estimates), ``chunk`` rows at a time. The debiased
    value is NaN with fewer than :data:`MIN_SAMPLES` distinct weighted samples.
    """
    c_all = torch.as_tensor(np.asarray(weights), dtype=torch.float64, device=sums.rows.device)
    out = {key: np.empty((c_all.shape[0], sums.size, sums.size)) for key in ESTIMATORS}
    for start in range(0, c_all.shape[0], chunk):
        part = _resampled_chunk(sums, c_all[start : start + chunk])
        for key, values in out.items():
            values[start : start + chunk] = part[key].cpu().numpy()
        del part
    return out


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
        d = {k: (c**k) @ sums.pair_diag.T for k in (1, 2, 3, 4)}
        m, n = sums.diag.shape
        u = (c @ sums.rows.reshape(m * n, g).T).reshape(r, m, n)
        ii, jj = (torch.tensor(ix, device=c.device) for ix in zip(*sums.pairs))
        power = [(cn**k).sum(1) for k in (1, 2, 3, 4)]
        p1, p2, p3, p4 = power
        distinct = {
            1: p1,
            2: p1**2 - p2,
            3: p1**3 - 3 * p1 * p2 + 2 * p3,
            4: p1**4 - 6 * p1**2 * p2 + 3 * p2**2 + 8 * p1 * p3 - 6 * p4,
        }
        return cls(
            cn,
            sums.diag,
            forms[..., 0],
            forms[..., 1],
            t_qq,
            d,
            u - sums.diag[None] * cn[:, None],
            (u * cn[:, None]).sum(-1),
            torch.bmm(u * cn[:, None], u.transpose(1, 2))[:, ii, jj],
            distinct,
            ii,
            jj,
        )

    def pair(self, matrices: torch.Tensor) -> torch.Tensor:
        """(R, M, M) -> (R, P): the values of the pairs i <= j."""
        return matrices[:, self.ii, self.jj]

    def weighted_off(self, weights: torch.Tensor) -> torch.Tensor:
        """(R, P): ``sum_a weights_a u~_i,a u~_j,a``."""
        return self.pair(torch.bmm(self.u_off * weights[:, None], self.u_off.transpose(1, 2)))


def _biased(w: _WeightedSums) -> torch.Tensor:
    """(R, P) the biased HSIC under weights, with a passage's copies never paired with each other.

    The V-statistic ``T1/n^2 - 2 T2/n^3 + T3/n^4`` (``T1 = sum_ab K_ab L_ab``, ``T2 = sum_abc K_ab L_ac``,
    ``T3 = sum_abcd K_ab L_cd``) sums over tuples of passages. Plain resampling pairs a passage with its
    own copies, about doubling the self-pair bias and shifting intervals off the estimate (more so for
    large d against N). Here a tuple weighs the product of the counts of its *distinct* passages, and
    each ``n^k`` is the sum of those weights (the estimate itself when every count is 1). Each term is
    the plain weighted sum less its diagonal coincident-passage parts (``x = c^2 - c``).
    """
    d1, d2, d3, d4 = (w.d[k] for k in (1, 2, 3, 4))
    x = w.cn * w.cn - w.cn
    diag_x = w.diag[None] * x[:, None]  # (R, M, N)
    e = torch.bmm(diag_x, w.u_off.transpose(1, 2))  # sum_a x_a K_i[a,a] (K~_j c)_a
    cross = e[:, w.ii, w.jj] + e[:, w.jj, w.ii]
    t1 = w.t_cc - d2 + d1
    t2 = w.z - (cross + (w.t_cq - w.t_cc - d3 + d2) + (d3 - d1))
    s = w.s - diag_x.sum(-1)  # sum_ab K_ab with each passage paired with itself once per copy
    t3 = s[:, w.ii] * s[:, w.jj] - (
        (d2 - d1)
        + 2.0 * cross
        + 4.0 * (w.weighted_off(x) - (w.t_qq - w.t_cq - d4 + d3))
        + 2.0 * (w.t_qq - d4 - w.t_cc + d2)
    )
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
