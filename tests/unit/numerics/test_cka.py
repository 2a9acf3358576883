"""Linear CKA (docs/method.md#cka, #closed-forms-cka): closed forms, views against a naive computation, accumulation."""

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from effdepth.errors import EffdepthError
from effdepth.numerics.cka import (
    GramView,
    PooledCka,
    ViewUnavailable,
    check_cka_full_memory,
    sequence_cka,
)
from effdepth.numerics.bootstrap import bootstrap_intervals
from effdepth.numerics.metrics import full_metrics, scalar_metrics, similarity_matrix
from effdepth.numerics.references import reference_fl, reference_from_energies
from effdepth.numerics.similarity import deff
from effdepth.numerics.streams import ViewAccumulator

TIGHT = 1e-9
BOTH = ("cka", "cka-full")


# -- helpers ------------------------------------------------------------------------


def complement_basis(n, rng):
    """An orthonormal basis (n x n-1) of the complement of the all-ones vector."""
    a = rng.standard_normal((n, n))
    a[:, 0] = 1.0
    q, _ = np.linalg.qr(a)
    return q[:, 1:]


def accumulate(states, views=("default",), similarities=BOTH, mask=None, **kw):
    acc = ViewAccumulator(list(views), similarities=similarities, **kw)
    s = torch.as_tensor(states)
    if s.dim() == 3:
        s = s[:, None]
    if acc.needs_fit:
        acc.fit_batch(s, mask)
        acc.finalize_fit("test")
    acc.update(s, mask)
    return acc


def metrics(acc, view, similarity, include_embedding=False):
    totals = acc.unit_statistics(view, similarity).total()
    return full_metrics(totals, similarity, include_embedding)


def residual_like(L=5, B=3, T=12, d=10, seed=0, offset=3.0):
    """A residual-like stream: cumulative random updates on a shared offset, a large BOS."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(L + 1, B, T, d, generator=g, dtype=torch.float64).cumsum(0) + offset
    s[:, :, 0] *= 6.0
    return s


def naive_view(x, view, pcs=None):
    """One sequence's (M, T, d) numpy states transformed by the view, the obvious way."""
    if "drop-pos0" in view:
        x = x[:, 1:]
    if "token-norm" in view:
        norms = np.linalg.norm(x, axis=-1, keepdims=True)
        x = x / np.where(norms > 0, norms, 1.0)
    if "center" in view:
        x = x - 123.0  # any constant: per-sequence centring removes it
    if pcs is not None:
        x = x - (x @ pcs) @ np.swapaxes(pcs, 1, 2)
    return x


def naive_cka_stats(seqs, view, pcs=None):
    """Summed HSIC (d-space route |Y_i^T Y_j|^2) and centred energies, sequence by sequence."""
    h, e, left_out = 0.0, 0.0, 0
    for x in seqs:
        z = naive_view(x, view, pcs)
        n = z.shape[1]
        if n < 4:
            left_out += 1
            continue
        y = z - z.mean(axis=1, keepdims=True)
        m = y.shape[0]
        cross = np.einsum("itd,jte->ijde", y, y)
        h = h + (cross**2).sum(axis=(2, 3)) / (n - 1) ** 2
        inc = np.concatenate([y[:1], y[1:] - y[:-1]])
        e = e + (inc**2).sum(axis=(1, 2)) / (n - 1)
    return h, e, left_out


def naive_cka_full(seqs, view, pcs=None):
    """Pooled CKA: every token of every sequence, centred on the pooled mean."""
    z = np.concatenate([naive_view(x, view, pcs) for x in seqs], axis=1)
    n = z.shape[1]
    y = z - z.mean(axis=1, keepdims=True)
    cross = np.einsum("itd,jte->ijde", y, y)
    h = (cross**2).sum(axis=(2, 3)) / (n - 1) ** 2
    inc = np.concatenate([y[:1], y[1:] - y[:-1]])
    return h, (inc**2).sum(axis=(1, 2)) / (n - 1)


def cka_sim(h, include_embedding=False):
    h = h if include_embedding else h[1:, 1:]
    d = np.sqrt(np.diag(h))
    return h / np.outer(d, d)


def sequences_of(states, mask=None):
    s = states.numpy()
    out = []
    for b in range(s.shape[1]):
        keep = np.arange(s.shape[2]) if mask is None else np.nonzero(mask[b].numpy())[0]
        out.append(s[:, b, keep])
    return out


# -- closed forms (docs/method.md#closed-forms-cka) ---------------------------------------------------------


def isotropic_stream(L, d, n, a=0.0, sequences=2, seed=0):
    """Isotropic orthogonal equal updates Z_l = Q[:, (l-1)d:ld] (Q orthonormal, orthogonal to
    the all-ones vector), with an isotropic initial state of energy a per coordinate."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(sequences):
        q = complement_basis(n, rng)
        blocks = [q[:, l * d : (l + 1) * d] for l in range(L + 1)]
        s0 = np.sqrt(a) * blocks[L]  # a block no update uses
        states = [s0]
        for l in range(L):
            states.append(states[-1] + blocks[l])
        out.append(np.stack(states))
    return torch.from_numpy(np.stack(out, axis=1))


@settings(max_examples=12, deadline=None)
@given(L=st.integers(1, 6), d=st.integers(1, 3), extra=st.integers(1, 4), include=st.booleans())
def test_isotropic_orthogonal_equal_updates_give_fn(L, d, extra, include):
    n = max(4, (L + 1) * d + extra)
    acc = accumulate(isotropic_stream(L, d, n))
    big_n = L + 1 if include else L
    energies = np.arange(1.0, L + 1.0)
    want = reference_from_energies(np.concatenate([[1.0], 1.0 + energies]) if include else energies)
    for sim in BOTH:
        m = metrics(acc, "default", sim, include)
        if not include:
            assert m["deff"] == pytest.approx(reference_fl(big_n), rel=TIGHT)
            expected = np.minimum.outer(energies, energies) / np.maximum.outer(energies, energies)
            np.testing.assert_allclose(m["similarity"], expected, rtol=TIGHT, atol=TIGHT)
        # Matched references use the centred energies: S_0 = 0, equal updates.
        assert m["reference_size"] == pytest.approx(want, rel=TIGHT)


@settings(max_examples=12, deadline=None)
@given(L=st.integers(1, 6), d=st.integers(1, 3), a=st.floats(0.1, 20.0), include=st.booleans())
def test_isotropic_initial_state_gives_r_of_e(L, d, a, include):
    n = max(4, (L + 1) * d + 2)
    acc = accumulate(isotropic_stream(L, d, n, a=a))
    e = a + np.arange(0.0 if include else 1.0, L + 1.0)
    for sim in BOTH:
        m = metrics(acc, "default", sim, include)
        assert m["deff"] == pytest.approx(reference_from_energies(e), rel=TIGHT)
        assert m["reference_matched"] == pytest.approx(reference_from_energies(e), rel=TIGHT)
        assert m["correlated_updates"] == pytest.approx(0.0, abs=1e-9)


def test_disjoint_blocks_with_own_token_patterns_give_sqrt_min_over_max():
    L, w, n = 5, 2, 16
    rng = np.random.default_rng(1)
    seqs = []
    for _ in range(3):
        q = complement_basis(n, rng)
        s = np.zeros((L + 1, n, L * w))
        for l in range(1, L + 1):
            s[l] = s[l - 1]
            s[l][:, (l - 1) * w : l * w] = q[:, (l - 1) * w : l * w]
        seqs.append(s)
    acc = accumulate(torch.from_numpy(np.stack(seqs, axis=1)))
    i = np.arange(1.0, L + 1.0)
    expected = np.sqrt(np.minimum.outer(i, i) / np.maximum.outer(i, i))
    for sim in BOTH:
        m = metrics(acc, "default", sim)
        np.testing.assert_allclose(m["similarity"], expected, rtol=TIGHT, atol=TIGHT)
        assert m["deff"] == pytest.approx(L * L / expected.sum(), rel=TIGHT)


@settings(max_examples=15, deadline=None)
@given(L=st.integers(1, 6), seed=st.integers(0, 1000))
def test_shared_token_pattern_gives_one_whatever_the_coordinates(L, seed):
    rng = np.random.default_rng(seed)
    n, d = 9, 5
    q = complement_basis(n, rng)[:, :1]  # one token pattern
    updates = [np.outer(q[:, 0], rng.standard_normal(d)) for _ in range(L + 1)]
    s = torch.from_numpy(np.cumsum(np.stack(updates), axis=0))
    for sim in BOTH:
        m = metrics(accumulate(s), "default", sim)
        np.testing.assert_allclose(m["similarity"], 1.0, rtol=TIGHT)
        assert m["deff"] == pytest.approx(1.0, rel=TIGHT)


def test_states_sharing_one_gram_give_one():
    # Each state is Q O_l s_l with O_l orthonormal rows: K_l = s_l^2 Q Q^T for every layer.
    rng = np.random.default_rng(2)
    n, r, d, L = 12, 3, 7, 4
    q = complement_basis(n, rng)[:, :r]
    s = np.stack([(l + 1.0) * q @ np.linalg.qr(rng.standard_normal((d, r)))[0].T for l in range(L + 1)])
    m = metrics(accumulate(torch.from_numpy(s)), "default", "cka")
    assert m["deff"] == pytest.approx(1.0, rel=TIGHT)


# -- views on the Gram against the naive computation ----------------------------------

VIEWS = ["default", "drop-pos0", "token-norm", "token-norm+drop-pos0", "center", "top2pc", "token-norm+top1pc",
         "drop-pos0+top1pc", "center+top1pc", "top1pc-shared"]


def view_pcs(acc, view):
    spec = acc._spec(view)
    fit = acc.fits.get(spec.stream)
    return None if not spec.top_pcs else fit["pcs"].numpy()


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_on_the_gram_equals_the_naive_cka(view):
    s = residual_like()
    mask = torch.ones(s.shape[1], s.shape[2], dtype=torch.bool)
    mask[1, 9:] = False  # a shorter sequence: padding never enters
    acc = accumulate(s, [view], mask=mask, pc_estimate="exact")
    pcs = view_pcs(acc, view)  # the fit itself is tested in test_views.py
    seqs = sequences_of(s, mask)
    h, e, _ = naive_cka_stats(seqs, view, pcs)
    totals = acc.unit_statistics(view, "cka").total()
    np.testing.assert_allclose(totals["hsic"], h, rtol=TIGHT)
    np.testing.assert_allclose(totals["cka_energy"], e, rtol=TIGHT)
    m = full_metrics(totals, "cka", False)
    assert m["deff"] == pytest.approx(deff(cka_sim(h)), rel=TIGHT)
    hf, ef = naive_cka_full(seqs, view, pcs)
    full = acc.unit_statistics(view, "cka-full").total()
    np.testing.assert_allclose(full["hsic_full"], hf, rtol=TIGHT)
    np.testing.assert_allclose(full["cka_full_energy"], ef, rtol=TIGHT)


def assert_cka_equals_the_naive(acc, seqs, views):
    """Each view's summed HSIC and centred energies equal the naive d-space computation."""
    for view in views:
        h, e, _ = naive_cka_stats(seqs, view, view_pcs(acc, view))
        totals = acc.unit_statistics(view, "cka").total()
        np.testing.assert_allclose(totals["hsic"], h, rtol=TIGHT)
        np.testing.assert_allclose(totals["cka_energy"], e, rtol=TIGHT)


PAPER_LIKE = ["default", "drop-pos0", "token-norm", "token-norm+drop-pos0", "top1pc", "drop-pos0+top1pc"]
# PC views next to the view without PCs of the same states follow from its sums and steps; here on
# token-normed states too, with several directions, shared ones, and no such view for the shifted states.
PC_FAMILIES = ["token-norm", "token-norm+top1pc", "token-norm+drop-pos0+top2pc", "top2pc", "top1pc-shared",
               "drop-pos0+top1pc"]


@pytest.mark.parametrize("views", [PAPER_LIKE, PC_FAMILIES], ids=["paper-like", "pc-families"])
def test_views_accumulated_together_equal_the_naive_cka(views):
    # A drop-pos0 set next to its all-positions set is derived from that set's Gram
    # (drop_first_hsic); each view alone is formed directly (the test above).
    s = residual_like()
    mask = torch.ones(s.shape[1], s.shape[2], dtype=torch.bool)
    mask[1, 9:] = False
    acc = accumulate(s, views, mask=mask, pc_estimate="exact", similarities=("cka",))
    assert_cka_equals_the_naive(acc, sequences_of(s, mask), views)


def test_a_dominant_first_token_forms_the_drop_pos0_hsic_directly():
    from effdepth.numerics.cka import _centred, drop_first_hsic

    def derived(x):
        k = torch.stack([_centred(g) for g in x @ x.transpose(1, 2)])
        return drop_first_hsic(torch.einsum("iab,jab->ij", k, k), k[:, 0], x.shape[1])

    x = residual_like(B=1, T=12)[:, 0]
    assert derived(x) is not None
    x[:, 0] *= 1e4  # massive activations at position 0: deriving would cancel about 16 digits
    assert derived(x) is None
    # Both token sets of one transform, alone and together, against the naive cka in extended
    # precision: the set is then formed about its own mean (token-norm: from normalised states).
    for view in (GramView(first=1), GramView(first=1, token_norm=True)):
        want = long_double_cka(x[:, 1:], view.token_norm)
        for got in (sequence_cka(x, [view])[0]["hsic"], sequence_cka(x, [GramView(token_norm=view.token_norm), view])[1]["hsic"]):
            np.testing.assert_allclose(cka_of(got), want, rtol=0, atol=1e-14)
    # Token-normed states whose later tokens are all alike: centring those unit vectors would keep
    # about 1e-10 of their energy, and the centred Gram would carry 1e-6 (1e-7 in cka) from it.
    y = torch.zeros(3, 10, 4, dtype=torch.float64)
    y[:, :, 0] = 1.0
    y[:, 1:, 1] = 1e-5 * torch.randn(3, 9, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y[:, 0, 2] = 1.0
    view = GramView(first=1, token_norm=True)
    want = long_double_cka(y[:, 1:], True)
    for got in (sequence_cka(y, [view])[0]["hsic"], sequence_cka(y, [GramView(token_norm=True), view])[1]["hsic"]):
        np.testing.assert_allclose(cka_of(got), want, rtol=0, atol=1e-13)


def test_a_token_that_dwarfs_the_rest_leaves_token_norm_cka_exact():
    # Token-norm rebuilds raw Gram rows from the Gram of states shifted by their mean: terms of the
    # size of the shift squared. A first token 1e8 times the rest, in 6 tokens: that set is formed apart.
    x = residual_like(B=1, T=6)[:, 0]
    x[:, 0] *= 1e8
    for first in (0, 1):
        want = long_double_cka(x[:, first:], True)
        got = sequence_cka(x, [GramView(first=first, token_norm=True)])[0]["hsic"]
        np.testing.assert_allclose(cka_of(got), want, rtol=0, atol=1e-14)
        # Shifted in place (the surrogate streams' work buffer), the states are rebuilt from the
        # shifted ones: the rounding of a shift 1e7 times the rest.
        inplace = sequence_cka(x.clone(), [GramView(first=first, token_norm=True)], overwrite=True)[0]["hsic"]
        np.testing.assert_allclose(cka_of(inplace), want, rtol=0, atol=1e-7)


def long_double_cka(x, token_norm):
    """Per-sequence linear cka of states ``(M, n, d)`` in numpy's extended precision."""
    y = x.numpy().astype(np.longdouble)
    if token_norm:
        y = y / np.sqrt((y * y).sum(-1, keepdims=True))
    y = y - y.mean(1, keepdims=True)
    k = np.einsum("mad,mbd->mab", y, y)
    return cka_of(np.einsum("iab,jab->ij", k, k))


def cka_of(hsic):
    h = np.asarray(hsic, dtype=np.longdouble)
    d = np.sqrt(np.diag(h))
    return (h / np.outer(d, d)).astype(np.float64)


@pytest.mark.parametrize("massive", [False, True])
def test_drop_pos0_sums_centred_afterwards_or_formed_directly(monkeypatch, massive):
    # Without token-norm, a drop-pos0 set is summed from its uncentred Gram and centred after the
    # sums, and its all-positions set adds row 0 to the same sums. Where the centring would cancel
    # (a first token 1e4 times the others: the drop-pos0 mean is huge in the shifted states) the
    # set is formed from its own centred Gram instead: both routes must equal the naive cka.
    import effdepth.numerics.cka as cka

    outcomes = []
    original = cka._centre_sums
    monkeypatch.setattr(cka, "_centre_sums", lambda *a: outcomes.append(original(*a)) or outcomes[-1])
    x = residual_like(B=1, T=14)[:, 0]
    if massive:
        x[:, 0] *= 1e4
    pcs = torch.linalg.qr(torch.randn(x.shape[0], x.shape[-1], 1, generator=torch.Generator().manual_seed(3),
                                      dtype=torch.float64))[0]
    for view_pcs in (None, pcs):
        views = [GramView(first=0, pcs=view_pcs), GramView(first=1, pcs=view_pcs)]
        got = sequence_cka(x, views)
        pcs_np = None if view_pcs is None else view_pcs.numpy()
        for unit, name in zip(got, ("default", "drop-pos0")):
            h, e, _ = naive_cka_stats([x.numpy()], name, pcs_np)
            scale = np.sqrt(np.outer(np.diag(h), np.diag(h)))  # what cka divides by
            # Formed about its own mean next to so large a token: nothing left to cancel.
            np.testing.assert_allclose(unit["hsic"] / scale, h / scale, rtol=0, atol=TIGHT)
            np.testing.assert_allclose(unit["cka_energy"], e, rtol=TIGHT)
    assert outcomes == [not massive] * 2  # the route each took: centred afterwards, or formed directly


def test_energies_that_cancel_are_redone_from_explicit_differences(monkeypatch):
    # The energies come from sum |s_a|^2 - n |sbar|^2 of each layer's steps. At layer 3 the first
    # token flips while the others barely move: in the shifted states they all share its opposite
    # step, so for the drop-pos0 set the expansion would cancel some 15 digits. That layer (and
    # only that one) is redone from explicit differences and equals the naive energies.
    import effdepth.numerics.cka as cka

    x = residual_like(B=1, T=12)[:, 0]
    g = torch.Generator().manual_seed(5)
    x[3:, 1:] += x[2, 1:] - x[3, 1:] + 1e-7 * torch.randn(x.shape[1] - 1, x.shape[-1], generator=g, dtype=torch.float64)
    x[3:, 0] -= 2.0 * x[2, 0]
    views = [GramView(), GramView(first=1)]
    _, want, _ = naive_cka_stats([x.numpy()], "drop-pos0")
    redone = []
    original = cka._TokenSet._explicit_energy
    monkeypatch.setattr(cka._TokenSet, "_explicit_energy", lambda self, layer, *a: redone.append((self.n, layer)) or original(self, layer, *a))
    np.testing.assert_allclose(sequence_cka(x, views)[1]["cka_energy"], want, rtol=TIGHT)
    assert redone == [(11, 3)]
    monkeypatch.setattr(cka, "ENERGY_CANCELLATION", float("inf"))  # the expansion alone
    off = sequence_cka(x, views)[1]["cka_energy"][3]
    assert abs(off - want[3]) > 1e3 * TIGHT * want[3]


def test_top_pc_view_matches_pcs_from_an_svd():
    s = residual_like(T=20)
    acc = accumulate(s, ["top1pc"], pc_estimate="exact")
    flat = s.numpy().reshape(s.shape[0], -1, s.shape[-1])
    pcs = []
    for layer in flat:
        _, _, vt = np.linalg.svd(layer - layer.mean(0), full_matrices=False)
        pcs.append(vt[:1].T)
    h, _, _ = naive_cka_stats(sequences_of(s), "top1pc", np.stack(pcs))
    np.testing.assert_allclose(acc.unit_statistics("top1pc", "cka").total()["hsic"], h, rtol=1e-7)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), shift=st.floats(-1e3, 1e3), scale=st.floats(1e-3, 1e3))
def test_cka_ignores_a_constant_shift_a_rotation_and_a_scale(seed, shift, scale):
    s = residual_like(seed=seed)
    rot = torch.linalg.qr(torch.randn(s.shape[-1], s.shape[-1], dtype=torch.float64,
                                      generator=torch.Generator().manual_seed(seed)))[0]
    moved = scale * (s @ rot) + shift
    a = metrics(accumulate(s, similarities=("cka",)), "default", "cka")
    b = metrics(accumulate(moved, similarities=("cka",)), "default", "cka")
    np.testing.assert_allclose(a["similarity"], b["similarity"], rtol=1e-8)
    assert a["reference_matched"] == pytest.approx(b["reference_matched"], rel=1e-8)


# -- availability, short sequences ------------------------------------------------------


def test_pos0_only_is_unavailable_never_a_number():
    acc = accumulate(residual_like(), ["default", "pos0-only"])
    for sim in BOTH:
        with pytest.raises(ViewUnavailable) as e:
            acc.unit_statistics("pos0-only", sim)
        assert "one token" in e.value.reason and isinstance(e.value, EffdepthError)
        again = pickle.loads(pickle.dumps(e.value))  # crosses process boundaries intact
        assert (again.view, again.similarity, again.reason, str(again)) == ("pos0-only", sim, e.value.reason, str(e.value))
    # frobenius still has a value for it
    assert acc.unit_statistics("pos0-only").units == 3


def test_sequences_under_four_tokens_are_left_out_and_counted():
    s = residual_like(B=4, T=8)
    mask = torch.ones(4, 8, dtype=torch.bool)
    mask[1, 3:] = False  # 3 tokens: out of both views
    mask[2, 4:] = False  # 4 tokens: in default, out of drop-pos0
    acc = accumulate(s, ["default", "drop-pos0"], mask=mask)
    assert acc.cka_left_out("default") == 1 and acc.cka_left_out("drop-pos0") == 2
    seqs = sequences_of(s, mask)
    for view in ("default", "drop-pos0"):
        h, e, out = naive_cka_stats(seqs, view)
        totals = acc.unit_statistics(view, "cka").total()
        np.testing.assert_allclose(totals["hsic"], h, rtol=TIGHT)
        assert totals["cka_sequences"] == 4 - out
        # Left out of the view's units (and its bootstrap), and counted.
        assert acc.unit_statistics(view, "cka").units == 4 - out == 4 - acc.left_out(view, "cka")


def test_a_view_without_any_long_enough_sequence_is_unavailable():
    acc = accumulate(residual_like(T=4), ["drop-pos0"])
    with pytest.raises(ViewUnavailable, match="at least 4 tokens"):
        acc.unit_statistics("drop-pos0", "cka")


def test_unaccumulated_similarity_is_an_error():
    acc = accumulate(residual_like(), similarities=())
    with pytest.raises(EffdepthError, match="not accumulated"):
        acc.unit_statistics("default", "cka")


# -- accumulation, resume, merge, memory ----------------------------------------------


def test_two_updates_equal_one_update_of_the_concatenated_batch():
    s = residual_like(B=4, T=10)
    mask = torch.ones(4, 10, dtype=torch.bool)
    mask[3, 7:] = False
    views = ["default", "drop-pos0", "token-norm"]
    one = accumulate(s, views, mask=mask)
    two = ViewAccumulator(views, similarities=BOTH)
    two.update(s[:, :2], mask[:2])
    two.update(s[:, 2:], mask[2:])
    for view in views:
        for sim in BOTH:
            a = one.unit_statistics(view, sim).total()
            b = two.unit_statistics(view, sim).total()
            for k in a:
                np.testing.assert_allclose(b[k], a[k], rtol=1e-12, atol=1e-12, err_msg=f"{view} {sim} {k}")


def test_state_round_trip_and_extend():
    s = residual_like(B=4)
    views = ["default", "token-norm+drop-pos0", "top1pc"]
    first = ViewAccumulator(views, similarities=BOTH)
    first.update(s[:, :2])
    first.flush()  # fit top1pc on these two (a saved state leaves out batches held for calibration)
    arrays, meta = first.state()
    assert meta["similarities"] == list(BOTH)
    resumed = ViewAccumulator(views, similarities=BOTH)
    resumed.load_state({k: np.array(v) for k, v in arrays.items()}, meta)
    resumed.update(s[:, 2:])
    rest = ViewAccumulator(views, similarities=BOTH)
    rest.copy_fits(first)
    rest.update(s[:, 2:])
    merged = ViewAccumulator(views, similarities=BOTH)
    merged.load_state(*first.state())
    merged.extend(rest)
    for view in views:
        for sim in BOTH:
            a = resumed.unit_statistics(view, sim).total()
            b = merged.unit_statistics(view, sim).total()
            for k in a:
                np.testing.assert_allclose(b[k], a[k], rtol=1e-11, atol=1e-11)
    with pytest.raises(EffdepthError, match="kernel similarities"):
        ViewAccumulator(views, similarities=("cka",)).load_state(arrays, meta)


def test_pooled_merge_with_a_different_shift_equals_one_pass():
    g = torch.Generator().manual_seed(5)
    y = torch.randn(4, 30, 6, generator=g, dtype=torch.float64) + 1e4  # a dominant mean
    whole = PooledCka()
    whole.update(y)
    a, b = PooledCka(), PooledCka()
    a.update(y[:, :7])
    b.update(y[:, 7:] * 1.0)
    a.merge(b)
    for k, v in whole.statistics().items():
        np.testing.assert_allclose(a.statistics()[k], v, rtol=1e-9)
    yc = (y - y.mean(1, keepdim=True)).numpy()
    exact = np.einsum("itd,jte->ijde", yc, yc)
    np.testing.assert_allclose(whole.statistics()["hsic_full"], (exact**2).sum((2, 3)) / 29**2, rtol=1e-9)


def test_row_blocks_equal_the_one_shot_gram():
    s = residual_like(B=2, T=23)
    mask = torch.ones(2, 23, dtype=torch.bool)
    mask[0, 17:] = False
    views = ["default", "drop-pos0", "token-norm+top1pc"]
    one = accumulate(s, views, mask=mask, similarities=("cka",))
    # 2 KiB holds about one row of 6 layers x 23 tokens: every block path is taken.
    blocks = accumulate(s, views, mask=mask, similarities=("cka",), gram_budget_bytes=2048)
    for view in views:
        a = one.unit_statistics(view, "cka").total()
        b = blocks.unit_statistics(view, "cka").total()
        np.testing.assert_allclose(b["hsic"], a["hsic"], rtol=1e-12)


def test_sequence_cka_blocks_directly():
    x = residual_like(B=1, T=13)[:, 0]
    pcs = torch.linalg.qr(torch.randn(x.shape[0], x.shape[-1], 1, generator=torch.Generator().manual_seed(1),
                                      dtype=torch.float64))[0]
    # Blocks of one row upwards: the drop-pos0 sets' sums then start at the second block.
    views = [GramView(), GramView(first=1, token_norm=True), GramView(first=1), GramView(pcs=pcs), GramView(first=1, pcs=pcs)]
    for budget in (1, 3 * 6 * 13 * 8 * 5, 1 << 30):
        got = sequence_cka(x, views, budget)
        want = sequence_cka(x, views)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g["hsic"], w["hsic"], rtol=1e-12)


def test_cka_full_memory_refusal():
    with pytest.raises(EffdepthError) as e:
        check_cka_full_memory(["default", "drop-pos0", "pos0-only"], 33, 2048)
    msg = str(e.value)
    assert "\n" not in msg and "GiB" in msg and "--similarity cka" in msg and "2 view token set" in msg
    assert check_cka_full_memory(["default"], 31, 576) == 496 * 576 * 576 * 8
    acc = ViewAccumulator(["default"], similarities=("cka-full",), cka_full_budget_bytes=1000)
    with pytest.raises(EffdepthError, match="cka-full needs"):
        acc.update(residual_like())
    assert acc.sequences == 0


def test_cka_full_is_one_unit_without_interval():
    acc = accumulate(residual_like(B=4))
    stats = acc.unit_statistics("default", "cka-full")
    assert stats.units == 1
    assert bootstrap_intervals(stats, similarity="cka-full", include_embedding=False, resamples=50) is None
    ci = bootstrap_intervals(acc.unit_statistics("default", "cka"), similarity="cka", include_embedding=False, resamples=50)
    assert ci["units"] == 4 and ci["deff"][0] <= ci["deff"][1]
    m = metrics(acc, "default", "cka-full")
    assert set(m["reference_profiles"]) == {"fl", "init", "size", "matched"}


def test_bootstrap_resample_without_cka_sequences_is_nan_not_a_number():
    from effdepth.numerics.cka import CKA_KEYS
    from effdepth.numerics.statistics import UnitStatistics

    s = residual_like(B=3, T=6)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1:, 3:] = False  # only the first sequence has a cka value
    acc = accumulate(s, mask=mask)
    assert acc.unit_statistics("default", "cka").units == 1  # the others are left out
    # Totals that hold no cka sequence (e.g. a resample of left-out units) are NaN, never a number.
    additive = acc.unit_statistics("default", "frobenius")
    cka = UnitStatistics.from_units(acc._cka_units[next(iter(acc._cka_units))])
    stats = additive.joined(UnitStatistics({k: cka.arrays[k] for k in CKA_KEYS}))
    totals = stats.weighted_totals(np.array([[0, 2, 1], [1, 1, 1]]))
    d = scalar_metrics(totals, "cka", False)["deff"]
    assert np.isnan(d[0]) and np.isfinite(d[1])


def test_cka_and_cka_full_are_close_on_residual_like_data():
    # The biased per-sequence HSIC is inflated by about d / T; with T >> d the two agree.
    g = torch.Generator().manual_seed(11)
    L, B, T, d = 6, 8, 256, 8
    shared = torch.randn(L + 1, 1, 1, d, generator=g, dtype=torch.float64) * 2.0
    s = (torch.randn(L + 1, B, T, d, generator=g, dtype=torch.float64) + shared).cumsum(0)
    acc = accumulate(s)
    a = metrics(acc, "default", "cka")["deff"]
    b = metrics(acc, "default", "cka-full")["deff"]
    assert a == pytest.approx(b, rel=0.03)
    assert np.abs(similarity_matrix(acc.unit_statistics("default", "cka").total(), "cka", False)
                  - similarity_matrix(acc.unit_statistics("default", "cka-full").total(), "cka-full", False)).max() < 0.03


def test_frobenius_and_token_numbers_do_not_depend_on_the_kernel_similarities():
    s = residual_like(B=3)
    views = ["default", "drop-pos0", "pos0-only", "token-norm", "top1pc"]
    plain = accumulate(s, views, similarities=())
    both = accumulate(s, views, similarities=("frobenius",) + BOTH)
    for view in views:
        a, b = plain.unit_statistics(view).arrays, both.unit_statistics(view).arrays
        assert set(a) == set(b)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_upper_triangle_blocks_of_a_long_sequence_equal_the_naive_cka():
    # T = 150: blocks of 64, 64 and 22 rows of the Gram's upper triangle (the default budget).
    s = residual_like(L=3, B=1, T=150, d=12)
    views = ["default", "drop-pos0", "token-norm+top1pc"]
    acc = accumulate(s, views, similarities=("cka",), pc_estimate="exact")
    assert_cka_equals_the_naive(acc, sequences_of(s, torch.ones(1, 150, dtype=torch.bool)), views)


def test_sequence_cka_reads_float32_states_as_float64():
    x = residual_like(B=1, T=20)[:, 0]
    views = [GramView(), GramView(first=1, token_norm=True)]
    from_float32 = sequence_cka(x.float(), views)
    from_float64 = sequence_cka(x.float().double(), views)
    for a, b in zip(from_float32, from_float64):
        np.testing.assert_array_equal(a["hsic"], b["hsic"])


def test_overwriting_a_float64_work_buffer_gives_the_same_statistics():
    x = residual_like(B=1, T=20)[:, 0].contiguous()
    views = [GramView(), GramView(first=1, token_norm=True)]
    want = sequence_cka(x, views)
    buffer = x.clone()
    got = sequence_cka(buffer, views, overwrite=True)
    assert not torch.equal(buffer, x)  # shifted in place: the caller's buffer is spent
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a["hsic"], b["hsic"])
        np.testing.assert_array_equal(a["cka_energy"], b["cka_energy"])
    kept = x.float()
    sequence_cka(kept, views, overwrite=True)  # not float64: copied, never touched
    assert torch.equal(kept, x.float())


def test_update_sequence_equals_a_batch_of_one():
    s = residual_like(B=2, T=9)
    one = ViewAccumulator(["default", "drop-pos0"], similarities=("cka",))
    each = ViewAccumulator(["default", "drop-pos0"], similarities=("cka",))
    one.update(s)
    for b in range(2):
        each.update_sequence(s[:, b].clone(), overwrite=True)
    for view in ("default", "drop-pos0"):
        a, b = one.unit_statistics(view, "cka").arrays, each.unit_statistics(view, "cka").arrays
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    with pytest.raises(RuntimeError, match="fitted"):
        ViewAccumulator(["top1pc"]).update_sequence(s[:, 0])


def test_a_failure_while_preparing_the_pooled_sums_leaves_every_token_set_as_it_was(monkeypatch):
    s = residual_like(B=2, T=9)
    views = ["default", "drop-pos0"]
    clean, flaky = accumulate(s, views, similarities=("cka-full",)), accumulate(s, views, similarities=("cka-full",))
    original = PooledCka.prepare
    calls = {"n": 0}

    def fail_second(self, y):  # the second token set's, after the first's was prepared
        calls["n"] += 1
        if calls["n"] == 2:
            raise MemoryError("out of memory")
        return original(self, y)

    monkeypatch.setattr(PooledCka, "prepare", fail_second)
    with pytest.raises(MemoryError):
        flaky.update(s)
    monkeypatch.setattr(PooledCka, "prepare", original)
    assert flaky.sequences == clean.sequences == 2
    for acc in (clean, flaky):
        acc.update(s)
    for view in views:
        np.testing.assert_array_equal(clean.unit_statistics(view, "cka-full").total()["hsic_full"],
                                      flaky.unit_statistics(view, "cka-full").total()["hsic_full"])


def test_a_non_finite_hsic_gives_nan_never_a_similarity():
    # Read as "unlike the rest" (0), a NaN layer would make D_eff look like a real result.
    from effdepth.numerics.similarity import cka_from_hsic

    h = np.array([[4.0, 1.0, 0.5], [1.0, np.nan, 0.2], [0.5, 0.2, 1.0]])
    sim = cka_from_hsic(h)
    assert np.isnan(sim[1]).all() and np.isnan(sim[:, 1]).all()
    assert sim[0, 2] == pytest.approx(0.25) and sim[0, 0] == 1.0
    assert np.isnan(deff(sim))
