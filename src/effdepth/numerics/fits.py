"""The fitted part of a view: per-layer means and principal directions (docs/method.md#views).

The ``center`` and ``top{k}pc`` views subtract a mean or remove directions
fitted on the view's own token set. A fit is its own phase, before the
states it applies to are measured: :class:`FitAccumulator` takes batches of
states (``update``), or other accumulators (``merge``), and ``compute``
turns them into each of its views' fits: the mean, and what the view's
fitted components make of the covariance (:mod:`~effdepth.numerics.view_components`:
the leading eigenvectors, solved densely by ``torch.linalg.eigh`` in
float64). :class:`ViewFits` is the fit phase of a run's view streams: one
estimate per token set, then each stream's fit, or the reason it has none.

Which sequences a fit is estimated on: every one (``exact``), or the
calibration set (``calibration``: the first sequences, at least
:data:`CALIBRATION_SEQUENCES` of them and :data:`CALIBRATION_TOKENS` tokens,
:func:`calibration_prefix`); :func:`fit_description` says which in the result.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from ..errors import EffdepthError
from .sequences import raise_nonfinite, real_sequences

PC_ESTIMATES = ("calibration", "exact")
#: The calibration set: the fewest first sequences holding at least this many (non-empty)
#: sequences and real tokens (all sequences when the run is smaller).
CALIBRATION_SEQUENCES = 8
CALIBRATION_TOKENS = 2048
#: Below this relative eigen-gap after the k-th component, the removed directions are arbitrary.
EIGENGAP_WARNING = 1e-3


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
    ``views`` are the views fitted on this token set, whose fits
    :meth:`compute` gives (:meth:`fit` gives any one view's).

    >>> from effdepth.numerics.views import parse_view
    >>> acc = FitAccumulator(views=[parse_view("center")])
    >>> acc.update(torch.tensor([[[1.0, 0.0], [3.0, 0.0]]]))
    >>> acc.compute()["center"]["mean"].tolist()
    [[2.0, 0.0]]
    """

    def __init__(self, precision: torch.dtype = torch.float64, scatter: bool = True, views=()):
        self.precision = precision
        self.want_scatter = scatter
        self.views = tuple(views)
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
        return arrays, {
            "count": self.count,
            "precision": str(self.precision).removeprefix("torch."),
            "scatter": self.want_scatter,
        }

    def load_state_dict(self, arrays: dict, meta: dict) -> None:
        self.__init__(getattr(torch, meta["precision"]), meta["scatter"], self.views)
        self.count = int(meta["count"])
        if "mean" in arrays:
            self.mean = torch.from_numpy(np.array(arrays["mean"], dtype=np.float64))
        if "scatter" in arrays:
            self.scatter = torch.from_numpy(np.array(arrays["scatter"], dtype=np.float64))

    def fit(self, spec) -> dict:
        """The fit of one view (a :class:`~effdepth.numerics.views.ViewSpec`): the mean per layer, the
        tokens it was fitted on, and what each fitted component of the view makes of the covariance
        (e.g. ``pcs`` and ``eigengap``, each layer's relative eigen-gap after the k-th component, one
        value when shared: :func:`relative_eigengap`).
        """
        if self.count == 0:
            raise EffdepthError(
                f"view {spec.name!r} has no tokens to fit its mean / principal directions on; "
                "use more or longer sequences"
            )
        fit = {"mean": self.mean.clone(), "tokens": self.count}  # a copy: later updates change the mean in place
        for step in spec.steps:
            if step.component.fit:
                spec.check_width(self.scatter.shape[-1])
                fit.update(step.component.fit(self.scatter / self.count, step.k))
        return fit

    def compute(self) -> dict:
        """Each view's fit (:meth:`fit`), by its canonical name."""
        return {spec.canonical: self.fit(spec) for spec in self.views}


class ViewFits:
    """The fit phase of a run's view streams (``streams``: each stream's key -> its view spec).

    Batches go to one :class:`FitAccumulator` per token set (:meth:`update`),
    which :meth:`finalize` turns into ``fits`` (stream key -> ``{"mean",
    "pcs", "tokens"}``) and ``info`` (how and on what they were estimated, the
    eigen-gaps, the warnings); a stream whose token set had no token to fit on
    is in ``unfitted``, with the reason its view is unavailable.

    >>> from effdepth.numerics.views import parse_view
    >>> fits = ViewFits({"c": parse_view("center")})
    >>> fits.update(torch.tensor([[[[1.0, 0.0], [3.0, 0.0]]]]))
    >>> fits.finalize("on one batch", sequences=1, tokens=2)
    []
    >>> fits.fits["c"]["mean"].tolist(), fits.done
    ([[2.0, 0.0]], True)
    """

    def __init__(self, streams: dict, pc_estimate: str = "calibration"):
        self.specs = {key: spec for key, spec in streams.items() if spec.needs_fit}
        self.pc_estimate = pc_estimate
        self.fits: dict = {}
        self.info: dict | None = None
        self.unfitted: dict = {}
        self._accumulators: dict = {}
        self._dtype = torch.float32  # of the states the fit was fed (for its error message)

    @property
    def done(self) -> bool:
        """Whether every stream that needs a fit has one (or the reason it has none)."""
        return not self.specs or self.info is not None

    def update(self, states: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Feed one batch ``(L+1, batch, seq, d)`` to the per-layer mean / covariance estimates."""
        # One estimate per token set: views that share it (e.g. center and
        # top1pc) must not feed the same tokens twice.
        token_sets = {spec.fit_key: spec for spec in self.specs.values()}
        for key in token_sets:
            if key not in self._accumulators:
                same = [v for v in self.specs.values() if v.fit_key == key]
                calibration = self.pc_estimate == "calibration"
                self._accumulators[key] = FitAccumulator(
                    precision=torch.float32 if calibration else torch.float64,
                    scatter=any(v.needs_covariance for v in same),
                    views=same,
                )
        pending: dict = {key: [] for key in token_sets}
        for seq in real_sequences(states, mask):
            for key, spec in token_sets.items():
                pending[key].append(spec.select(seq))
        # One update per batch: a single large matrix product per layer.
        self._dtype = states.dtype
        for key, parts in pending.items():
            with nonfinite_fit(states.dtype):
                self._accumulators[key].update(parts, token_sets[key].before_fit)

    def finalize(self, how: str, *, sequences: int | None = None, tokens: int | None = None) -> list:
        """Turn the estimates into fits, ``how`` and the fitted set's size recorded in ``info``;
        returns the eigen-gap warnings (:func:`eigengap_notes`), recorded too."""
        fitted_tokens, gaps, notes, unfitted = {}, {}, [], {}
        fits: dict = {}
        computed: dict = {}
        for acc in self._accumulators.values():
            if acc.count:
                with nonfinite_fit(self._dtype):
                    computed.update(acc.compute())
        for key, spec in self.specs.items():
            acc = self._accumulators.get(spec.fit_key)
            fitted_tokens[spec.canonical] = 0 if acc is None else int(acc.count)
            if spec.canonical not in computed:
                unfitted[key] = (
                    "no token of this view in the fitted sequences to fit its mean / principal directions on"
                )
                continue
            fits[key] = computed[spec.canonical]
            if "eigengap" in fits[key]:
                gaps[spec.canonical] = fits[key].pop("eigengap")
                notes += eigengap_notes(spec, gaps[spec.canonical])
        self.fits, self.unfitted = fits, unfitted
        self.info = {
            "estimate": self.pc_estimate,
            "how": how,
            "calibration": {"sequences": sequences, "tokens": tokens},
            "tokens": fitted_tokens,
            "eigengap": gaps,
            "warnings": notes,
            "unavailable": {self.specs[k].canonical: r for k, r in unfitted.items()},
        }
        self._accumulators.clear()
        return notes

    def state_dict(self) -> tuple:
        """``(arrays, meta)``: each fit's mean and principal directions, keyed ``fit|<stream>|...``,
        and ``info`` with the tokens each was fitted on."""
        arrays = {}
        for key, fit in self.fits.items():
            name = self.specs[key].canonical
            arrays[f"fit|{name}|mean"] = fit["mean"].cpu().numpy()
            if "pcs" in fit:
                arrays[f"fit|{name}|pcs"] = fit["pcs"].cpu().numpy()
        meta = {
            "fit_info": self.info,
            "fit_tokens": {self.specs[k].canonical: int(f["tokens"]) for k, f in self.fits.items()},
        }
        return arrays, meta

    def load_state_dict(self, arrays: dict, meta: dict) -> None:
        """Continue from :meth:`state_dict` (the arrays may hold other statistics' keys too)."""
        by_name = {spec.canonical: key for key, spec in self.specs.items()}
        self.fits = {}
        for name, key in by_name.items():
            if f"fit|{name}|mean" in arrays:
                fit = {"mean": torch.from_numpy(arrays[f"fit|{name}|mean"]), "tokens": meta["fit_tokens"][name]}
                if f"fit|{name}|pcs" in arrays:
                    fit["pcs"] = torch.from_numpy(arrays[f"fit|{name}|pcs"])
                self.fits[key] = fit
        self.info = meta["fit_info"]
        unavailable = (self.info or {}).get("unavailable") or {}
        self.unfitted = {by_name[name]: reason for name, reason in unavailable.items() if name in by_name}


@contextlib.contextmanager
def nonfinite_fit(dtype: torch.dtype):
    """A fit fed non-finite states fails with the same one-line error as a measurement."""
    try:
        yield
    except NonFiniteFit as error:
        raise_nonfinite(error.layer, dtype)


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


def remove_directions(states: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """``states - (states V) V^T``: ``states`` ``(..., T, d)`` without the span of the orthonormal
    ``directions`` ``(..., d, k)``.

    >>> remove_directions(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0], [0.0]])).tolist()
    [[0.0, 2.0], [0.0, 4.0]]
    """
    return states - (states @ directions) @ directions.transpose(-1, -2)


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
    return vectors[..., -k:].flip(-1).to(cov.dtype), values[..., -min(k + 1, d) :].flip(-1)


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


# -- the calibration set, and how a fit was estimated ----------------------------------


def calibration_complete(sequences: int, tokens: int) -> bool:
    """Whether a calibration set of this many (non-empty) sequences and real tokens is complete.

    >>> calibration_complete(8, 2048), calibration_complete(16, 512)
    (True, False)
    """
    return sequences >= CALIBRATION_SEQUENCES and tokens >= CALIBRATION_TOKENS


def calibration_prefix(lengths) -> int:
    """How many of the first sequences the calibration set takes, given each sequence's real-token
    count: the fewest for which :func:`calibration_complete` holds, else all. It depends on the
    corpus alone (not the batch size), and every process of a distributed run fits on it.

    >>> calibration_prefix([256] * 32), calibration_prefix([100] * 32), calibration_prefix([16] * 7)
    (8, 21, 7)
    """
    sequences = tokens = 0
    for i, n in enumerate(int(n) for n in lengths):
        if n > 0:
            sequences, tokens = sequences + 1, tokens + n
        if calibration_complete(sequences, tokens):
            return i + 1
    return len(lengths)


def fit_description(estimate: str, *, sequences: int, tokens: int, whole_run: bool = True) -> str:
    """How a fit was estimated, in words, for the result (``fit_info["how"]``): ``whole_run`` says
    whether the fitted sequences were all the run had, when they are fewer than a calibration set.

    >>> fit_description("calibration", sequences=8, tokens=2048)
    'calibration on the first 8 sequences (2048 tokens)'
    >>> fit_description("exact", sequences=3, tokens=30)
    'exact, over every sequence (3 sequences, 30 tokens)'
    """
    if estimate == "exact":
        return f"exact, over every sequence ({sequences} sequences, {tokens} tokens)"
    if calibration_complete(sequences, tokens):
        return f"calibration on the first {sequences} sequences ({tokens} tokens)"
    where = f"all {sequences} sequences" if whole_run else f"the first batch ({sequences} sequences)"
    return (
        f"calibration on {where} ({tokens} tokens): fewer than a calibration set of "
        f"{CALIBRATION_SEQUENCES} sequences and {CALIBRATION_TOKENS} tokens"
    )


def eigengap_notes(spec, gaps: list) -> list:
    """One-line warnings for the layers whose eigen-gap after the k-th component is too small
    (``gaps``: one per layer, or a single one for directions shared by every layer).

    >>> from effdepth.numerics.views import parse_view
    >>> spec = parse_view("top1pc")
    >>> eigengap_notes(spec, [0.5, 0.5]), len(eigengap_notes(spec, [0.5, 1e-6]))
    ([], 1)
    """
    small = [i for i, g in enumerate(gaps) if g < EIGENGAP_WARNING]
    if not small:
        return []
    # Every view has at least two states (S_0 and S_1): a single gap is that of shared directions.
    where = "the pooled layers" if len(gaps) == 1 else "layer(s) " + ", ".join(f"S_{i}" for i in small)
    worst = min(gaps[i] for i in small)
    return [
        f"view {spec.name!r}: the relative eigen-gap after principal component {spec.top_pcs} is {worst:.2g} "
        f"(under {EIGENGAP_WARNING:g}) in {where}, so the removed direction is arbitrary there; "
        "fit on more data (--pc-estimate exact) or choose another k"
    ]
