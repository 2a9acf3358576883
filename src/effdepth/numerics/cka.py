"""Linear CKA between layers (docs/method.md#cka): per-sequence HSIC and the pooled exact CKA.

"cka" (the default similarity) treats each sequence as a minibatch. For
sequence b with n_b analysed tokens, each layer's view-transformed states are
centred over that sequence's tokens (``Y = X - mean``) and the biased HSIC is

    h_ij^b = <K_i, K_j>_F / (n_b - 1)^2,   K_l = Y_l Y_l^T = H G_l H

with ``G_l = X_l X_l^T`` the uncentred token Gram and ``H`` the centring
matrix. The per-sequence M x M matrices h^b (M = L+1 states S_0..S_L, so
``include_embedding`` can still slice) add up over sequences:
``sim_ij = sum_b h_ij^b / sqrt(sum_b h_ii^b sum_b h_jj^b)``.

One Gram per layer per sequence (one T x T x d product, float64, of the
states minus their sequence mean, which centring ignores) feeds every view;
a view acts on it:

- position selection slices it (drop-pos0 keeps rows/columns 1..T-1; the
  centring is then over the remaining tokens);
- token-norm rescales it, ``G_ab / (|x_a| |x_b|)``;
- top-k PC removal subtracts ``(XV)(XV)^T``, with V the view's fitted
  directions and X the (token-normed, if the view says so) states;
- ``center`` is a no-op: subtracting one vector from every token is undone by
  the per-sequence centring (and by the pooled centring of cka-full), and the
  fitted PCs come from mean-centred states either way.

HSIC is not additive over token subsets, so unlike the other statistics
(kept as additive parts "pos0" and "rest") cka statistics are kept per token
set: all positions, or drop-pos0. A view that leaves fewer than
:data:`MIN_TOKENS` tokens in a sequence has no cka value for it: that
sequence is left out of the view's cka statistics and counted
(``cka_sequences`` is 0 for it); pos0-only is never available
(:class:`ViewUnavailable`).

"cka-full" pools every analysed token of a view (centred on the pooled mean)
and needs the d x d cross-products of every layer pair; see
:class:`PooledCka` and :func:`check_cka_full_memory`.

Keys (per sequence for cka, one unit for cka-full):

- ``hsic`` (M, M): h^b above.
- ``cka_energy`` (M,): energies of the per-sequence centred states cka sees,
  ``e_0 = |Y_0|^2`` and ``e_l = |Y_l - Y_{l-1}|^2`` (explicit differences),
  each divided by (n_b - 1); they feed the matched references.
- ``cka_sequences`` (): 1 when the sequence entered the view's cka
  statistics, 0 when it had fewer than 4 tokens in the view.
- ``cka_tokens`` (): n_b of an entered sequence, else 0.
- ``hsic_full`` (M, M), ``cka_full_energy`` (M,), ``cka_full_tokens`` ():
  the same with every token of the view pooled and centred on the pooled mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import EffdepthError
from .views import ViewSpec, parse_views

# Below this, a centred n x n Gram has too few degrees of freedom to compare
# layers (n = 1 is identically zero after centring).
MIN_TOKENS = 4
GRAM_BUDGET_BYTES = 1 << 30
FULL_BUDGET_BYTES = 4 << 30
CKA_KEYS = ("hsic", "cka_energy", "cka_sequences", "cka_tokens")
FULL_KEYS = ("hsic_full", "cka_full_energy", "cka_full_tokens")
_GIB = float(1 << 30)


class ViewUnavailable(EffdepthError):
    """A view has no value under a similarity (e.g. pos0-only under cka); ``reason`` says why.

    >>> e = ViewUnavailable("pos0-only", "cka", "one token per sequence")
    >>> e.reason, str(e)
    ('one token per sequence', "view 'pos0-only' has no cka value: one token per sequence")
    """

    def __init__(self, view: str, similarity: str, reason: str):
        self.view, self.similarity, self.reason = view, similarity, reason
        super().__init__(f"view {view!r} has no {similarity} value: {reason}")

    def __reduce__(self):
        # Keeps the exception picklable (e.g. across processes) despite its signature.
        return (type(self), (self.view, self.similarity, self.reason))


@dataclass(frozen=True, eq=False)
class GramView:
    """What cka needs of a view: the first position kept, token-norm, fitted PCs.

    ``pcs`` is ``(M or 1, d, k)`` (the view's fitted directions) or ``None``.

    >>> gram_view(parse_views(["token-norm+drop-pos0"])[0]).first
    1
    """

    first: int = 0
    token_norm: bool = False
    pcs: torch.Tensor | None = None


def gram_view(spec: ViewSpec, fit: dict | None = None, similarity: str = "cka") -> GramView:
    """The :class:`GramView` of a parsed view (raises :class:`ViewUnavailable` for pos0-only).

    >>> gram_view(parse_views(["pos0-only"])[0])
    Traceback (most recent call last):
    ...
    effdepth.numerics.cka.ViewUnavailable: view 'pos0-only' has no cka value: pos0-only keeps one token per sequence; cka needs at least 4
    """
    require_cka_view(spec, similarity)
    pcs = fit["pcs"] if (spec.top_pcs and fit is not None) else None
    if spec.top_pcs and pcs is None:
        raise ValueError(f"view {spec.name!r} needs its fitted principal directions first")
    return GramView(first=1 if spec.selection == "drop-pos0" else 0, token_norm=spec.token_norm, pcs=pcs)


def require_cka_view(spec: ViewSpec, similarity: str = "cka") -> None:
    """Raise :class:`ViewUnavailable` for a view that can never have a cka value (pos0-only).

    >>> require_cka_view(parse_views(["drop-pos0"])[0])
    """
    if spec.selection == "pos0-only":
        raise ViewUnavailable(spec.name, similarity, f"pos0-only keeps one token per sequence; cka needs at least {MIN_TOKENS}")


def cka_token_sets(views) -> dict:
    """The distinct token sets cka needs, ``(stream, selection) -> first view``; pos0-only has none.

    Views that share a stream and a selection (e.g. written in another order)
    share one set of cka statistics.

    >>> sorted(str(s) for _, s in cka_token_sets("default,drop-pos0,pos0-only"))
    ['None', 'drop-pos0']
    """
    out: dict = {}
    for v in parse_views(views):
        if v.selection != "pos0-only":
            out.setdefault(cka_set_key(v), v)
    return out


def cka_set_key(spec: ViewSpec) -> tuple:
    """Key of a view's cka token set: its stream and its selection.

    >>> a, b = parse_views("token-norm+drop-pos0,drop-pos0+token-norm")
    >>> cka_set_key(a) == cka_set_key(b)
    True
    """
    return (spec.stream, spec.selection)


def view_token_states(states: torch.Tensor, view: GramView) -> torch.Tensor:
    """The view's states over its kept positions, ``(M, n, d)`` float64, uncentred.

    The explicit counterpart of what the view does to the Gram (``center`` is
    omitted: the per-sequence or pooled centring removes it anyway).

    >>> x = torch.tensor([[[6.0, 8.0], [0.0, 2.0]]], dtype=torch.float64)
    >>> view_token_states(x, GramView(first=0, token_norm=True)).tolist()
    [[[0.6, 0.8], [0.0, 1.0]]]
    """
    z = states[:, view.first :].to(torch.float64)
    if view.token_norm:
        z = z / _safe_norms(z)[..., None]
    if view.pcs is not None:
        v = view.pcs.to(z)
        z = z - (z @ v) @ v.transpose(1, 2)
    return z


def _safe_norms(z: torch.Tensor) -> torch.Tensor:
    """|x| per token, 1 for a zero token (which token-norm leaves at zero)."""
    norms = torch.linalg.vector_norm(z, dim=-1)
    return torch.where(norms > 0, norms, torch.ones_like(norms))


def centred_energies(y: torch.Tensor) -> torch.Tensor:
    """``|Y_0|^2`` and ``|Y_l - Y_{l-1}|^2`` of states ``(M, n, d)``, from explicit differences.

    Consecutive states are nearly parallel: expanding ``|Y_l|^2 - 2<Y_l,
    Y_{l-1}> + |Y_{l-1}|^2`` would cancel catastrophically.

    >>> y = torch.tensor([[[1.0, 0.0]], [[1.0, 2.0]]], dtype=torch.float64)
    >>> centred_energies(y).tolist()
    [1.0, 4.0]
    """
    out = torch.empty(y.shape[0], dtype=torch.float64, device=y.device)
    out[0] = y[0].square().sum()
    if y.shape[0] > 1:
        out[1:] = (y[1:] - y[:-1]).square().sum(dim=(1, 2))
    return out


def gram_rows(num_states: int, tokens: int, budget_bytes: int = GRAM_BUDGET_BYTES) -> int:
    """Token rows of the Gram held at once: all of them when M * T^2 fits the budget.

    The working set is about three (M, rows, T) float64 arrays (the raw Gram
    rows, one view's centred rows and a product).

    >>> gram_rows(31, 256), gram_rows(31, 8192)
    (256, 176)
    """
    per_row = 3 * num_states * max(tokens, 1) * 8
    return int(max(1, min(tokens, budget_bytes // per_row)))


class _ViewStates:
    """A view's transformed states over all positions of one sequence, shared by its
    token sets (all positions, drop-pos0), with their explicit layer differences.

    The input is the states minus the sequence mean ``c``, as the shared Gram
    is (see :class:`_CentredGram`). Views without token-norm are blind to that
    shift (the PCs act linearly; a constant is centred away). token-norm
    divides by the raw norms, so it keeps what rebuilding the raw Gram rows
    ``G' + X'c 1^T + 1 (X'c)^T + |c|^2`` needs.
    """

    def __init__(self, shifted: torch.Tensor, shift: torch.Tensor, token_norm: bool, pcs: torch.Tensor | None):
        self.norms = None
        z = shifted
        if token_norm:
            z = shifted + shift[:, None]
            self.norms = _safe_norms(z)  # (M, T)
            self.cross_shift = (shifted @ shift[..., None])[..., 0]  # (M, T): X'_a . c
            self.shift_sq = shift.square().sum(-1)  # (M,): |c|^2
            z /= self.norms[..., None]
        self.proj = None
        if pcs is not None:
            v = pcs.to(z)
            self.proj = z @ v  # (M, T, k): the PC scores (XV)
            z = torch.baddbmm(z, self.proj, v.transpose(1, 2).expand(z.shape[0], -1, -1), alpha=-1.0)
        self.z = z
        self.diff = z[1:] - z[:-1]  # explicit differences: consecutive states are nearly parallel


class _CentredGram:
    """One token set of one view of one sequence, turning shared Gram rows into centred rows.

    With ``Z`` the view's states over its n kept tokens and ``zbar`` their
    mean, the centred Gram is ``K_ab = Z_a.Z_b - Z_a.zbar - Z_b.zbar + |zbar|^2``;
    the row terms come from Z (n x d work per layer), the T x T part from the
    shared Gram, so any block of rows can be centred on its own. The shared
    Gram is of the states minus their sequence mean: centring a Gram cancels
    |mean|^2-sized terms, and shifting first keeps the digits a dominant mean
    would take.
    """

    def __init__(self, states: _ViewStates, first: int):
        self.states, self.first = states, first
        z = states.z[:, first:]
        self.n = z.shape[1]
        mean = z.mean(dim=1)
        self.row_mean = (z @ mean[..., None])[..., 0]  # (M, n): Z_a . zbar
        self.grand = mean.square().sum(-1)  # (M,): |zbar|^2
        # |Y_0|^2 and |Y_l - Y_{l-1}|^2 of the centred states, from the shared differences.
        energy = torch.empty_like(self.grand)
        energy[0] = (z[0] - mean[0]).square().sum()
        steps = states.diff[:, first:] - (mean[1:] - mean[:-1])[:, None]
        energy[1:] = torch.linalg.vector_norm(steps, dim=(1, 2)).square()
        self.energy = energy / (self.n - 1)

    def rows(self, gram: torch.Tensor, start: int, stop: int) -> torch.Tensor | None:
        """Centred Gram rows of this token set from shared Gram rows ``start:stop`` ``(M, stop-start, T)``."""
        lo = max(start, self.first)
        if lo >= stop:
            return None
        f, vs = self.first, self.states
        g = gram[:, lo - start :, f:]
        # A fresh array either way: the shared rows serve every view and are never modified.
        if vs.norms is not None:
            k = g + vs.cross_shift[:, lo:stop, None]
            k += vs.cross_shift[:, None, f:]
            k += vs.shift_sq[:, None, None]
            k /= vs.norms[:, lo:stop, None]
            k /= vs.norms[:, None, f:]
        else:
            k = g.clone()
        if vs.proj is not None:
            k.baddbmm_(vs.proj[:, lo:stop], vs.proj[:, f:].transpose(1, 2), alpha=-1.0)
        a, b = lo - f, stop - f  # the rows' indices among the kept tokens
        k -= self.row_mean[:, a:b, None]
        k -= self.row_mean[:, None, :]
        k += self.grand[:, None, None]
        return k


def sequence_cka(states: torch.Tensor, views: list, gram_budget_bytes: int = GRAM_BUDGET_BYTES) -> list:
    """cka statistics (:data:`CKA_KEYS`) of one sequence ``(M, T, d)`` for each :class:`GramView`.

    One token Gram per layer (of the states minus their sequence mean) feeds
    every view. When M * T^2 float64 does not fit ``gram_budget_bytes``, the
    Gram is formed and consumed in blocks of token rows (every layer at once),
    so nothing is computed twice and the result is the same. A view with fewer
    than :data:`MIN_TOKENS` tokens gets zeros and ``cka_sequences = 0``.

    >>> q = torch.linalg.qr(torch.randn(8, 8, dtype=torch.float64))[0]
    >>> x = torch.stack([q[:, :2], 2 * q[:, :2]])          # S_1 = 2 S_0: same geometry
    >>> h = sequence_cka(x, [GramView()])[0]["hsic"]
    >>> round(float(h[0, 1] / np.sqrt(h[0, 0] * h[1, 1])), 12)
    1.0
    """
    x = states.to(torch.float64)
    m, t, _ = x.shape
    shift = x.mean(dim=1)
    shifted = x - shift[:, None]
    transformed: dict = {}  # one per distinct transform, shared by its token sets
    plans = []
    for v in views:
        if t - v.first < MIN_TOKENS:
            plans.append(None)
            continue
        key = (v.token_norm, None if v.pcs is None else id(v.pcs))
        if key not in transformed:
            transformed[key] = _ViewStates(shifted, shift, v.token_norm, v.pcs)
        plans.append(_CentredGram(transformed[key], v.first))
    for vs in transformed.values():
        vs.z = vs.diff = None  # only the norms, shift terms and PC scores are needed from here
    live = [p for p in plans if p is not None]
    hsic = {id(p): x.new_zeros(m, m) for p in live}
    if live:
        step = gram_rows(m, t, gram_budget_bytes)
        for start in range(0, t, step):
            stop = min(t, start + step)
            gram = shifted[:, start:stop] @ shifted.transpose(1, 2)  # (M, rows, T): the one shared product
            for plan in live:
                k = plan.rows(gram, start, stop)
                if k is not None:
                    flat = k.reshape(m, -1)
                    hsic[id(plan)].addmm_(flat, flat.T)
    return [_cka_unit(plan, hsic.get(id(plan)), m) for plan in plans]


def _cka_unit(plan: "_CentredGram | None", hsic: torch.Tensor | None, m: int) -> dict:
    if plan is None:
        return empty_cka_unit(m)
    return {
        "hsic": (hsic / float(plan.n - 1) ** 2).cpu().numpy(),
        "cka_energy": plan.energy.cpu().numpy(),
        "cka_sequences": np.asarray(1.0),
        "cka_tokens": np.asarray(float(plan.n)),
    }


def empty_cka_unit(num_states: int) -> dict:
    """The cka statistics of a sequence left out of a view (too few tokens): zeros.

    >>> empty_cka_unit(3)["hsic"].shape, float(empty_cka_unit(3)["cka_sequences"])
    ((3, 3), 0.0)
    """
    m = num_states
    return {
        "hsic": np.zeros((m, m)),
        "cka_energy": np.zeros(m),
        "cka_sequences": np.asarray(0.0),
        "cka_tokens": np.asarray(0.0),
    }


# -- cka-full: every token of a view pooled ----------------------------------------


def _pair_offset(i: int, m: int) -> int:
    """Index of the pair (i, i) in the list of pairs i <= j, row by row."""
    return i * m - i * (i - 1) // 2


def check_cka_full_memory(views, num_states: int, hidden_size: int, budget_bytes: int = FULL_BUDGET_BYTES) -> int:
    """Bytes cka-full needs for these views; a one-line error when over ``budget_bytes``.

    Every view token set keeps M(M+1)/2 float64 d x d cross-products; call
    this before loading a model.

    >>> check_cka_full_memory(["default"], 3, 4)
    768
    >>> check_cka_full_memory(["default"], 31, 576, budget_bytes=1 << 30)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: cka-full needs 1.2 GiB (1 view token set(s) x 496 layer pairs x 576^2 float64 cross-products), over its 1.0 GiB budget; use --similarity cka (per-sequence linear CKA, the default) or fewer views
    """
    sets = len(cka_token_sets(views))
    pairs = num_states * (num_states + 1) // 2
    needed = sets * pairs * hidden_size * hidden_size * 8
    if needed > budget_bytes:
        raise EffdepthError(
            f"cka-full needs {needed / _GIB:.1f} GiB ({sets} view token set(s) x {pairs} layer pairs x "
            f"{hidden_size}^2 float64 cross-products), over its {budget_bytes / _GIB:.1f} GiB budget; "
            "use --similarity cka (per-sequence linear CKA, the default) or fewer views"
        )
    return needed


class PooledCka:
    """Streamed pooled statistics of one view token set for cka-full.

    Keeps the token count, per-layer sums and the d x d cross-products of
    every layer pair i <= j, all of states shifted by a fixed reference (the
    mean of the first update): centring at the end then subtracts only the
    small residual mean, so a dominant mean cannot cancel digits away. Update
    energies are summed from explicit differences of the shifted states.

    >>> acc = PooledCka()
    >>> acc.update(torch.randn(3, 10, 4, dtype=torch.float64))
    >>> st = acc.statistics(); st["hsic_full"].shape, float(st["cka_full_tokens"])
    ((3, 3), 10.0)
    """

    FIELDS = ("count", "shift", "sums", "cross", "increment_sq")

    def __init__(self):
        self.count = 0
        self.shift = None  # (M, d)
        self.sums = None  # (M, d): sum of shifted states
        self.cross = None  # (M(M+1)/2, d, d): sum of shifted z_i^T z_j, pairs i <= j
        self.increment_sq = None  # (M,): sum of |z_0|^2 and |z_l - z_{l-1}|^2

    def _allocate(self, shift: torch.Tensor) -> None:
        m, d = shift.shape
        self.shift = shift.clone()
        self.sums = torch.zeros_like(shift)
        self.cross = torch.zeros(m * (m + 1) // 2, d, d, dtype=torch.float64, device=shift.device)
        self.increment_sq = torch.zeros(m, dtype=torch.float64, device=shift.device)

    def update(self, y: torch.Tensor) -> None:
        """Add view states ``(M, n, d)`` (uncentred, any n)."""
        y = y.to(torch.float64)
        m, n, d = y.shape
        if n == 0:
            return
        if self.shift is None:
            self._allocate(y.mean(dim=1))
        self._move(y.device)
        z = y - self.shift[:, None]
        self.sums += z.sum(dim=1)
        self.increment_sq += centred_energies(z)
        for i in range(m):
            at = _pair_offset(i, m)
            # In place: no (M-i, d, d) temporary per layer.
            self.cross[at : at + m - i].baddbmm_(z[i].T.expand(m - i, d, n), z[i:])
        self.count += n

    def _move(self, device: torch.device) -> None:
        """Keep everything on the device of the states (e.g. after loading a CPU checkpoint)."""
        if self.shift.device != device:
            for k in ("shift", "sums", "cross", "increment_sq"):
                setattr(self, k, getattr(self, k).to(device))

    def merge(self, other: "PooledCka") -> None:
        """Add another accumulator's tokens (e.g. another rank's), re-expressed on this shift."""
        if other.count == 0:
            return
        if self.shift is None:
            self._allocate(other.shift)
            self.cross.copy_(other.cross)
            self.sums.copy_(other.sums)
            self.increment_sq.copy_(other.increment_sq)
            self.count = other.count
            return
        m = self.shift.shape[0]
        nb = float(other.count)
        delta = other.shift.to(self.shift) - self.shift  # z_self = z_other + delta
        sums_b = other.sums.to(self.shift)
        for i in range(m):
            at = _pair_offset(i, m)
            block = other.cross[at : at + m - i].to(self.shift)
            block = block + delta[i][None, :, None] * sums_b[i:, None, :]
            block = block + sums_b[i][None, :, None] * delta[i:, None, :]
            block = block + nb * delta[i][None, :, None] * delta[i:, None, :]
            self.cross[at : at + m - i] += block
        step = torch.cat([delta[:1], delta[1:] - delta[:-1]])
        step_sums = torch.cat([sums_b[:1], sums_b[1:] - sums_b[:-1]])
        self.increment_sq += other.increment_sq.to(self.shift) + 2.0 * (step * step_sums).sum(-1) + nb * step.square().sum(-1)
        self.sums += sums_b + nb * delta
        self.count += other.count

    def statistics(self) -> dict:
        """``hsic_full``, ``cka_full_energy`` and ``cka_full_tokens`` (see the module docstring)."""
        n = self.count
        if n < 2:
            raise ValueError(f"cka-full needs at least 2 pooled tokens, have {n}")
        m = self.shift.shape[0]
        mean = self.sums / n
        hsic = torch.zeros(m, m, dtype=torch.float64, device=self.shift.device)
        for i in range(m):
            at = _pair_offset(i, m)
            c = self.cross[at : at + m - i] - n * mean[i][None, :, None] * mean[i:, None, :]
            row = c.square().sum(dim=(1, 2))
            hsic[i, i:] = row
            hsic[i:, i] = row
        step_mean = torch.cat([mean[:1], mean[1:] - mean[:-1]])
        energy = self.increment_sq - n * step_mean.square().sum(-1)
        return {
            "hsic_full": (hsic / float(n - 1) ** 2).cpu().numpy(),
            "cka_full_energy": (energy / float(n - 1)).cpu().numpy(),
            "cka_full_tokens": np.asarray(float(n)),
        }

    def copy(self) -> "PooledCka":
        """An independent copy on the same device."""
        out = PooledCka()
        out.count = self.count
        for k in ("shift", "sums", "cross", "increment_sq"):
            value = getattr(self, k)
            setattr(out, k, None if value is None else value.clone())
        return out

    def state(self) -> dict:
        """float64 numpy arrays for saving (empty when nothing was added)."""
        if self.shift is None:
            return {}
        out = {k: getattr(self, k).cpu().numpy() for k in ("shift", "sums", "cross", "increment_sq")}
        out["count"] = np.asarray(float(self.count))
        return out

    @classmethod
    def from_state(cls, arrays: dict) -> "PooledCka":
        acc = cls()
        if arrays:
            for k in ("shift", "sums", "cross", "increment_sq"):
                setattr(acc, k, torch.from_numpy(np.asarray(arrays[k], dtype=np.float64)).clone())
            acc.count = int(arrays["count"])
        return acc
