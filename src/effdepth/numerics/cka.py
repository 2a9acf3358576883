"""Token-mode linear CKA between layers: the cross-sequence estimator (docs/method.md#cka).

Sequences are paired in the order they are measured ((0, 1), (2, 3), ...).
For a pair (p, q), each layer's view states are centred over each
sequence's own tokens (``Y_p``, ``Y_q``), and with the cross Gram
``C^l = Y_p^l (Y_q^l)^T`` (T_p x T_q)

    h_ij = <C^i, C^j>_F / (T_p T_q),    sim_ij = sum_pairs h_ij / sqrt(sum h_ii sum h_jj).

No token is ever compared with itself, so the estimator has no self-pair
bias: an isotropic null stream lands on F_N, where the per-sequence Gram
``<Y Y^T, Y Y^T>`` lands well below it once d is comparable with T. The
same products of the increments (``F^0 = Y^0``, ``F^l = Y^l - Y^{l-1}``)
give each pair's update HSIC; the square roots of its summed diagonal are
the covariance norms n_l the matched references need (docs/method.md,
section 5.2). Pairs are the bootstrap units.

Precision: the centred states are multiplied in float32 (float64 when the
states are float64), never an uncentred Gram centred afterwards, and the
inner products of the cross Grams are summed in float64.

Each sequence goes through the view's one transform
(:meth:`~effdepth.numerics.views.ViewSpec.view_states`: the positions it
keeps, token-norm, the fitted directions removed), less the steps that only
shift a layer's tokens alike (``centred_away``: ``center``), which the
per-sequence centring removes anyway. A pair where either sequence has
fewer than :data:`MIN_TOKENS` tokens in a view is left out of that view
(``cka_pairs`` 0) and its sequences counted; a view that keeps fewer than
that of any sequence (pos0-only) never has a value (:class:`ViewUnavailable`).

Keys of a pair unit: ``hsic`` (M, M) and ``update_hsic`` (M, M) above,
``cka_pairs`` () 1 when the pair entered the view, ``cka_tokens`` () its
T_p + T_q.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import EffdepthError
from .similarities.token import MIN_TOKENS  # the kernel similarities' fewest tokens, kept with their specs
from .statistics import UnitStatistics
from .views import ViewSpec, parse_views

#: Bytes of cross-Gram rows held at once (float32 rows and their float64 copy).
GRAM_BUDGET_BYTES = 1 << 30
CKA_KEYS = ("hsic", "update_hsic", "cka_pairs", "cka_tokens")


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


def require_cka_view(spec: ViewSpec, similarity: str = "cka") -> None:
    """Raise :class:`ViewUnavailable` for a view that can never have a cka value: one that keeps
    fewer than :data:`MIN_TOKENS` tokens of any sequence (pos0-only).

    >>> require_cka_view(parse_views(["drop-pos0"])[0])
    >>> require_cka_view(parse_views(["pos0-only"])[0])
    Traceback (most recent call last):
    ...
    effdepth.numerics.cka.ViewUnavailable: view 'pos0-only' has no cka value: pos0-only keeps one token per sequence; cka needs at least 4
    """
    if not has_cka_value(spec):
        kept = "one token" if spec.max_tokens == 1 else f"{spec.max_tokens} tokens"
        raise ViewUnavailable(
            spec.name, similarity, f"{spec.selection} keeps {kept} per sequence; cka needs at least {MIN_TOKENS}"
        )


def has_cka_value(spec: ViewSpec) -> bool:
    """Whether a view can have a cka value: it keeps :data:`MIN_TOKENS` or more tokens of a long enough sequence.

    >>> [has_cka_value(v) for v in parse_views("default,pos0-only")]
    [True, False]
    """
    return spec.max_tokens is None or spec.max_tokens >= MIN_TOKENS


def cka_token_sets(views) -> dict:
    """The distinct token sets cka needs, ``(stream, selection) -> first view``; pos0-only has none.

    Views that share a stream and a selection (e.g. written in another order)
    share one set of cka statistics.

    >>> sorted(str(s) for _, s in cka_token_sets("default,drop-pos0,pos0-only"))
    ['None', 'drop-pos0']
    """
    out: dict = {}
    for v in parse_views(views):
        if has_cka_value(v):
            out.setdefault(cka_set_key(v), v)
    return out


def cka_set_key(spec: ViewSpec) -> tuple:
    """Key of a view's cka token set: its stream and its selection.

    >>> a, b = parse_views("token-norm+drop-pos0,drop-pos0+token-norm")
    >>> cka_set_key(a) == cka_set_key(b)
    True
    """
    return (spec.stream, spec.selection)


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision of the products: float64 for float64 states, float32 for anything else.

    >>> work_dtype(torch.bfloat16), work_dtype(torch.float64)
    (torch.float32, torch.float64)
    """
    return torch.float64 if dtype == torch.float64 else torch.float32


def centred_view_states(states: torch.Tensor, spec: ViewSpec, fit: dict | None = None) -> torch.Tensor | None:
    """One sequence's view states ``(M, n, d)`` (``fit``: the view's, when it has one) centred over
    its own tokens, in :func:`work_dtype`; ``None`` when the view keeps fewer than
    :data:`MIN_TOKENS` of its tokens.

    The mean is summed in float64 before it is subtracted, so a massive token does not round the others away.

    >>> y = centred_view_states(torch.randn(3, 6, 4), parse_views("drop-pos0")[0])
    >>> tuple(y.shape), y.dtype, bool(y.sum(dim=1).abs().max() < 1e-5)
    ((3, 5, 4), torch.float32, True)
    """
    if spec.select(states).shape[1] < MIN_TOKENS:
        return None
    z = spec.view_states(states, fit, dtype=work_dtype(states.dtype), centred=True)
    mean = z.sum(dim=1, dtype=torch.float64) / z.shape[1]
    return z - mean.to(z.dtype)[:, None, :]


def increments(y: torch.Tensor) -> torch.Tensor:
    """``F^0 = Y^0`` and ``F^l = Y^l - Y^{l-1}`` of states ``(M, n, d)``.

    >>> increments(torch.tensor([[[1.0]], [[3.0]], [[2.0]]])).flatten().tolist()
    [1.0, 2.0, -1.0]
    """
    return torch.cat([y[:1], y[1:] - y[:-1]])


def cross_hsic(yp: torch.Tensor, yq: torch.Tensor, budget_bytes: int = GRAM_BUDGET_BYTES) -> torch.Tensor:
    """``h_ij = <Y_p^i Y_q^iT, Y_p^j Y_q^jT>_F / (T_p T_q)`` of centred states ``(M, T_p, d)`` and
    ``(M, T_q, d)``, float64 ``(M, M)``.

    The cross Grams are formed a block of p's tokens at a time, as many as fit
    ``budget_bytes``; their inner products are summed in float64.

    >>> y = torch.randn(2, 5, 3, dtype=torch.float64)
    >>> h = cross_hsic(y, 2 * y)
    >>> bool(torch.allclose(h, h.T)), bool(h[0, 1] ** 2 <= h[0, 0] * h[1, 1] * (1 + 1e-12))
    (True, True)
    """
    m, tp, _ = yp.shape
    tq = yq.shape[1]
    rows = int(max(1, min(tp, budget_bytes // (12 * m * max(tq, 1)))))
    out = torch.zeros(m, m, dtype=torch.float64, device=yp.device)
    right = yq.transpose(1, 2)
    for start in range(0, tp, rows):
        c = torch.bmm(yp[:, start : start + rows], right).flatten(1).to(torch.float64)
        out += c @ c.T
    return out / float(tp * tq)


def pair_cka(yp: torch.Tensor, yq: torch.Tensor, budget_bytes: int = GRAM_BUDGET_BYTES) -> dict:
    """The cka unit (:data:`CKA_KEYS`) of one pair of :func:`centred_view_states`.

    >>> q = torch.linalg.qr(torch.randn(8, 8, dtype=torch.float64))[0][:, 1:3]
    >>> q = q - q.mean(0)                                    # any centred states
    >>> y = torch.stack([q, 2 * q])                          # S_1 = 2 S_0: the same geometry
    >>> h = pair_cka(y, y)["hsic"]
    >>> round(float(h[0, 1] / np.sqrt(h[0, 0] * h[1, 1])), 12)
    1.0
    """
    return {
        "hsic": cross_hsic(yp, yq, budget_bytes).cpu().numpy(),
        "update_hsic": cross_hsic(increments(yp), increments(yq), budget_bytes).cpu().numpy(),
        "cka_pairs": np.asarray(1.0),
        "cka_tokens": np.asarray(float(yp.shape[1] + yq.shape[1])),
    }


def empty_cka_unit(num_states: int) -> dict:
    """The cka unit of a pair left out of a view (too few tokens): zeros.

    >>> empty_cka_unit(3)["hsic"].shape, float(empty_cka_unit(3)["cka_pairs"])
    ((3, 3), 0.0)
    """
    m = num_states
    return {
        "hsic": np.zeros((m, m)),
        "update_hsic": np.zeros((m, m)),
        "cka_pairs": np.asarray(0.0),
        "cka_tokens": np.asarray(0.0),
    }


class CkaPairs:
    """The cross-sequence pairs of one run: one cka unit per pair and token set.

    Measured sequences are paired in order ((0, 1), (2, 3), ...) across batch
    boundaries: an unpaired sequence is held until the next one, so the pairs
    never depend on the batch size. ``token_sets`` maps each token set's key
    (:func:`cka_set_key`) to the label its arrays are saved under. Per set,
    ``units`` holds one unit per pair (:func:`empty_cka_unit` for a pair left
    out of the set); ``firsts`` the index of each pair's first sequence among
    the measured ones (the second follows it), so that a pair's additive
    statistics can be joined to its unit; ``partner`` the sequence still
    waiting, as ``(index, states)`` or ``None``. Without token sets nothing is
    paired.

    A batch's pairs are built apart (:meth:`pending`) and added at once
    (:meth:`commit`), so a batch that fails part-way adds nothing.

    >>> spec = parse_views("default")[0]
    >>> pairs = CkaPairs({cka_set_key(spec): "default|cka"})
    >>> batch = pairs.pending({cka_set_key(spec): (spec, None)})
    >>> for index in range(3):
    ...     batch.add(index, torch.randn(2, 5, 4))
    >>> pairs.commit(batch)
    >>> pairs.firsts, pairs.partner[0]
    ([0], 2)
    """

    def __init__(self, token_sets: dict, gram_budget_bytes: int = GRAM_BUDGET_BYTES):
        self.labels = dict(token_sets)
        self.gram_budget_bytes = gram_budget_bytes
        self.units: dict = {key: [] for key in self.labels}
        self.firsts: list = []
        self.partner: tuple | None = None

    def pending(self, views: dict) -> "PendingPairs":
        """An empty batch of pairs, continuing from the sequence held now; ``views`` maps each token
        set to its view and the view's fit, ``(spec, fit)`` (a set without one, whose view is
        unavailable, gets empty units)."""
        return PendingPairs(self, views)

    def commit(self, batch: "PendingPairs") -> None:
        """Add a batch's pairs, and hold its unpaired sequence (copied: the caller may reuse the
        batch's memory). Everything that allocates happens before anything is added."""
        partner = batch.partner
        if partner is not None and partner is not self.partner:
            partner = (partner[0], partner[1].detach().clone())
        for key, units in batch.units.items():
            self.units[key].extend(units)
        self.firsts.extend(batch.firsts)
        self.partner = partner

    def statistics(self, key: tuple) -> UnitStatistics:
        """The units of one token set, one per pair (left-out pairs included, ``cka_pairs`` 0)."""
        return UnitStatistics.from_units(self.units[key])

    def entered(self, key: tuple) -> int:
        """How many pairs entered a token set (both sequences with enough tokens in it)."""
        return int(sum(float(u["cka_pairs"]) for u in self.units[key]))

    def merge(self, other: "CkaPairs", offset: int, other_sequences: int) -> None:
        """Append ``other``'s pairs, of ``other_sequences`` sequences measured after the ``offset``
        of this one. A sequence of this one still waiting for a partner stays unpaired (left out)
        when the other measured any."""
        for key in self.units:
            self.units[key].extend(other.units[key])
        self.firsts.extend(first + offset for first in other.firsts)
        if other_sequences:
            self.partner = None if other.partner is None else (other.partner[0] + offset, other.partner[1])

    def unit_arrays(self) -> dict:
        """Every per-pair array, keyed ``"<label>|<key>"``, and ``pairs|first``."""
        out = {}
        for key, units in self.units.items():
            if units:
                for name, arr in UnitStatistics.from_units(units).arrays.items():
                    out[f"{self.labels[key]}|{name}"] = arr
        if self.firsts:
            out["pairs|first"] = np.asarray(self.firsts, dtype=np.float64)
        return out

    def state_dict(self) -> tuple:
        """``(arrays, meta)``: :meth:`unit_arrays`, and the sequence waiting for its partner."""
        arrays = self.unit_arrays()
        if self.partner is not None:
            arrays["partner|states"] = self.partner[1].detach().to("cpu", _kept_dtype(self.partner[1].dtype)).numpy()
        meta = {
            "partner": None
            if self.partner is None
            else {"index": self.partner[0], "device": str(self.partner[1].device)}
        }
        return arrays, meta

    def load_state_dict(self, arrays: dict, meta: dict) -> None:
        """Continue from :meth:`state_dict` (the arrays may hold other statistics' keys too)."""
        for key in self.units:
            prefix = f"{self.labels[key]}|"
            cols = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
            n = len(cols["hsic"]) if cols else 0
            self.units[key] = [{k: v[i] for k, v in cols.items()} for i in range(n)]
        self.firsts = [int(f) for f in arrays.get("pairs|first", ())]
        partner = meta.get("partner") if self.units else None
        self.partner = (
            None
            if partner is None
            else (int(partner["index"]), torch.from_numpy(np.asarray(arrays["partner|states"])).to(partner["device"]))
        )


class PendingPairs:
    """The pairs one batch completes, kept apart from :class:`CkaPairs` until :meth:`CkaPairs.commit`."""

    def __init__(self, pairs: CkaPairs, views: dict):
        self.views = views
        self.gram_budget_bytes = pairs.gram_budget_bytes
        self.units: dict = {key: [] for key in pairs.units}
        self.firsts: list = []
        self.partner = pairs.partner

    def add(self, index: int, states: torch.Tensor) -> None:
        """The next measured sequence ``(M, T, d)``: held, or paired with the one held."""
        if not self.units:
            return
        if self.partner is None:
            self.partner = (index, states)
            return
        for key, units in self.units.items():
            units.append(self._pair_unit(self.partner[1], states, self.views.get(key)))
        self.firsts.append(self.partner[0])
        self.partner = None

    def _pair_unit(self, first: torch.Tensor, second: torch.Tensor, view: tuple | None) -> dict:
        """The cka unit of one pair in one token set, ``view`` its ``(spec, fit)`` (empty where either
        sequence has too few tokens in it, or the set's view is unavailable)."""
        yp = None if view is None else centred_view_states(first, *view)
        yq = None if yp is None else centred_view_states(second, *view)
        return empty_cka_unit(first.shape[0]) if yq is None else pair_cka(yp, yq, self.gram_budget_bytes)


def _kept_dtype(dtype: torch.dtype) -> torch.dtype:
    """How states are saved: float64 when they are, float32 otherwise (numpy has no bfloat16)."""
    return torch.float64 if dtype == torch.float64 else torch.float32
