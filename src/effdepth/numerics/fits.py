"""The fitted part of a view: per-layer means and principal directions (docs/method.md#views).

The ``center`` and ``top{k}pc`` views subtract a mean or remove directions
fitted on the view's own token set. A fit is its own phase, before the
states it applies to are measured: :class:`FitAccumulator` takes batches of
states (``update``), or other accumulators (``merge``), and :meth:`fit`
turns them into the mean and the leading eigenvectors of the covariance,
solved densely (``torch.linalg.eigh`` in float64).
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import EffdepthError
from .views import ViewSpec, check_width


class NonFiniteFit(EffdepthError):
    """The states a fit is fed are not finite in layer ``layer`` (the caller names the cause).

    >>> NonFiniteFit(2).layer
    2
    """

    def __init__(self, layer: int):
        self.layer = layer
        super().__init__(f"non-finite states in S_{layer}")

    def __reduce__(self):
        return (type(self), (self.layer,))


class FitAccumulator:
    """Streaming per-layer mean and scatter matrix of one token set.

    Memory is (L+1) x d x d when principal directions are needed
    (``scatter``), (L+1) x d otherwise. Each update is centred on its own
    mean before its scatter is formed, and updates are merged with Chan's
    parallel formula in float64, so a dominant mean (massive activations)
    cannot cancel digits away. ``precision`` is the dtype of each update's
    centred product: float64 for an exact fit, float32 for a calibration
    estimate (whose own sampling error is far above float32 rounding).
    Non-finite states raise :class:`NonFiniteFit` naming the layer.

    >>> acc = FitAccumulator()
    >>> acc.update(torch.tensor([[[1.0, 0.0], [3.0, 0.0]]]))
    >>> acc.fit(ViewSpec("center", center=True))["mean"].tolist()
    [[2.0, 0.0]]
    """

    def __init__(self, precision: torch.dtype = torch.float64, scatter: bool = True):
        self.precision = precision
        self.want_scatter = scatter
        self.count = 0
        self.mean = None
        self.scatter = None

    def update(self, states, transform=None) -> None:
        """Add states shaped ``(M, tokens, d)``, or a list of such parts joined along the tokens.

        ``transform`` maps a layer's float64 states ``(tokens, d)`` before
        they are added (e.g. token-norm). One layer at a time, so the float64
        copy and its product stay one layer's size.
        """
        parts = [states] if isinstance(states, torch.Tensor) else [p for p in states if p.shape[1]]
        n = sum(p.shape[1] for p in parts)
        if n == 0:
            return
        m, _, d = parts[0].shape
        if self.mean is None:
            self.mean = parts[0].new_zeros(m, d, dtype=torch.float64)
            if self.want_scatter:
                self.scatter = parts[0].new_zeros(m, d, d, dtype=torch.float64)
        total = self.count + n
        for layer in range(m):
            y = layer_states(parts, layer, transform)
            batch_mean = _finite_mean(y, layer)
            delta = batch_mean - self.mean[layer]
            if self.want_scatter:
                centred = (y - batch_mean).to(self.precision)
                self.scatter[layer] += (centred.T @ centred).to(torch.float64)
                self.scatter[layer].addr_(delta, delta, alpha=self.count * n / total)
            self.mean[layer] += delta * (n / total)
        self.count = total

    def merge(self, other: "FitAccumulator") -> None:
        """Add another accumulator of the same token set (Chan's formula across the two).

        >>> a, b, both = FitAccumulator(), FitAccumulator(), FitAccumulator()
        >>> x = torch.randn(2, 10, 3, dtype=torch.float64)
        >>> a.update(x[:, :4]); b.update(x[:, 4:]); both.update(x); a.merge(b)
        >>> bool(torch.allclose(a.scatter, both.scatter)), a.count
        (True, 10)
        """
        if other.count == 0:
            return
        if self.count == 0:
            self.count, self.mean = other.count, other.mean.clone()
            self.scatter = None if other.scatter is None else other.scatter.clone()
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        if self.scatter is not None:
            self.scatter += other.scatter + (self.count * other.count / total) * delta[:, :, None] * delta[:, None, :]
        self.mean += delta * (other.count / total)
        self.count = total

    def state_dict(self) -> tuple:
        """``(arrays, meta)``: the count, the mean and the scatter (when kept), float64.

        >>> acc = FitAccumulator(); acc.update(torch.randn(2, 5, 3)); again = FitAccumulator()
        >>> again.load_state_dict(*acc.state_dict()); bool(torch.equal(again.scatter, acc.scatter)), again.count
        (True, 5)
        """
        arrays = {} if self.mean is None else {"mean": self.mean.cpu().numpy()}
        if self.scatter is not None:
            arrays["scatter"] = self.scatter.cpu().numpy()
        return arrays, {"count": self.count, "precision": str(self.precision).removeprefix("torch."),
                        "scatter": self.want_scatter}

    def load_state_dict(self, arrays: dict, meta: dict) -> None:
        self.__init__(getattr(torch, meta["precision"]), meta["scatter"])
        self.count = int(meta["count"])
        if "mean" in arrays:
            self.mean = torch.from_numpy(np.array(arrays["mean"], dtype=np.float64))
        if "scatter" in arrays:
            self.scatter = torch.from_numpy(np.array(arrays["scatter"], dtype=np.float64))

    def fit(self, spec: ViewSpec) -> dict:
        """Mean and top-k principal directions per layer (or shared) for ``spec``.

        With principal directions, ``eigengap`` holds each layer's relative
        eigen-gap after the k-th component (one value when shared), see
        :func:`relative_eigengap`.
        """
        if self.count == 0:
            raise EffdepthError(
                f"view {spec.name!r} has no tokens to fit its mean / principal directions on; "
                "use more or longer sequences"
            )
        fit = {"mean": self.mean, "tokens": self.count}
        if spec.top_pcs:
            check_width([spec], self.scatter.shape[-1])
            cov = self.scatter / self.count
            if spec.shared_pcs:
                # Pool every layer's mean-centred states: the average covariance.
                cov = cov.mean(0, keepdim=True)
            fit["pcs"], values = top_eigenpairs(cov, spec.top_pcs)
            fit["eigengap"] = relative_eigengap(values, spec.top_pcs)
        return fit


def layer_states(parts: list, layer: int, transform=None) -> torch.Tensor:
    """One layer's states of every part joined along the tokens, in float64, then transformed."""
    y = torch.cat([p[layer] for p in parts]).to(torch.float64)
    return transform(y) if transform is not None else y


def _finite_mean(y: torch.Tensor, layer: int) -> torch.Tensor:
    """The mean state of one layer; :class:`NonFiniteFit` when a state is not finite (a NaN or
    inf anywhere makes the mean so, without a pass over the states)."""
    mean = y.mean(0)
    if not bool(torch.isfinite(mean).all()):
        raise NonFiniteFit(layer)
    return mean


def top_eigenpairs(cov: torch.Tensor, k: int) -> tuple:
    """Leading-k eigenvectors ``(B, d, k)`` and the leading min(k+1, d) eigenvalues of
    symmetric matrices ``(B, d, d)``, by a dense float64 ``eigh``; ``k`` must lie in 1..d.

    >>> c = torch.diag(torch.tensor([1.0, 5.0, 2.0], dtype=torch.float64))[None]
    >>> vectors, values = top_eigenpairs(c, 1)
    >>> vectors.flatten().abs().tolist(), values.tolist()
    ([0.0, 1.0, 0.0], [[5.0, 2.0]])
    """
    d = cov.shape[-1]
    if not 1 <= k <= d:
        raise ValueError(f"need 1 <= k <= d = {d} eigenvectors, got k = {k}")
    values, vectors = torch.linalg.eigh(cov.to(torch.float64))
    return vectors[..., -k:].flip(-1).to(cov.dtype), values[..., -min(k + 1, d):].flip(-1)


def relative_eigengap(values: torch.Tensor, k: int) -> list:
    """``(lambda_k - lambda_{k+1}) / lambda_k`` per matrix from its leading eigenvalues ``(B, >= k+1)``.

    Near 0, the k-th and (k+1)-th directions are interchangeable and the
    removed subspace is arbitrary; 0 when lambda_k is 0.

    >>> relative_eigengap(torch.tensor([[4.0, 2.0, 1.0]], dtype=torch.float64), 1)
    [0.5]
    """
    lam = values.to(torch.float64)
    top, nxt = lam[..., k - 1], lam[..., k]
    gap = torch.where(top > 0, (top - nxt) / torch.where(top > 0, top, torch.ones_like(top)), torch.zeros_like(top))
    return gap.clamp(0.0, 1.0).cpu().tolist()
