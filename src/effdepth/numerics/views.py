"""Views: transforms applied identically to every layer's states (docs/method.md#views).

A view is written as components joined with ``+``:

- selections ``drop-pos0`` / ``pos0-only`` (position 0 is each sequence's
  first real token);
- ``token-norm`` (each token state divided by its norm);
- ``center`` (subtract each layer's mean state);
- ``top{k}pc`` / ``top{k}pc-shared`` (remove the top-k principal directions of
  each layer's mean-centred states, or of all layers pooled).

Whatever order they are written in, components apply in one documented
order: **selection, then token-norm, then center, then top-k PC**. So
``token-norm+drop-pos0`` and ``drop-pos0+token-norm`` are the same view (they
commute anyway), and ``center+drop-pos0`` centres on the tokens that remain
after dropping position 0. Means and principal directions are fitted on the
view's own token set after the transforms before them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from ..errors import EffdepthError

PAPER_VIEWS = ("default", "drop-pos0", "pos0-only", "token-norm", "top1pc", "token-norm+drop-pos0")
SELECTIONS = ("drop-pos0", "pos0-only")
_TOPK = re.compile(r"^top(\d+)pc(-shared)?$")
PARTS = ("pos0", "rest")


@dataclass(frozen=True)
class ViewSpec:
    """One parsed view. ``name`` is kept as the user wrote it.

    >>> v = parse_view("token-norm+drop-pos0")
    >>> v.selection, v.token_norm, v.parts
    ('drop-pos0', True, ('rest',))
    """

    name: str
    selection: str | None = None
    token_norm: bool = False
    center: bool = False
    top_pcs: int = 0
    shared_pcs: bool = False

    @property
    def needs_fit(self) -> bool:
        return self.center or self.top_pcs > 0

    @property
    def parts(self) -> tuple:
        if self.selection == "drop-pos0":
            return ("rest",)
        if self.selection == "pos0-only":
            return ("pos0",)
        return PARTS

    @property
    def stream(self) -> tuple:
        """Views with the same stream share one set of per-part statistics.

        Selections only pick parts, unless a fit depends on the token set.
        """
        return (
            self.token_norm,
            self.center,
            self.top_pcs,
            self.shared_pcs,
            self.selection if self.needs_fit else None,
        )

    @property
    def fit_key(self) -> tuple:
        """Views with the same fit key fit their means / PCs on the same data."""
        return (self.token_norm, self.selection)

    @property
    def canonical(self) -> str:
        parts = [self.selection] if self.selection else []
        if self.token_norm:
            parts.append("token-norm")
        if self.center:
            parts.append("center")
        if self.top_pcs:
            parts.append(f"top{self.top_pcs}pc" + ("-shared" if self.shared_pcs else ""))
        return "+".join(parts) or "default"


def parse_view(text: str) -> ViewSpec:
    """Parse one view such as ``"token-norm+drop-pos0"`` or ``"top3pc-shared"``.

    >>> parse_view("top2pc").top_pcs
    2
    """
    name = text.strip()
    if not name:
        raise EffdepthError("empty view name; use e.g. --views default,drop-pos0,token-norm,top1pc")
    fields: dict = {}
    for comp in name.split("+"):
        comp = comp.strip()
        if comp == "default":
            continue
        if comp in SELECTIONS:
            key, value = "selection", comp
        elif comp == "token-norm":
            key, value = "token_norm", True
        elif comp == "center":
            key, value = "center", True
        elif m := _TOPK.match(comp):
            k = int(m.group(1))
            if k < 1:
                raise EffdepthError(f"view {name!r}: top-k PC removal needs k >= 1, got {k}")
            key, value = "top_pcs", (k, bool(m.group(2)))
        else:
            raise EffdepthError(
                f"unknown view component {comp!r} in {name!r}; known: default, drop-pos0, pos0-only, "
                "token-norm, center, top{k}pc, top{k}pc-shared, joined with '+', or 'paper'"
            )
        if key in fields:
            raise EffdepthError(f"view {name!r} has two {key.replace('_', '-')} components; use one")
        fields[key] = value
    top = fields.pop("top_pcs", (0, False))
    return ViewSpec(name=name, top_pcs=top[0], shared_pcs=top[1], **fields)


def parse_views(views) -> list:
    """Parse ``"default,drop-pos0"``, ``"paper"`` or a sequence of names; keeps order, drops repeats.

    >>> [v.name for v in parse_views("paper")][:3]
    ['default', 'drop-pos0', 'pos0-only']
    """
    if views is None:
        views = ("default",)
    if isinstance(views, str):
        views = [v for v in views.split(",")]
    if all(isinstance(v, ViewSpec) for v in views):
        return list(views)
    names: list = []
    for v in views:
        expanded = PAPER_VIEWS if str(v).strip() == "paper" else (str(v).strip(),)
        for name in expanded:
            if name not in names:
                names.append(name)
    if not names:
        raise EffdepthError("no views given; use e.g. --views default or --views paper")
    return [parse_view(n) for n in names]


#: Relative residual the principal directions of a float32 (calibration) scatter are solved to:
#: its entries carry float32 rounding (about 1e-7 relative) already.
CALIBRATION_EIGEN_TOL = 1e-6


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

    Feeds the ``center`` and ``top{k}pc`` views; memory is (L+1) x d x d when
    principal directions are needed. Each update is centred on its own mean
    before its scatter is formed, and updates are merged with Chan's parallel
    formula in float64, so a dominant mean (massive activations) cannot
    cancel digits away. ``precision`` is the dtype of each update's matrix
    product: float64 for exact estimates, float32 is enough (and several times
    faster on CPU) for a calibration estimate.

    A first update with ``hold=True`` (a calibration set, fitted right after
    it is fed, whose states stay as they are until then) is kept as given and
    fitted layer by layer, starting from the previous layer's directions
    (nearly the same): each layer's top ``layer_pcs`` directions come from its
    centred states themselves where that converges fast (see
    :func:`_data_eigenpairs`), else its covariance is formed, solved and
    dropped; the covariance of all layers pooled is kept only when ``shared``
    (every layer's is formed then). No (L+1) x d x d scatter is held. A second
    update first turns the held one into the streamed scatter. Non-finite
    states raise :class:`NonFiniteFit` naming the layer.

    >>> acc = FitAccumulator()
    >>> acc.update(torch.tensor([[[1.0, 0.0], [3.0, 0.0]]]))
    >>> acc.fit(parse_view("center"))["mean"].tolist()
    [[2.0, 0.0]]
    """

    def __init__(self, precision: torch.dtype = torch.float64, scatter: bool = True, *, layer_pcs: int = 0,
                 shared: bool = False):
        self.precision = precision
        self.want_scatter = scatter
        self.layer_pcs = layer_pcs
        self.shared = shared
        self.count = 0
        self.mean = None
        self.scatter = None
        self._held = None  # a first update fed with hold=True: (parts, transform)
        self._by_layer = None  # its per-layer fit, once computed

    def update(self, states, transform=None, *, hold: bool = False) -> None:
        """Add states shaped ``(M, tokens, d)``, or a list of such parts joined along the tokens.

        Works one layer at a time (each layer's float64 copy and product stay
        small); ``transform`` maps a layer's float64 states ``(tokens, d)``
        before they are added (e.g. token-norm). ``hold``: the states stay
        unchanged until the next update or the fit (never a reused buffer), so
        a first update may be kept and fitted layer by layer.
        """
        parts = [states] if isinstance(states, torch.Tensor) else [p for p in states if p.shape[1]]
        n = sum(p.shape[1] for p in parts)
        if n == 0:
            return
        if hold and self.count == 0 and self._held is None:
            self._held, self.count = (parts, transform), n
            return
        self._absorb_held()
        self._add(parts, transform, n)

    def _absorb_held(self) -> None:
        """Turn a held update into the streamed mean and scatter."""
        if self._held is None:
            return
        (parts, transform), n = self._held, self.count
        self._held, self._by_layer, self.count = None, None, 0
        self._add(parts, transform, n)

    def _add(self, parts: list, transform, n: int) -> None:
        m, _, d = parts[0].shape
        if self.mean is None:
            self.mean = torch.zeros(m, d, dtype=torch.float64, device=parts[0].device)
            if self.want_scatter:
                self.scatter = torch.zeros(m, d, d, dtype=torch.float64, device=parts[0].device)
        total = self.count + n
        buffers: dict = {}
        for layer in range(m):
            batch_mean, scatter = _layer_moments(parts, layer, buffers, self.precision, transform, self.want_scatter)
            delta = batch_mean - self.mean[layer]
            if self.want_scatter:
                # In place, each one pass over d x d: the product (float32 for a calibration fit) is
                # added in float64, and Chan's correction as a rank-one update.
                self.scatter[layer].add_(scatter)
                self.scatter[layer].addr_(delta, delta, alpha=self.count * n / total)
            self.mean[layer] += delta * (n / total)
        self.count = total

    def _fit_by_layer(self, tol: float) -> dict:
        """Mean, top ``layer_pcs`` eigenpairs and (when ``shared``) the pooled covariance of the
        held update, one layer's covariance at a time."""
        if self._by_layer is not None:
            return self._by_layer
        (parts, transform), n = self._held, self.count
        m, _, d = parts[0].shape
        like = parts[0].new_empty(0, dtype=torch.float64)
        mean = like.new_empty(m, d)
        k = self.layer_pcs
        pcs = like.new_empty(m, d, k) if k else None
        values = like.new_empty(m, min(k + 1, d)) if k else None
        pooled = like.new_zeros(d, d) if self.shared else None
        basis = None
        buffers: dict = {}
        for layer in range(m):
            if not (k or self.shared):
                mean[layer] = _layer_mean(parts, layer, buffers, transform)[0]
                continue
            mean[layer], centred = _centred_layer(parts, layer, buffers, self.precision, transform)
            # Without a pooled covariance to keep, the directions come from the states themselves
            # when that converges fast (it usually does: each layer starts from the last one's).
            found = None if self.shared else _data_eigenpairs(centred, k, tol, basis)
            if found is not None:
                pcs[layer], values[layer], basis = found
                continue
            cov = symmetric_product(centred).to(torch.float64) / n
            if pooled is not None:
                pooled += cov / m
            if k:
                vecs, leading, basis = _subspace_eigenpairs(cov[None], k, 24, tol, basis)
                pcs[layer], values[layer] = vecs[0], leading[0]
        self._by_layer = {"mean": mean, "pcs": pcs, "values": values, "pooled": pooled}
        return self._by_layer

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
        # Solving beyond the precision of the scatter itself would not make the directions truer.
        tol = 1e-9 if self.precision == torch.float64 else CALIBRATION_EIGEN_TOL
        if self._held is not None and (not spec.top_pcs or (self.shared if spec.shared_pcs else spec.top_pcs <= self.layer_pcs)):
            check_width([spec], self._held[0][0].shape[-1])
            by_layer = self._fit_by_layer(tol)
            fit = {"mean": by_layer["mean"], "tokens": self.count}
            if not spec.top_pcs:
                return fit
            if spec.shared_pcs:
                fit["pcs"], values = top_eigenpairs(by_layer["pooled"][None], spec.top_pcs, tol=tol)
            else:
                fit["pcs"] = by_layer["pcs"][..., : spec.top_pcs].contiguous()
                values = by_layer["values"][..., : spec.top_pcs + 1]
            fit["eigengap"] = relative_eigengap(values, spec.top_pcs)
            return fit
        self._absorb_held()
        fit = {"mean": self.mean, "tokens": self.count}
        if spec.top_pcs:
            check_width([spec], self.scatter.shape[-1])
            cov = self.scatter / self.count
            if spec.shared_pcs:
                # Pool every layer's mean-centred states: the average covariance.
                cov = cov.mean(0, keepdim=True)
            fit["pcs"], values = top_eigenpairs(cov, spec.top_pcs, tol=tol)
            fit["eigengap"] = relative_eigengap(values, spec.top_pcs)
        return fit


def _layer_moments(parts: list, layer: int, buffers: dict, precision: torch.dtype, transform,
                   scatter: bool = True) -> tuple:
    """The mean ``(d,)`` of one layer's states of every part joined along the tokens and, with
    ``scatter``, their scatter matrix about it, formed and returned in ``precision`` (the
    caller adds it up in float64; ``(mean, None)`` without). ``buffers`` keeps the work arrays from layer to layer.
    :class:`NonFiniteFit` when a state is not finite.
    """
    if not scatter:
        return _layer_mean(parts, layer, buffers, transform)[0], None
    mean, centred = _centred_layer(parts, layer, buffers, precision, transform)
    return mean, symmetric_product(centred)


def _layer_mean(parts: list, layer: int, buffers: dict, transform) -> tuple:
    """The float64 mean of one layer's states of every part joined along the tokens, and those
    states in float64: the reused buffer ``buffers["states"]``, or what ``transform`` makes of it.

    The states are converted once into that buffer and summed there: a reduction that
    converts as it sums (``sum(dtype=torch.float64)``) runs several times slower on CPU, and a
    fresh layer-sized array would fault its pages in for every layer.
    """
    n = sum(p.shape[1] for p in parts)
    y = _layer_states(parts, layer, _buffer(buffers, "states", (n, parts[0].shape[-1]), torch.float64, parts[0]), transform)
    return _finite_mean(y, layer), y


def _centred_layer(parts: list, layer: int, buffers: dict, precision: torch.dtype, transform) -> tuple:
    """The mean ``(d,)`` of one layer's states (see :func:`_layer_mean`) and those states minus
    it ``(tokens, d)`` in ``precision``: centred in float64 in place, then (float32) copied once
    into a reused ``precision`` array. Both stay valid until the next layer's call.
    """
    mean, y = _layer_mean(parts, layer, buffers, transform)
    y = y.sub_(mean)  # the float64 buffer, or the transform's own output: never the caller's states
    if y.dtype == precision:
        return mean, y
    centred = _buffer(buffers, "centred", tuple(y.shape), precision, y)
    return mean, centred.copy_(y)


def _buffer(buffers: dict, name: str, shape: tuple, dtype: torch.dtype, like: torch.Tensor) -> torch.Tensor:
    if name not in buffers:
        buffers[name] = like.new_empty(shape, dtype=dtype)
    return buffers[name]


def _layer_states(parts: list, layer: int, buffer: torch.Tensor, transform) -> torch.Tensor:
    """One layer's states of every part joined along the tokens, converted into the float64
    ``buffer`` in one pass, then transformed."""
    start = 0
    for p in parts:
        buffer[start : start + p.shape[1]].copy_(p[layer])
        start += p.shape[1]
    return transform(buffer) if transform is not None else buffer


#: Column blocks of the upper triangle :func:`symmetric_product` forms (at least
#: :data:`TRIANGLE_BLOCK_COLUMNS` wide): three measured fastest on CPU at d = 576 (2,048 tokens).
TRIANGLE_BLOCKS = 3
TRIANGLE_BLOCK_COLUMNS = 128


def symmetric_product(y: torch.Tensor) -> torch.Tensor:
    """``y^T y`` for ``y`` of shape ``(n, d)``, formed over its upper triangle and mirrored.

    torch has no symmetric rank-k product, so the triangle is formed in
    column blocks, each block row from its diagonal on: about a third fewer
    multiply-adds (measured a fifth to a third faster on CPU) than the full
    product.

    >>> y = torch.randn(40, 300, dtype=torch.float64)
    >>> bool(torch.allclose(symmetric_product(y), y.T @ y, rtol=1e-12))
    True
    """
    d = y.shape[-1]
    parts = max(1, min(TRIANGLE_BLOCKS, d // TRIANGLE_BLOCK_COLUMNS))
    if parts == 1:
        return y.T @ y
    out = y.new_empty(d, d)
    edges = [round(i * d / parts) for i in range(parts + 1)]
    for lo, hi in zip(edges[:-1], edges[1:]):
        out[lo:hi, lo:] = y[:, lo:hi].T @ y[:, lo:]
        out[hi:, lo:hi] = out[lo:hi, hi:].T
    return out


def _finite_mean(y: torch.Tensor, layer: int) -> torch.Tensor:
    """The mean state of one layer; :class:`NonFiniteFit` when a state is not finite (a NaN or
    inf anywhere makes the mean so, without a pass over the states)."""
    return _checked_mean(y.mean(0), layer)


def _checked_mean(mean: torch.Tensor, layer: int) -> torch.Tensor:
    if not bool(torch.isfinite(mean).all()):
        raise NonFiniteFit(layer)
    return mean


def check_width(views, width: int) -> None:
    """One-line error for a ``top{k}pc`` view that would remove k >= d directions (everything).

    >>> check_width(parse_views("default,top2pc"), 16)
    >>> check_width(parse_views("top16pc"), 16)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: view 'top16pc' removes 16 principal directions, but the states have width d = 16: with k >= d nothing but rounding noise is left; use top{k}pc with k < 16
    """
    for spec in parse_views(views):
        if spec.top_pcs >= width:
            raise EffdepthError(
                f"view {spec.name!r} removes {spec.top_pcs} principal directions, but the states have width d = {width}: "
                f"with k >= d nothing but rounding noise is left; use top{{k}}pc with k < {width}"
            )


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


def top_eigenvectors(cov: torch.Tensor, k: int, iterations: int = 24, tol: float = 1e-9) -> torch.Tensor:
    """Leading-k eigenvectors of symmetric PSD matrices ``(B, d, d)`` -> ``(B, d, k)``.

    See :func:`top_eigenpairs`, which also returns the eigenvalues.

    >>> c = torch.diag(torch.tensor([1.0, 5.0, 2.0], dtype=torch.float64))[None]
    >>> top_eigenvectors(c, 1).flatten().abs().tolist()
    [0.0, 1.0, 0.0]
    """
    return top_eigenpairs(cov, k, iterations, tol)[0]


def top_eigenpairs(cov: torch.Tensor, k: int, iterations: int = 24, tol: float = 1e-9) -> tuple:
    """Leading-k eigenvectors ``(B, d, k)`` and the leading min(k+1, d) eigenvalues ``(B, k+1)``.

    Subspace iteration with a Rayleigh-Ritz step costs O(d^2 k) per iteration
    instead of a full O(d^3) eigendecomposition per layer. It stops at the
    first iteration whose Ritz vectors all have a relative residual
    ``|C v - lambda v| / lambda`` within ``tol`` (checked from the product the
    iteration forms anyway); any matrix still above it after ``iterations``
    falls back to ``eigh``, so the vectors meet ``tol`` either way. A spectrum
    whose top is nearly flat (isotropic noise, the surrogate streams)
    converges slowly: there the dense solver is cheaper than iterating on. The
    (k+1)-th value (for the eigen-gap) is a Ritz value of the same subspace,
    iterated on until the eigen-gap is within ``tol`` too (see
    :func:`_gap_distance`). ``k`` must lie in 1..d: nothing is clamped.

    >>> c = torch.diag(torch.tensor([1.0, 5.0, 2.0], dtype=torch.float64))[None]
    >>> top_eigenpairs(c, 1)[1].tolist()
    [[5.0, 2.0]]
    """
    vectors, leading, _ = _subspace_eigenpairs(cov, k, iterations, tol)
    return vectors, leading


def _subspace_eigenpairs(cov: torch.Tensor, k: int, iterations: int, tol: float, start: torch.Tensor | None = None) -> tuple:
    """:func:`top_eigenpairs` plus the final subspace basis ``(B, d, q)`` with its Ritz vectors
    in descending order (``None`` after a dense solve), from which the next, similar matrix can
    ``start``."""
    b, d, _ = cov.shape
    if not 1 <= k <= d:
        raise ValueError(f"need 1 <= k <= d = {d} eigenvectors, got k = {k}")
    want = min(k + 1, d)
    q = min(d, k + 8)
    if q * 4 >= d:
        values, vectors = torch.linalg.eigh(cov)
        return vectors[..., -k:].flip(-1), values[..., -want:].flip(-1), None
    if start is not None and start.shape[-1] == q:
        basis = start.clone()  # the previous matrix's Ritz vectors, leading first
    else:
        gen = torch.Generator(device="cpu").manual_seed(0)
        basis = torch.randn(b, d, q, generator=gen, dtype=cov.dtype).to(cov.device)
        if start is not None:
            basis[..., : start.shape[-1]] = start  # the leading Ritz vectors first
    basis, _ = torch.linalg.qr(basis)
    for step in range(iterations + 1):
        product = cov @ basis
        values, small = torch.linalg.eigh(basis.transpose(1, 2) @ product)  # Rayleigh-Ritz
        top = small[..., -want:].flip(-1)  # the k wanted and the eigen-gap's (k+1)-th
        vecs, vals = basis @ top, values[..., -want:].flip(-1)
        residual = (product @ top - vecs * vals[:, None, :]).norm(dim=1) / vals.abs().clamp_min(1e-300)
        vecs, gap_residual, residual = vecs[..., :k].contiguous(), residual[:, k:], residual[:, :k]
        # q >= k + 2 here (4q < d), so the (k+1)-th and its neighbour below exist.
        bad = (residual > tol).any(dim=1) | ~torch.isfinite(residual).all(dim=1)
        bad |= ~(_gap_distance(values, gap_residual[:, 0], k, tol) <= 1.0)
        if not bool(bad.any()) or step == iterations:
            break
        if step >= 2 and not bool((_iterations_needed(values, residual, k, tol)[bad] <= iterations - step).any()):
            break  # none of those left would get there in the iterations left: solve them densely now
        basis, _ = torch.linalg.qr(product)
    leading = values[..., -want:].flip(-1)
    ritz = basis @ small.flip(-1)
    # A nearly repeated k-th eigenvalue makes the direction itself ill-defined;
    # eigh then gives the same answer as a dense solver would.
    if bool(bad.any()):
        exact_values, exact_vectors = dense_eigh(cov[bad], k, tol)
        vecs[bad] = exact_vectors[..., -k:].flip(-1)
        leading[bad] = exact_values[..., -want:].flip(-1)
        ritz[bad] = exact_vectors[..., -q:].flip(-1)
    return vecs, leading, ritz


#: Vectors the subspace of :func:`_data_eigenpairs` holds beyond the k wanted: enough that the
#: (k+1)-th (the eigen-gap's value) converges along, few enough that each iteration stays cheap.
DATA_EXTRA_VECTORS = 3
#: Iterations :func:`_data_eigenpairs` may take: about where forming and solving the covariance
#: would have cost the same (measured on CPU at d = 576, q = 4: each iteration's two thin products,
#: 2 n d q multiply-adds, run far below the rate of the covariance's one large product).
DATA_ITERATIONS = 10


def _data_eigenpairs(centred: torch.Tensor, k: int, tol: float, start: torch.Tensor | None) -> tuple | None:
    """The top ``k`` eigenvectors ``(d, k)``, the leading k+1 eigenvalues and the Ritz basis
    ``(1, d, q)`` of ``C = Y^T Y / n``, from the centred states ``Y`` ``(n, d)`` themselves, or
    ``None`` where forming ``C`` is the better route.

    Subspace iteration on the products ``Y^T (Y B)`` (in ``Y``'s dtype, the Rayleigh-Ritz step in
    float64), started from the previous layer's Ritz basis ``start``: consecutive layers of a
    residual stream share their leading directions, so a few iterations of O(n d q) replace the
    O(n d^2) covariance. Converged when the top k Ritz vectors have a relative residual
    ``|C v - lambda v| / lambda`` within ``tol`` (as :func:`top_eigenpairs`) and the (k+1)-th
    Ritz value is accurate enough for the eigen-gap to be within ``tol`` (see
    :func:`_gap_distance`). ``None``
    when it would not get there within :data:`DATA_ITERATIONS` (a flat spectrum, or products whose
    own rounding stays above ``tol``), and when the subspace is a quarter of ``d`` or more.

    >>> y = torch.randn(500, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    >>> y[:, 3] *= 10.0; y[:, 7] *= 5.0; y -= y.mean(0)    # lambda_2 isolated too
    >>> vecs, values, basis = _data_eigenpairs(y, 1, 1e-9, None)
    >>> int(vecs[:, 0].abs().argmax()), torch.allclose(values, torch.linalg.eigvalsh(y.T @ y / 500)[-2:].flip(0))
    (3, True)
    """
    n, d = centred.shape
    q = k + DATA_EXTRA_VECTORS
    if 4 * q >= d:
        return None
    basis = torch.randn(d, q, generator=torch.Generator(device="cpu").manual_seed(0), dtype=torch.float64).to(centred.device)
    if start is not None:
        lead = start[0, :, : min(q, start.shape[-1])]  # the previous layer's leading Ritz vectors first
        basis[:, : lead.shape[-1]] = lead
    basis, _ = torch.linalg.qr(basis)
    worst = float("inf")
    for step in range(DATA_ITERATIONS):
        # F.linear: the fast route for Y B with a thin B (a plain Y @ B runs about three times slower).
        product = torch.nn.functional.linear(centred, basis.T.to(centred.dtype))
        product = (product.T @ centred).T.to(torch.float64) / n  # C B
        values, small = torch.linalg.eigh(basis.T @ product)  # Rayleigh-Ritz, ascending
        top = small[:, -(k + 1) :].flip(-1)
        leading = values[-(k + 1) :].flip(0)
        vecs = basis @ top
        residual = (product @ top - vecs * leading).norm(dim=0) / leading.abs().clamp_min(1e-300)
        if not bool(torch.isfinite(residual).all()):
            return None
        # How far each residual still is from its target: 1 or less is there.
        distance = float(torch.cat([residual[:k] / tol, _gap_distance(values, residual[k], k, tol)[None]]).max())
        if distance <= 1.0:
            return vecs[:, :k], leading, (basis @ small.flip(-1))[None]
        if distance > 0.9 * worst:
            return None  # no longer shrinking: at the rounding of the products, or a flat top
        worst = distance
        vectors_left = float(residual[:k].max()) > tol
        if vectors_left and step >= 1 and float(_iterations_needed(values[None], residual[None, :k], k, tol)[0]) > DATA_ITERATIONS - step - 1:
            return None
        basis, _ = torch.linalg.qr(product)
    return None


def _gap_distance(values: torch.Tensor, residual: torch.Tensor, k: int, tol: float) -> torch.Tensor:
    """How far the (k+1)-th Ritz value still is from serving the eigen-gap, 1 or less being there,
    from the Ritz values ``values`` (ascending, at least k+2; batched or not) and its relative
    residual ``residual``.

    Either its residual is within ``sqrt(tol)``, or the error bound of its Ritz value, ``|r|^2 /
    delta`` (the residual squared over its distance to the neighbouring Ritz values), is within
    ``tol * lambda_k``, which is all ``(lambda_k - lambda_{k+1}) / lambda_k`` needs. Below a
    dominant lambda_k (residual streams), the second holds iterations earlier.

    >>> ritz = torch.tensor([0.5, 1.0, 400.0], dtype=torch.float64)   # lambda_2 = 1, lambda_3 = 0.5
    >>> round(float(_gap_distance(ritz, torch.tensor(1e-2, dtype=torch.float64), 1, 1e-6)), 6)
    0.5
    """
    theta, above, below = values[..., -(k + 1)], values[..., -k], values[..., -(k + 2)]
    separation = torch.minimum(above - theta, theta - below).clamp_min(1e-300)
    bound = (residual * theta) ** 2 / separation / above.abs().clamp_min(1e-300)
    return torch.minimum(residual / tol**0.5, bound / tol)


#: Residual tolerances from this one up are met by a float32 dense solver (float32 rounding is
#: about 6e-8 of the largest eigenvalue); each result is checked all the same.
DENSE_FLOAT32_TOL = 1e-6


def dense_eigh(cov: torch.Tensor, k: int, tol: float) -> tuple:
    """``torch.linalg.eigh`` of symmetric matrices ``(B, d, d)`` (ascending), its top ``k`` vectors
    within the relative residual ``tol``.

    Where ``tol`` allows (:data:`DENSE_FLOAT32_TOL`: a calibration fit, whose
    float32 scatter carries that rounding already), the solve runs in float32,
    about a third faster; a matrix whose top k vectors miss ``tol`` there is
    solved again in its own precision. The vectors come back in ``cov``'s
    dtype with unit norm in it, so removing them removes exactly what they span.
    Surrogate streams, whose near-flat spectra always end here, need this most.

    >>> c = torch.diag(torch.tensor([1.0, 5.0, 2.0], dtype=torch.float64))[None]
    >>> values, vectors = dense_eigh(c, 1, 1e-6)
    >>> values.dtype, round(float(values[0, -1]), 6), vectors[0, :, -1].abs().tolist()
    (torch.float64, 5.0, [0.0, 1.0, 0.0])
    """
    if tol < DENSE_FLOAT32_TOL or cov.dtype != torch.float64:
        return torch.linalg.eigh(cov)
    try:
        values, vectors = (t.to(cov.dtype) for t in torch.linalg.eigh(cov.to(torch.float32)))
    except torch.linalg.LinAlgError:  # float32 did not converge (or overflowed): the float64 solve decides
        return torch.linalg.eigh(cov)
    top, leading = vectors[..., -k:], values[..., -k:]
    residual = (cov @ top - top * leading[:, None, :]).norm(dim=1) / leading.abs().clamp_min(1e-300)
    redo = (residual > tol).any(dim=1) | ~torch.isfinite(residual).all(dim=1)
    if bool(redo.any()):
        values[redo], vectors[redo] = torch.linalg.eigh(cov[redo])
    return values, vectors / vectors.norm(dim=1, keepdim=True)


def _iterations_needed(values: torch.Tensor, residual: torch.Tensor, k: int, tol: float) -> torch.Tensor:
    """Iterations each matrix still needs to bring its worst residual within ``tol``, predicted from
    the subspace's Ritz values ``(B, q)`` (ascending): the residual shrinks about by
    ``theta_q / theta_k`` per iteration, so a flat spectrum (ratio near 1) needs ever more.

    >>> ritz = torch.tensor([[1.0, 2.0, 8.0]], dtype=torch.float64)   # shrinks 8-fold per iteration
    >>> round(float(_iterations_needed(ritz, torch.tensor([[1e-3]], dtype=torch.float64), 1, 1e-9)), 6)
    6.643856
    """
    rate = (values[..., 0] / values[..., -k]).abs()
    worst = residual.max(dim=1).values
    needed = torch.log(torch.as_tensor(tol, dtype=worst.dtype, device=worst.device) / worst) / torch.log(rate)
    converging = torch.isfinite(worst) & (rate < 1)
    return torch.where(converging, needed.clamp_min(0), torch.full_like(needed, float("inf")))


def token_transform(states: torch.Tensor, spec: ViewSpec) -> torch.Tensor:
    """The per-token part of a view (token-norm), before any fitted step."""
    if spec.token_norm:
        norms = states.norm(dim=-1, keepdim=True)
        states = states / torch.where(norms > 0, norms, torch.ones_like(norms))
    return states


def fitted_transform(states: torch.Tensor, spec: ViewSpec, fit: dict | None) -> torch.Tensor:
    """The fitted part of a view (center, top-k PC removal) on ``(M, T, d)`` float64 states."""
    if not spec.needs_fit:
        return states
    if spec.center:
        states = states - fit["mean"][:, None, :].to(states)
    if spec.top_pcs:
        v = fit["pcs"].to(states)  # (M or 1, d, k)
        states = minus_product(states, states @ v, v.transpose(1, 2))
    return states


def minus_product(base: torch.Tensor, left: torch.Tensor, right: torch.Tensor, *, in_place: bool = False) -> torch.Tensor:
    """``base - left @ right`` for a small inner size k (the scores and directions of k removed
    PCs), batched or not; ``in_place``: into ``base``.

    For k = 1 the product is an outer product, formed element-wise: a matrix
    product of inner size 1 runs several times slower than the one pass it
    takes (the same numbers up to rounding).

    >>> base, left, right = torch.ones(2, 3), torch.tensor([[1.0], [2.0]]), torch.tensor([[1.0, 0.0, 3.0]])
    >>> minus_product(base, left, right).tolist()
    [[0.0, 1.0, -2.0], [-1.0, 1.0, -5.0]]
    """
    if left.shape[-1] == 1:
        return base.addcmul_(left, right, value=-1.0) if in_place else torch.addcmul(base, left, right, value=-1.0)
    if base.dim() == 2:
        return base.addmm_(left, right, alpha=-1.0) if in_place else torch.addmm(base, left, right, alpha=-1.0)
    if in_place:
        return base.baddbmm_(left, right, alpha=-1.0)
    if base.dim() == left.dim() == right.dim() == 3 and left.shape[0] == right.shape[0]:
        return torch.baddbmm(base, left, right, alpha=-1.0)  # one pass, no temporary product
    return base - left @ right
