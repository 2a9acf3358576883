"""The layer stacks passage mode's analysis reads (docs/method.md#passage-mode).

Each is a :class:`~effdepth.numerics.sample_hsic.LayerStack`: it produces its N x d float64 matrices
one at a time, the same ones on every pass, so a view's L+1 matrices are held together only when they
fit the memory budget (:class:`Kept`).
"""

from __future__ import annotations

import numpy as np
import torch

from effdepth.numerics.sample_hsic import LayerStack, centred


class PooledStates(LayerStack):
    """The pooled vectors ``(L+1, N, d)`` of one stored variant (an array or a memory map, any dtype).

    >>> s = PooledStates(np.ones((3, 4, 2), dtype=np.float32), "cpu")
    >>> s.count, s.samples, s.width, next(s.layers(2)).dtype
    (3, 4, 2, torch.float64)
    """

    def __init__(self, array, device):
        self.array = array
        self.count, self.samples, self.width = (int(x) for x in array.shape)
        self.device = torch.device(device)

    def layers(self, start: int = 0):
        for m in range(start, self.count):
            # a float64 copy: the stored vectors may be a read-only memory map
            yield torch.from_numpy(np.array(self.array[m], dtype=np.float64)).to(self.device)


class Kept(LayerStack):
    """A stack held in memory once a first pass has produced it whole (for a stack read many times).

    >>> base = PooledStates(np.zeros((2, 3, 1)), "cpu"); k = Kept(base)
    >>> _ = list(k.layers()); base.array = None; len(list(k.layers(1)))
    1
    """

    def __init__(self, base: LayerStack):
        self.base, self.kept = base, None
        self.count, self.samples, self.width, self.device = base.count, base.samples, base.width, base.device

    def layers(self, start: int = 0):
        if self.kept is not None:
            yield from self.kept[start:]
            return
        if start:
            yield from self.base.layers(start)
            return
        kept = []
        for y in self.base.layers():
            kept.append(y)
            yield y
        self.kept = kept


class TopRemoved(LayerStack):
    """Each layer ``P`` as ``P (I - V V^T)``, V its top-k principal directions (of the column-centred
    matrix), fitted in one pass over ``base``; ``fit`` holds k and each layer's relative eigen-gap
    after the k-th eigenvalue.

    >>> y = torch.tensor([[3.0, 0.0], [-3.0, 0.0], [0.0, 1.0], [0.0, -1.0]], dtype=torch.float64)
    >>> from effdepth.numerics.sample_hsic import TensorStack
    >>> t = TopRemoved(TensorStack([y]), 1)
    >>> next(t.layers())[:, 0].abs().max().item(), t.fit["eigengap"]
    (0.0, [0.888889])
    """

    def __init__(self, base: LayerStack, k: int, lengths=None):
        self.base, self.k = base, int(k)
        self.count, self.samples, self.width, self.device = base.count, base.samples, base.width, base.device
        self.directions, gaps = [], []
        for y in base.layers():
            v, values = top_directions(centred(y), self.k)
            self.directions.append(v)
            top, nxt = float(values[self.k - 1]), float(values[self.k]) if len(values) > self.k else 0.0
            gaps.append(round((top - nxt) / top, 6) if top > 0 else 0.0)
        self.fit = {
            "k": self.k,
            "eigengap": gaps,
            "how": "exact: eigendecomposition of the smaller of Yc^T Yc and Yc Yc^T",
        }

    def layers(self, start: int = 0):
        for m, y in enumerate(self.base.layers(start), start=start):
            v = self.directions[m]
            out = torch.addmm(y, y @ v, v.T, alpha=-1.0)  # y - (y V) V^T without an N x d product in between
            del y
            yield out


#: The functions of a passage's token count n that the ``length`` view regresses out, beside the mean: 1/n
#: is how the first position's state enters a mean over n tokens; log n takes a slow drift of the other
#: positions' states with position (docs/method.md#the-first-token-x-length-confound).
LENGTH_BASIS = ("1/n", "log n")


def length_basis(lengths) -> np.ndarray:
    """``(N, r)`` orthonormal columns spanning the centred :data:`LENGTH_BASIS` of the passages' token counts
    (r = 0 when every passage has the same length, 1 when there are two lengths).

    >>> length_basis([5, 5, 5]).shape, length_basis([4, 8, 4, 8]).shape, length_basis([4, 8, 16, 32]).shape
    ((3, 0), (4, 1), (4, 2))
    >>> bool(np.allclose(length_basis([4, 8, 16, 32]).sum(0), 0))
    True
    """
    n = np.asarray(lengths, dtype=np.float64)
    if n.ndim != 1 or not len(n) or (n < 1).any():
        raise ValueError("the length view needs each passage's token count, all >= 1")
    x = np.stack([1.0 / n, np.log(n)], axis=1)
    x = x - x.mean(0)
    scale = np.linalg.norm(x, axis=0)
    x = x[:, scale > 1e-12 * np.abs(np.stack([1.0 / n, np.log(n)], axis=1)).max(0).clip(min=1e-300)]
    if not x.shape[1]:
        return np.zeros((len(n), 0))
    u, singular, _ = np.linalg.svd(x / np.linalg.norm(x, axis=0), full_matrices=False)
    return u[:, singular > 1e-8 * singular[0]]


class LengthRegressed(LayerStack):
    """Each layer ``P`` as ``P - Q Q^T P``, Q the orthonormal basis of the centred :data:`LENGTH_BASIS` of
    the passages' token counts (:func:`length_basis`): the least-squares residual of every pooled
    vector on 1, 1/n and log n, with the column mean kept. The same basis for every layer; fitted once
    on all N passages (docs/method.md says why refitting it in each resample changes nothing that shows).
    When every passage has the same length there is nothing to regress: the stack is ``base`` itself.

    >>> from effdepth.numerics.sample_hsic import TensorStack
    >>> n = np.array([4, 8, 16, 32, 64])
    >>> y = torch.from_numpy(np.stack([1.0 / n, np.ones(5)], axis=1))   # one column is 1/n, the other constant
    >>> out = next(LengthRegressed(TensorStack([y]), None, n).layers())
    >>> bool(torch.allclose(out[:, 0], y[:, 0].mean())), bool(torch.allclose(out[:, 1], y[:, 1]))   # only the mean is left
    (True, True)
    """

    def __init__(self, base: LayerStack, k=None, lengths=None):
        if lengths is None:
            raise ValueError("the length view needs each passage's token count")
        if len(lengths) != base.samples:
            raise ValueError(f"{len(lengths)} passage lengths for {base.samples} pooled vectors")
        self.base = base
        self.count, self.samples, self.width, self.device = base.count, base.samples, base.width, base.device
        basis = length_basis(lengths)
        self.basis = torch.from_numpy(basis).to(self.device)
        distinct = len(np.unique(np.asarray(lengths)))
        self.fit = {
            "basis": ["1", *LENGTH_BASIS],
            "rank": int(basis.shape[1]),
            "distinct_lengths": distinct,
            "how": "least squares on all N passages, the same basis for every layer; the mean kept",
            "identity": not basis.shape[1],
        }

    def layers(self, start: int = 0):
        if not self.basis.shape[1]:
            yield from self.base.layers(start)
            return
        q = self.basis
        for y in self.base.layers(start):
            yield torch.addmm(y, q, q.T @ y, alpha=-1.0)


def top_directions(yc: torch.Tensor, k: int) -> tuple:
    """The top-k right singular vectors ``(d, k)`` of a centred matrix, and its top k+1 squared singular values.

    >>> v, values = top_directions(torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 1.0], [0.0, -1.0]], dtype=torch.float64), 1)
    >>> v[:, 0].abs().tolist(), values.tolist()
    ([1.0, 0.0], [8.0, 2.0])
    """
    n, d = yc.shape
    if d <= n:
        values, vectors = torch.linalg.eigh(yc.T @ yc)
        order = torch.argsort(values, descending=True)
        return vectors[:, order[:k]], values[order[: k + 1]].clamp_min(0.0)
    values, left = torch.linalg.eigh(yc @ yc.T)
    order = torch.argsort(values, descending=True)
    top = values[order[:k]].clamp_min(1e-300)
    v = yc.T @ left[:, order[:k]] / torch.sqrt(top)
    return v, values[order[: k + 1]].clamp_min(0.0)


class Updates(LayerStack):
    """The updates ``S_l - S_{l-1}`` (l = 1..M-1) of a stack, each an explicit difference.

    >>> from effdepth.numerics.sample_hsic import TensorStack
    >>> [float(u.sum()) for u in Updates(TensorStack([torch.zeros(2, 1), torch.ones(2, 1), 3 * torch.ones(2, 1)])).layers()]
    [2.0, 4.0]
    """

    def __init__(self, base: LayerStack):
        self.base = base
        self.count, self.samples, self.width, self.device = base.count - 1, base.samples, base.width, base.device

    def layers(self, start: int = 0):
        previous = None
        for y in self.base.layers(start):
            if previous is not None:
                yield y - previous
            previous = y


class MatchedSurrogate(LayerStack):
    """S_0 plus the measured updates with their passages permuted independently per layer: the measured
    covariances exactly, zero cross-covariance between layers. The permutations are drawn once, so every
    pass produces the same surrogate.

    >>> from effdepth.numerics.sample_hsic import TensorStack
    >>> s = MatchedSurrogate(TensorStack([torch.zeros(4, 2, dtype=torch.float64), torch.ones(4, 2, dtype=torch.float64)]), 0)
    >>> [t.sum().item() for t in s.layers()]
    [0.0, 8.0]
    """

    def __init__(self, base: LayerStack, seed: int):
        self.base = base
        self.count, self.samples, self.width, self.device = base.count, base.samples, base.width, base.device
        generator = torch.Generator(device="cpu").manual_seed(int(seed) * 1_000_003 + 29)
        self.orders = [torch.randperm(self.samples, generator=generator).to(self.device) for _ in range(self.count - 1)]

    def layers(self, start: int = 0):
        running = previous = None
        for m, y in enumerate(self.base.layers()):
            running = y if m == 0 else running + (y - previous)[self.orders[m - 1]]
            previous = y
            if m >= start:
                yield running


class IsotropicSurrogate(LayerStack):
    """``count`` cumulative sums of isotropic Gaussian updates (samples x width): F_N's process at this size.

    >>> s = IsotropicSurrogate(5, 3, 2, seed=0, device="cpu")
    >>> [tuple(t.shape) for t in s.layers()], bool(torch.equal(next(s.layers(1)), list(s.layers())[1]))
    ([(5, 3), (5, 3)], True)
    """

    def __init__(self, samples: int, width: int, count: int, seed: int, device):
        self.count, self.samples, self.width = int(count), int(samples), int(width)
        self.device = torch.device(device)
        self.seed = int(seed) * 1_000_003 + 17

    def layers(self, start: int = 0):
        generator = torch.Generator(device="cpu").manual_seed(self.seed)  # the same draws on every pass
        running = torch.zeros(self.samples, self.width, dtype=torch.float64)
        for m in range(self.count):
            running = running + torch.randn(self.samples, self.width, generator=generator, dtype=torch.float64)
            if m >= start:
                yield running.to(self.device)
