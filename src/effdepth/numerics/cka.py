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
from .scratch import ScratchBuffers
from .views import ViewSpec, minus_product, parse_views

# Below this, a centred n x n Gram has too few degrees of freedom to compare
# layers (n = 1 is identically zero after centring).
MIN_TOKENS = 4
GRAM_BUDGET_BYTES = 1 << 30
# Rows of a block of the Gram's upper triangle, at least (smaller blocks multiply slower).
BLOCK_ROWS = 64
_SQRT2 = float(np.sqrt(2.0))
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
        z = minus_product(z, z @ v, v.transpose(1, 2))
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
        steps = (y[1:] - y[:-1]).flatten(1)
        out[1:] = torch.linalg.vecdot(steps, steps)
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


def gram_blocks(num_states: int, tokens: int, budget_bytes: int = GRAM_BUDGET_BYTES) -> list:
    """Row blocks ``(start, stop)`` of the upper triangle of the token Gram.

    The Gram is symmetric, so block ``[start, stop)`` forms only its columns
    from ``start`` on; four blocks (of at least :data:`BLOCK_ROWS` rows) save
    about a third of the product, fewer rows when the budget says so.

    >>> gram_blocks(31, 256), gram_blocks(31, 40)
    ([(0, 64), (64, 128), (128, 192), (192, 256)], [(0, 40)])
    """
    rows = min(gram_rows(num_states, tokens, budget_bytes), max(BLOCK_ROWS, -(-tokens // 4)))
    return [(start, min(tokens, start + rows)) for start in range(0, tokens, rows)]


class _Transform:
    """One view transform (token-norm, fitted PCs, or neither) of one sequence: what its token
    sets and the Gram blocks need of it, filled layer by layer by its :class:`_Family`.

    The input is the states minus their sequence mean ``c`` (``shifted``), as
    the shared Gram is. Views without token-norm are blind to that shift (the
    PCs act linearly; a constant is centred away); token-norm divides by the
    raw norms, so it keeps what rebuilding the raw Gram rows ``G' + X'c 1^T +
    1 (X'c)^T + |c|^2`` needs. Never stored: the transformed states themselves.

    Its token sets (all positions, drop-pos0, or both: ``firsts`` ``[0]``,
    ``[1]`` or ``[0, 1]``) are nested, so each layer's sums serve both at once
    (see :class:`_Family`). Each :class:`_TokenSet` is a view of these arrays.
    """

    def __init__(self, shape: tuple, like: torch.Tensor, token_norm: bool, pcs: torch.Tensor | None, firsts: list):
        m, t, d = shape
        new = lambda *shape: like.new_empty(*shape)  # noqa: E731
        self.token_norm = token_norm
        self.norms = self.cross_shift = self.shift_sq = self.proj = None
        if token_norm:
            self.norms, self.cross_shift = new(m, t), new(m, t)  # |x_a| and X'_a . c per layer
        self.pcs = None if pcs is None else pcs.to(like)
        if pcs is not None:
            self.proj = new(m, t, pcs.shape[-1])  # the PC scores (XV)
        self.firsts = sorted(firsts)
        if self.firsts not in ([0], [1], [0, 1]):
            raise ValueError(f"token sets start at position 0 or 1, got {firsts}")
        count = len(self.firsts)
        self.means = new(m, count, d)  # each set's sum, then (see close) its mean zbar, per layer
        self.rows = new(m, t, count)  # Z_a . zbar of every token a, for each set's mean
        self.spread = new(m, count)  # sum over each set's tokens of |s_a|^2 (see _TokenSet)
        self.head = new(m, d) if count == 2 else None  # each layer's explicit step of the first token
        self.counts = torch.tensor([float(t - f) for f in self.firsts], dtype=like.dtype, device=like.device)
        self.sets = {f: _TokenSet(self, i, f) for i, f in enumerate(self.firsts)}

    def add_steps(self, layer: int, steps: torch.Tensor) -> None:
        """Each set's sum of squared steps but the first token's, which is kept (see :meth:`close`)."""
        tail = steps[self.firsts[-1] :].reshape(-1)
        torch.dot(tail, tail, out=self.spread[layer, -1])
        if self.head is not None:
            self.head[layer] = steps[0]

    def view_layer(self, layer: int, shifted: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        """Layer ``layer``'s view states ``(T, d)`` again (to rounding: token-norm rebuilds the unshifted states)."""
        z = shifted[layer]
        if self.token_norm:
            z = (z + shift[layer]) / self.norms[layer][:, None]
        if self.pcs is not None:
            z = minus_product(z, self.proj[layer], self.directions(layer).T)
        return z

    def directions(self, layer: int) -> torch.Tensor:
        """The fitted directions ``(d, k)`` for ``layer`` (one set for every layer when shared)."""
        return self.pcs[layer if self.pcs.shape[0] > 1 else 0]

    def close(self) -> list:
        """After the last layer: the sums become means, the first token's squared steps join the
        all-positions set's; returns each set's :meth:`_TokenSet.cancelled`."""
        if self.head is not None:
            torch.add(self.spread[:, 1], self.head.square().sum(-1), out=self.spread[:, 0])
            self.head = None
        self.means /= self.counts[:, None]
        self.rows /= self.counts
        for token_set in self.sets.values():
            token_set.expand_energy()
        return [token_set.cancelled() for token_set in self.sets.values()]

    def finish(self, shifted: torch.Tensor, shifts: torch.Tensor, redo: dict) -> None:
        """Close every token set, redoing from ``shifted`` the layers ``redo[first]`` whose energies cancel."""
        if self.token_norm:
            self.shift_sq = shifts.square().sum(-1)  # |c|^2 per layer
        for first, token_set in self.sets.items():
            token_set.finish(lambda layer, first=first: self.view_layer(layer, shifted, shifts)[first:], redo[first])


class _Family:
    """The transforms of one sequence that act on the same states, the shifted ones or (token-norm)
    those normalised, fed layer by layer (:meth:`add_raw_layer`, then :meth:`add_layer`) while
    that layer is in cache.

    One without PCs (the root, when a view asks for it) and any with fitted PCs
    ``V``; the PC ones follow from the root's work, each pass over the states
    made once: their sums are the root's minus their projection onto ``V``
    (sums are linear), their explicit steps the root's minus the change of the
    removed part, ``s - P_l V_l^T + P_{l-1} V_{l-1}^T`` (each term no larger
    than the states, so nothing cancels that forming the PC-removed states
    would not), and one product of the states with every sum, every ``V`` and
    (for token-norm) the shift gives every row term, PC score and ``X'c``. The
    sums of a nested pair of token sets are the drop-pos0 set's plus the first
    token (additions only).
    """

    def __init__(self, members: list, cross: _Transform | None = None, cross_elsewhere: bool = False):
        self.members = members
        self.token_norm = members[0].token_norm
        self.root = next((t for t in members if t.pcs is None), None)
        self.removed = [t for t in members if t.pcs is not None]
        self.firsts = sorted({f for t in members for f in t.firsts})
        self.cross = cross  # a token-norm transform whose X'c this family's product forms
        self.cross_elsewhere = cross_elsewhere  # token-norm: X'c formed by the shifted states' family
        self._previous = self._normed = None
        # Columns of the one product per layer: every set's sum, then per PC transform its
        # directions and its sets' sums, then the shift.
        at, self._spans = len(self.firsts), []
        for t in self.removed:
            k, count = t.pcs.shape[-1], len(t.firsts)
            self._spans.append((slice(at, at + k), slice(at + k, at + k + count), self._sums_of(t)))
            at += k + count
        self._width = at + (cross is not None)
        self._root_alone = self.root is not None and self._width == len(self.firsts)
        # The root's rows of the family's sums: all of them, in order, unless a PC view needs a set it has not.
        if self.root is not None:
            self._root_taken = slice(0, len(self.firsts)) if self.root.firsts == self.firsts else self._sums_of(self.root)

    def _sums_of(self, t: _Transform) -> list:
        """Rows of the family's sums that ``t``'s token sets take."""
        return [self.firsts.index(f) for f in t.firsts]

    def add_raw_layer(self, layer: int, raw: torch.Tensor) -> None:
        """Take layer ``layer``'s states ``(T, d)`` before the shift: token-norm divides them as they
        are (rebuilding them from the shifted ones would take one more pass)."""
        if self.token_norm:
            norms = self.members[0].norms  # shared by every member (see _families)
            norms[layer] = _safe_norms(raw)
            self._normed = raw / norms[layer][:, None]

    def add_layer(self, layer: int, shifted: torch.Tensor, shift: torch.Tensor) -> None:
        """Take layer ``layer``'s shifted states ``(T, d)`` and its shift ``c`` ``(d,)`` (after
        :meth:`add_raw_layer`)."""
        z = shifted
        if self.token_norm:
            z, self._normed = self._normed, None
            if not self.cross_elsewhere:  # no family of the shifted states forms X'c in its product
                torch.mv(shifted, shift, out=self.members[0].cross_shift[layer])
        # The explicit differences (the states themselves at layer 0): consecutive states nearly
        # coincide, so their steps are never expanded.
        steps = z if self._previous is None else z - self._previous
        if self._root_alone:  # the usual default view: straight into the root's arrays
            sums = self._add_sums(z, self.root.means[layer])
            torch.matmul(z, sums.T, out=self.root.rows[layer])
            self.root.add_steps(layer, steps)
            self._previous = z
            return
        columns = z.new_empty(self._width, z.shape[-1])
        sums = self._add_sums(z, columns[: len(self.firsts)])
        for t, (scores, removed_sums, taken) in zip(self.removed, self._spans):
            v = t.directions(layer)
            columns[scores] = v.T
            own = sums[taken]
            columns[removed_sums] = minus_product(own, own @ v, v.T)
        if self.cross is not None:
            columns[-1] = shift
        # (T, width): one pass over the states for every projection (F.linear: the fast route for a
        # thin right-hand side).
        product = torch.nn.functional.linear(z, columns)
        if self.cross is not None:
            self.cross.cross_shift[layer] = product[:, -1]
        if self.root is not None:
            self.root.means[layer] = sums[self._root_taken]
            self.root.rows[layer] = product[:, self._root_taken]
            self.root.add_steps(layer, steps)
        for t, (scores, removed_sums, _) in zip(self.removed, self._spans):
            proj = t.proj[layer]
            proj.copy_(product[:, scores])
            v = t.directions(layer)
            own = columns[removed_sums]
            # Rows of the PC-removed states: Z' m = Z m - P (V^T m), V^T m at rounding level.
            t.rows[layer] = product[:, removed_sums] - proj @ (v.T @ own.T)
            t.means[layer] = own
            removed = minus_product(steps, proj, v.T)
            if layer > 0:  # plus the part removed from the layer before
                minus_product(removed, -t.proj[layer - 1], t.directions(layer - 1).T, in_place=True)
            t.add_steps(layer, removed)
        self._previous = z  # the next layer's difference needs it

    def _add_sums(self, z: torch.Tensor, sums: torch.Tensor) -> torch.Tensor:
        """Each token set's sum of ``z`` into ``sums`` (one row per set): the last set's, plus the
        first token for all positions (an addition, so nothing cancels)."""
        torch.sum(z[self.firsts[-1] :], dim=0, out=sums[-1])
        if len(self.firsts) == 2:
            torch.add(sums[1], z[0], out=sums[0])
        return sums


def _families(transforms: list) -> list:
    """The :class:`_Family` of each group of transforms acting on the same states (token-norm
    ones share their norms and ``X'c``, which depend on the states alone)."""
    groups: dict = {}
    for t in transforms:
        groups.setdefault(t.token_norm, []).append(t)
    normed = groups.get(True, [])
    for t in normed[1:]:
        t.norms, t.cross_shift = normed[0].norms, normed[0].cross_shift
    cross = normed[0] if normed else None
    families = [_Family(groups[False], cross=cross)] if False in groups else []
    if normed:
        families.append(_Family(normed, cross_elsewhere=bool(families)))
    return families


class _TokenSet:
    """What centring one token set's Gram rows needs, and the energies cka sees: a view of its
    :class:`_Transform`'s per-layer sums.

    With ``Z`` the view's states over the set's n tokens and ``zbar`` their
    mean, the centred Gram is ``K_ab = Z_a.Z_b - Z_a.zbar - Z_b.zbar +
    |zbar|^2``: the row terms come from Z (n x d work per layer), the n x n
    part from the shared Gram, so any block can be centred on its own.

    The energies ``|Y_0|^2`` and ``|Y_l - Y_{l-1}|^2`` of the centred states
    take no pass of their own: with ``s_a`` a token's explicit step (its state
    at layer 0) and ``sbar`` their mean (the change of ``zbar``), ``sum_a |s_a -
    sbar|^2 = sum_a |s_a|^2 - n |sbar|^2``. That cancels only where the tokens
    share most of their step (a dominant first token moves the rest of a
    drop-pos0 set together); a layer losing more than
    :data:`ENERGY_CANCELLATION` allows is redone from explicit differences.
    """

    def __init__(self, transform: _Transform, index: int, first: int):
        self.n = transform.rows.shape[1] - first
        self.means = transform.means[:, index]  # (M, d)
        self.row_mean = transform.rows[:, first:, index]  # (M, n): Z_a . zbar
        self.spread = transform.spread[:, index]  # sum_a |s_a|^2: what the energy's expansion cancels against
        self.energy = None

    def expand_energy(self) -> None:
        """Every layer's energy ``sum_a |s_a|^2 - n |sbar|^2``, once the means are complete."""
        moved = torch.cat([self.means[:1], self.means[1:] - self.means[:-1]])  # sbar per layer
        self.energy = self.spread - self.n * moved.square().sum(-1)

    def cancelled(self) -> torch.Tensor:
        """``(M,)``: the layers whose expanded energy lost more than :data:`ENERGY_CANCELLATION` allows."""
        return self.spread > ENERGY_CANCELLATION * self.energy

    def finish(self, view_states, redo: list) -> None:
        """Redo the energies of the layers ``redo`` (see :meth:`cancelled`) from ``view_states(layer)``
        (the set's ``(n, d)`` view states)."""
        for layer in redo:
            self.energy[layer] = self._explicit_energy(layer, view_states)
        self.grand = self.means.square().sum(-1)  # |zbar|^2
        self.energy /= self.n - 1
        self.means = self.spread = None

    def _explicit_energy(self, layer: int, view_states) -> torch.Tensor:
        """|Y_l - Y_{l-1}|^2 (|Y_0|^2 at layer 0) from the explicit differences of the view's states."""
        if layer == 0:
            centred = view_states(0) - self.means[0]
        else:
            centred = (view_states(layer) - view_states(layer - 1)) - (self.means[layer] - self.means[layer - 1])
        flat = centred.reshape(-1)
        return torch.dot(flat, flat)


#: Most cancellation the expanded energies of :class:`_TokenSet` may lose (their sum of squared
#: steps over the result): about 4 of float64's 16 digits, as :data:`DROP_FIRST_CANCELLATION`.
#: Residual streams stay far below it (under 10 in every SmolLM2 layer and view).
ENERGY_CANCELLATION = 1e4


def _centred_block(gram: torch.Tensor, start: int, transform: _Transform, first: int) -> torch.Tensor | None:
    """The token set's centred Gram over the shared block's rows and columns (rows from ``start``,
    columns from ``start`` to the end), as a fresh array: the shared block serves every view."""
    stop = start + gram.shape[1]
    lo = max(start, first)
    if lo >= stop:
        return None
    token_set = transform.sets[first]
    g = gram[:, lo - start :, lo - start :]
    rows, cols = slice(lo, stop), slice(lo, None)
    if transform.norms is not None:
        k = g + transform.cross_shift[:, rows, None]
        k += (transform.cross_shift[:, cols] + transform.shift_sq[:, None])[:, None, :]
        k /= transform.norms[:, rows, None]
        k /= transform.norms[:, None, cols]
    else:
        k = g.clone()
    if transform.proj is not None:
        minus_product(k, transform.proj[:, rows], transform.proj[:, cols].transpose(1, 2), in_place=True)
    a, b = lo - first, stop - first  # the rows' indices among the set's tokens
    k -= token_set.row_mean[:, a:b, None]
    k -= (token_set.row_mean[:, a:] - token_set.grand[:, None])[:, None, :]
    return k


def sequence_cka(states: torch.Tensor, views: list, gram_budget_bytes: int = GRAM_BUDGET_BYTES,
                 scratch: ScratchBuffers | None = None, overwrite: bool = False) -> list:
    """cka statistics (:data:`CKA_KEYS`) of one sequence ``(M, T, d)`` for each :class:`GramView`.

    One token Gram per layer (of the states minus their sequence mean) feeds
    every view. It is formed in row blocks of its upper triangle (it is
    symmetric), fewer rows at a time when M * T^2 float64 does not fit
    ``gram_budget_bytes``; nothing is computed twice and the result is the
    same. A view with fewer than :data:`MIN_TOKENS` tokens gets zeros and
    ``cka_sequences = 0``. ``scratch`` lends the float64 copy of the states
    (see :mod:`effdepth.numerics.scratch`); with ``overwrite``, contiguous
    float64 states (a work buffer the caller is done with) are shifted in
    place instead of copied.

    >>> q = torch.linalg.qr(torch.randn(8, 8, dtype=torch.float64))[0]
    >>> x = torch.stack([q[:, :2], 2 * q[:, :2]])          # S_1 = 2 S_0: same geometry
    >>> h = sequence_cka(x, [GramView()])[0]["hsic"]
    >>> round(float(h[0, 1] / np.sqrt(h[0, 0] * h[1, 1])), 12)
    1.0
    """
    m, t, d = states.shape
    wanted: dict = {}  # one transform per distinct (token-norm, PCs), with the token sets it serves
    plans = []
    for v in views:
        if t - v.first < MIN_TOKENS:
            plans.append(None)
            continue
        key = (v.token_norm, None if v.pcs is None else id(v.pcs))
        wanted.setdefault(key, (v, set()))[1].add(v.first)
        plans.append((key, v.first))
    like = states.new_empty(0, dtype=torch.float64)
    transforms = {key: _Transform((m, t, d), like, v.token_norm, v.pcs, sorted(firsts)) for key, (v, firsts) in wanted.items()}
    in_place = overwrite and states.dtype == torch.float64 and states.is_contiguous()
    # Not `scratch or ...`: an empty ScratchBuffers is falsy (it has a length), and a fresh one
    # per sequence would fault in its pages every time.
    scratch = ScratchBuffers() if scratch is None else scratch
    shifts = like.new_empty(m, d)
    shifted = _shifted(states, scratch, list(transforms.values()), in_place, shifts)
    # token-norm sets are centred from a Gram that is not: where that would cancel, they are formed apart.
    apart = _cancelling_sets(transforms)
    hsic = {plan: shifted.new_zeros(m, m) for plan in plans if plan is not None and plan not in apart}
    # A token-norm drop-pos0 set whose transform also serves all positions follows from that
    # set's centred Gram (see drop_first_hsic); only its row 0 is kept for it.
    derived = {(key, 1) for key, first in hsic if first == 1 and (key, 0) in hsic and transforms[key].token_norm}
    # Without token-norm a massive first token (common at position 0) would cancel most digits
    # there. Instead the drop-pos0 set is summed from its uncentred Gram and centred afterwards
    # (see _centre_sums), and an all-positions set next to it adds its row 0 to those sums (see
    # all_positions_hsic): one pass over the Gram serves both.
    lifted = {(key, 1) for key, first in hsic if first == 1 and not transforms[key].token_norm}
    from_lifted = {(key, 0) for key, _ in lifted if (key, 0) in hsic}
    keep_rows = derived | {(key, 1) for key, _ in from_lifted}
    first_rows = _hsic_blocks(shifted, transforms, hsic, skip=derived | from_lifted, budget=gram_budget_bytes,
                              keep_first_rows=keep_rows, lifted=lifted)
    undone = set()
    for key, first in derived:
        value = drop_first_hsic(hsic[(key, 0)], first_rows[key], t)
        if value is None:
            undone.add((key, first))  # cancels too much: formed from its own centred Gram instead
        else:
            hsic[(key, first)] = value
    for key, first in lifted:
        sums, sets = hsic[(key, first)], transforms[key].sets
        if (key, 0) in from_lifted:
            hsic[(key, 0)] = all_positions_hsic(sums, first_rows[key])
            _add_centring(hsic[(key, 0)], sets[0])  # the rounding left of the sequence mean
        if not _centre_sums(sums, sets[first]):
            undone.add((key, first))
            sums.zero_()
    # Shifted by the mean over all positions, a set without a dominant first token would still
    # cancel in centring; it is measured as a sequence of its own tokens, about its own mean.
    original = None if in_place else states
    redone = {plan: _own_tokens_cka(original, shifted, shifts, wanted[plan[0]][0], plan[1], gram_budget_bytes)
              for plan in undone | apart}
    return [empty_cka_unit(m) if plan is None else redone.get(plan) or _cka_unit(transforms[plan[0]].sets[plan[1]], hsic[plan])
            for plan in plans]


def _own_tokens_cka(states: torch.Tensor | None, shifted: torch.Tensor, shifts: torch.Tensor, view: GramView,
                    first: int, budget: int) -> dict:
    """The cka unit of ``view``'s tokens from ``first`` on, as a sequence of their own, centred
    about their own mean: from ``states``, or (``None``: shifted in place) rebuilt from the
    shifted ones, with the rounding of the shift."""
    if states is None:
        own = shifted[:, first:] + shifts[:, None, :]
    else:
        own = states[:, first:].to(torch.float64, copy=True)
    if view.token_norm:  # normalised here, so nothing is rebuilt from a shift
        own /= _safe_norms(own)[..., None]
    alone = GramView(first=0, pcs=view.pcs)
    return sequence_cka(own, [alone], budget, scratch=ScratchBuffers(), overwrite=True)[0]


def _cancelling_sets(transforms: dict) -> set:
    """The token-norm sets ``(key, first)`` whose centred Gram, from the shared one, would lose more
    than :data:`DROP_FIRST_CANCELLATION` allows (views without token-norm are centred before the
    Gram, or guarded by :func:`_centre_sums`), from one look at the device. Two ways: rebuilding
    the raw Gram rows (see :class:`_Transform`) adds terms of the size |c|^2 of the shift, the
    result being of the size of the smallest token's energy (a token that dwarfs the rest); and
    centring unit vectors that nearly coincide leaves 1 - |zbar|^2 of their unit energy."""
    plans, flags = [], []
    for key, transform in transforms.items():
        if not transform.token_norm:
            continue
        rebuild = (transform.shift_sq > DROP_FIRST_CANCELLATION * transform.norms.square().amin(dim=1)).any()
        for first, token_set in transform.sets.items():
            plans.append((key, first))
            flags.append(rebuild | ((1.0 - token_set.grand) * DROP_FIRST_CANCELLATION < 1.0).any())
    return {plan for plan, cancels in zip(plans, torch.stack(flags).tolist() if flags else []) if cancels}


def _hsic_blocks(shifted: torch.Tensor, transforms: dict, hsic: dict, *, skip=(), budget: int,
                 keep_first_rows=(), lifted=()) -> dict:
    """Add <K_i, K_j> of each token set in ``hsic`` (all but ``skip``), one
    shared row block of the Gram at a time; for a set in ``lifted`` (a drop-pos0 set without
    token-norm) the sums of its uncentred Gram instead. Returns row 0 ``(M, T)`` for each
    drop-pos0 set in ``keep_first_rows``, by transform key: of the all-positions centred Gram
    (token-norm), or of the view's uncentred Gram (a lifted set)."""
    m, t, _ = shifted.shape
    plans = [p for p in hsic if p not in skip]
    # All positions without token-norm: the view's states keep the shifted states' zero mean, so
    # their Gram needs no centring pass (see _add_centring); a lifted set is centred after the
    # sums. The raw one, taking the shared block itself, goes last.
    uncentred = [p for p in plans if (p[1] == 0 or p in lifted) and not transforms[p[0]].token_norm]
    plans.sort(key=lambda p: p in uncentred and transforms[p[0]].proj is None)
    first_rows: dict = {}
    for start, stop in gram_blocks(m, t, budget):
        gram = shifted[:, start:stop] @ shifted[:, start:].transpose(1, 2)  # the one shared product
        for key, first in plans:
            if (key, first) in uncentred:
                k = _view_block(gram, start, transforms[key])
                if start == 0 and (key, first) in keep_first_rows:
                    first_rows[key] = k[:, 0].clone()
                k = k[:, first:, first:] if start < first else k
                if k.shape[1] == 0:
                    continue
            else:
                k = _centred_block(gram, start, transforms[key], first)
            if k is None:
                continue
            if start == 0 and first == 0 and (key, 1) in keep_first_rows:
                first_rows[key] = k[:, 0].clone()
            # Off the diagonal block, each entry stands for itself and its mirror image.
            k[:, :, stop - max(start, first) :] *= _SQRT2
            flat = k.reshape(m, -1)
            hsic[(key, first)].addmm_(flat, flat.T)
    for key, first in uncentred:
        if first == 0:
            _add_centring(hsic[(key, first)], transforms[key].sets[first])
    return first_rows


def _view_block(gram: torch.Tensor, start: int, transform: _Transform) -> torch.Tensor:
    """The view's uncentred Gram over the shared block (the block itself when the view does not
    change the states: it is then the last to use it)."""
    if transform.proj is None:
        return gram
    rows = slice(start, start + gram.shape[1])
    return minus_product(gram, transform.proj[:, rows], transform.proj[:, start:].transpose(1, 2))


def _add_centring(hsic: torch.Tensor, token_set: _TokenSet) -> None:
    """Turn <G_i, G_j> of uncentred Grams into <H G_i H, H G_j H>.

    With G = Z Z^T over n tokens of mean zbar, G 1 = n Z zbar and 1^T G 1 =
    n^2 |zbar|^2, so <HAH, HBH> = <A, B> - (2/n) (A1).(B1) + (1^T A 1)(1^T B 1)/n^2
    becomes ``- 2n rm_i.rm_j + n^2 g_i g_j`` (``row_mean`` rm, ``grand`` g). Used
    where zbar is the rounding left of a mean already subtracted, so nothing cancels.
    """
    n = float(token_set.n)
    rows = token_set.row_mean
    hsic.addmm_(rows, rows.T, alpha=-2.0 * n)
    hsic.add_(torch.outer(token_set.grand, token_set.grand), alpha=n * n)


#: Most cancellation allowed when deriving a drop-pos0 HSIC from the all-positions one, or when
#: centring a drop-pos0 set's sums afterwards: its largest term may exceed the result by this
#: factor (about 4 of float64's 16 digits lost).
DROP_FIRST_CANCELLATION = 1e4


def _centre_sums(sums: torch.Tensor, token_set: _TokenSet) -> bool:
    """Turn <G_i, G_j> of a token set's uncentred Grams into <K_i, K_j> in place (see
    :func:`_add_centring`); ``False`` (``sums`` then meaningless) when that cancels more than
    :data:`DROP_FIRST_CANCELLATION` allows.

    Checking the diagonal is enough: each off-diagonal term is at most the geometric mean of
    its diagonal terms (Cauchy-Schwarz), so its rounding stays within that factor of
    sqrt(h_ii h_jj), the scale cka divides by.
    """
    largest = sums.diagonal().clone()
    _add_centring(sums, token_set)
    return bool((largest <= DROP_FIRST_CANCELLATION * sums.diagonal()).all())


def all_positions_hsic(after_first: torch.Tensor, first_row: torch.Tensor) -> torch.Tensor:
    """<G_i, G_j> over all tokens from the sums over the tokens after the first ``(M, M)`` and
    row 0 of each layer's Gram ``(M, T)``: ``+ 2 r_i.r_j + c_i c_j`` (r = row 0 after its first
    entry, c that entry). Only additions of terms each bounded by their diagonal (see
    :func:`_centre_sums`): nothing cancels, however large the first token.

    >>> x = torch.randn(2, 6, 3, dtype=torch.float64); g = x @ x.transpose(1, 2)
    >>> after = torch.einsum("iab,jab->ij", g[:, 1:, 1:], g[:, 1:, 1:])
    >>> bool(torch.allclose(all_positions_hsic(after, g[:, 0]), torch.einsum("iab,jab->ij", g, g)))
    True
    """
    rows, corner = first_row[:, 1:], first_row[:, 0]
    out = torch.addmm(after_first, rows, rows.T, alpha=2.0)
    return out.add_(torch.outer(corner, corner))


def drop_first_hsic(full: torch.Tensor, first_row: torch.Tensor, tokens: int) -> torch.Tensor | None:
    """<K'_i, K'_j> of the tokens after the first, from the all-token <K_i, K_j> ``(M, M)`` and
    row 0 of each layer's centred Gram ``(M, T)``; ``None`` when that cancels too much.

    K' = H' K[1:, 1:] H' (centring again over the n' = T - 1 kept tokens, with
    K 1 = 0), so with r_i = K_i[0, :] and c_i = K_i[0, 0]:
    <K'_i, K'_j> = <K_i, K_j> - 2 (1 + 1/n') r_i.r_j + (1 + 1/n')^2 c_i c_j.
    O(M^2 T) instead of another pass over the M T^2 Gram. A dominant first
    token (massive activations) makes the terms much larger than the result,
    so :func:`sequence_cka` derives it only for token-normed states (every
    token of norm 1), and beyond :data:`DROP_FIRST_CANCELLATION` forms it
    directly all the same.

    >>> x = torch.randn(2, 9, 3, dtype=torch.float64)
    >>> k = torch.stack([_centred(g) for g in x @ x.transpose(1, 2)])
    >>> k1 = torch.stack([_centred(g[1:, 1:]) for g in x @ x.transpose(1, 2)])
    >>> got = drop_first_hsic(torch.einsum("iab,jab->ij", k, k), k[:, 0], 9)
    >>> bool(torch.allclose(got, torch.einsum("iab,jab->ij", k1, k1), rtol=1e-12))
    True
    """
    scale = 1.0 + 1.0 / (tokens - 1)
    rows = first_row @ first_row.T
    corner = first_row[:, 0]
    out = full - (2.0 * scale) * rows + (scale * scale) * torch.outer(corner, corner)
    largest = torch.maximum(full.diagonal(), (2.0 * scale) * rows.diagonal())
    if not bool((largest <= DROP_FIRST_CANCELLATION * out.diagonal()).all()):
        return None
    return out


def _centred(gram: torch.Tensor) -> torch.Tensor:
    """H G H of one n x n Gram (for checks)."""
    n = gram.shape[-1]
    h = torch.eye(n, dtype=gram.dtype, device=gram.device) - 1.0 / n
    return h @ gram @ h


def _shifted(states: torch.Tensor, scratch: ScratchBuffers, transforms: list, in_place: bool,
             shifts: torch.Tensor) -> torch.Tensor:
    """The states in float64 minus their sequence mean (each layer's into ``shifts`` ``(M, d)``),
    one layer at a time: each layer's conversion, mean, subtraction and every transform's work
    on it stay in cache."""
    m, t, d = states.shape
    shifted = states if in_place else scratch.take("cka-shifted", (m, t, d), device=states.device)
    families = _families(transforms)
    for layer in range(m):
        z = shifted[layer]
        shift = shifts[layer]
        if not in_place:
            z.copy_(states[layer])
        torch.mean(z, dim=0, out=shift)
        for family in families:
            family.add_raw_layer(layer, z)
        z -= shift
        for family in families:
            family.add_layer(layer, z, shift)
    # Which layers' energies cancel, for every token set of every transform: one look at the device.
    masks = [mask for transform in transforms for mask in transform.close()]
    rows = iter(torch.stack(masks).tolist() if masks else [])
    for transform in transforms:
        redo = {first: [layer for layer, bad in enumerate(next(rows)) if bad] for first in transform.sets}
        transform.finish(shifted, shifts, redo)
    return shifted


def _cka_unit(token_set: _TokenSet, hsic: torch.Tensor) -> dict:
    return {
        "hsic": (hsic / float(token_set.n - 1) ** 2).cpu().numpy(),
        "cka_energy": token_set.energy.cpu().numpy(),
        "cka_sequences": np.asarray(1.0),
        "cka_tokens": np.asarray(float(token_set.n)),
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
            f"cka-full needs {binary_size(needed)} ({sets} view token set(s) x {pairs} layer pairs x "
            f"{hidden_size}^2 float64 cross-products), over its {binary_size(budget_bytes)} budget; "
            "use --similarity cka (per-sequence linear CKA, the default) or fewer views"
        )
    return needed


def binary_size(n: int) -> str:
    """Bytes in the largest binary unit that keeps a number of at least 1 (as --max-memory takes them).

    >>> binary_size(1 << 30), binary_size(3 * 2**20 // 2), binary_size(1000), binary_size(0)
    ('1.0 GiB', '1.5 MiB', '1000 B', '0 B')
    """
    for unit, scale in (("GiB", _GIB), ("MiB", float(1 << 20)), ("KiB", 1024.0)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


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
        self.commit(self.prepare(y))

    def prepare(self, y: torch.Tensor) -> tuple | None:
        """Everything an update of ``y`` allocates (the shifted states, their sums and energies), for
        :meth:`commit`: a failure here (out of memory) leaves the sums as they were."""
        y = y.to(torch.float64)
        if y.shape[1] == 0:
            return None
        if self.shift is None:
            self._allocate(y.mean(dim=1))  # zero sums over zero tokens: valid whatever follows
        self._move(y.device)
        z = y - self.shift[:, None]
        return z, z.sum(dim=1), centred_energies(z)

    def commit(self, prepared: tuple | None) -> None:
        """Add a :meth:`prepare` d update, in place only (no allocation, so it cannot fail half-way)."""
        if prepared is None:
            return
        z, sums, energies = prepared
        m, n, d = z.shape
        self.sums += sums
        self.increment_sq += energies
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
