"""Token-mode linear CKA, the cross-sequence estimator (docs/method.md#cka), and cka-full: closed
forms, the isotropic null, views against a naive computation, pairing, precision, accumulation."""

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from effdepth.errors import EffdepthError
from effdepth.numerics import cka as cka_module
from effdepth.numerics.bootstrap import bootstrap_intervals
from effdepth.numerics.cka import CKA_KEYS, ViewUnavailable, centred_view_states, cross_hsic, pair_cka
from effdepth.numerics.cka_full import PooledCka, check_cka_full_memory
from effdepth.numerics.metrics import full_metrics, scalar_metrics, similarity_matrix
from effdepth.numerics.references import reference_fl, reference_from_energies
from effdepth.numerics.similarity import deff
from effdepth.numerics.streams import ViewAccumulator
from effdepth.numerics.views import parse_views

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
    if acc.needs_fit:
        acc.fit_batch(s, mask)
        acc.finalize_fit("test")
    acc.update(s, mask)
    return acc


def fitted_on(states, views, similarities=BOTH):
    """An accumulator whose views are fitted on ``states``, the same fit an update of them alone makes."""
    acc = ViewAccumulator(list(views), similarities=similarities)
    acc.fit_batch(torch.as_tensor(states))
    acc.finalize_fit("the same states")
    return acc


def metrics(acc, view, similarity, include_embedding=False):
    totals = acc.unit_statistics(view, similarity).total()
    return full_metrics(totals, similarity, include_embedding)


def residual_like(L=5, B=4, T=12, d=10, seed=0, offset=3.0):
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


def naive_pair_hsic(yp, yq):
    """h_ij of one pair token pair by token pair: sum_ab (y_p^i[a].y_q^i[b]) (y_p^j[a].y_q^j[b]) / (T_p T_q)."""
    c = np.einsum("iad,ibd->iab", yp, yq)  # every cross inner product, layer by layer
    return np.einsum("iab,jab->ij", c, c) / (yp.shape[1] * yq.shape[1])


def naive_cka_stats(seqs, view, pcs=None):
    """Summed HSIC and update HSIC over the pairs (0, 1), (2, 3), ...; sequences left out."""
    h = u = 0.0
    pairs = left_out = 0
    for p, q in zip(seqs[0::2], seqs[1::2]):
        zp, zq = naive_view(p, view, pcs), naive_view(q, view, pcs)
        if min(zp.shape[1], zq.shape[1]) < 4:
            left_out += 2
            continue
        yp, yq = zp - zp.mean(axis=1, keepdims=True), zq - zq.mean(axis=1, keepdims=True)
        h = h + naive_pair_hsic(yp, yq)
        fp, fq = np.concatenate([yp[:1], np.diff(yp, axis=0)]), np.concatenate([yq[:1], np.diff(yq, axis=0)])
        u = u + naive_pair_hsic(fp, fq)
        pairs += 1
    return h, u, pairs, left_out + len(seqs) % 2


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


def twice(states):
    """One sequence (M, T, d) as a batch of two copies of it: a pair that shares its geometry."""
    return torch.as_tensor(states)[:, None].expand(-1, 2, -1, -1).clone()


# -- closed forms (docs/method.md, section 8) ---------------------------------------------------------


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
    acc = accumulate(isotropic_stream(L, d, n, sequences=4))
    big_n = L + 1 if include else L
    energies = np.arange(1.0, L + 1.0)
    want = reference_from_energies(np.concatenate([[1.0], 1.0 + energies]) if include else energies)
    for sim in BOTH:
        m = metrics(acc, "default", sim, include)
        if not include:
            assert m["deff"] == pytest.approx(reference_fl(big_n), rel=TIGHT)
            expected = np.minimum.outer(energies, energies) / np.maximum.outer(energies, energies)
            np.testing.assert_allclose(m["similarity"], expected, rtol=TIGHT, atol=TIGHT)
        # Matched references from the sizes cka sees: S_0 = 0, equal updates.
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
    for _ in range(4):
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
    s = twice(np.cumsum(np.stack(updates), axis=0))
    for sim in BOTH:
        m = metrics(accumulate(s), "default", sim)
        np.testing.assert_allclose(m["similarity"], 1.0, rtol=TIGHT)
        assert m["deff"] == pytest.approx(1.0, rel=TIGHT)


def test_states_sharing_one_gram_give_one():
    # Each state is Q O_l s_l with O_l orthonormal rows: Y_l Y_l^T = s_l^2 Q Q^T for every layer.
    rng = np.random.default_rng(2)
    n, r, d, L = 12, 3, 7, 4
    q = complement_basis(n, rng)[:, :r]
    s = np.stack([(l + 1.0) * q @ np.linalg.qr(rng.standard_normal((d, r)))[0].T for l in range(L + 1)])
    m = metrics(accumulate(twice(s)), "default", "cka")
    assert m["deff"] == pytest.approx(1.0, rel=TIGHT)


# -- the isotropic null: no self-pair bias (docs/method.md, section 8) -------------------------------


@pytest.mark.parametrize("d", [64, 576, 2048])
def test_isotropic_gaussian_updates_land_within_one_percent_of_fn(d):
    # T = 256 tokens per sequence, d up to 8 T: a per-sequence Gram <YY^T, YY^T> would land far
    # below F_N here (every token compared with itself); the cross Gram never does.
    L, B, T = 12, 8, 256
    g = torch.Generator().manual_seed(d)
    u = torch.randn(L + 1, B, T, d, generator=g)
    u[0] = 0.0  # no initial state
    m = metrics(accumulate(u.cumsum(0), similarities=("cka",)), "default", "cka")
    assert m["deff"] == pytest.approx(reference_fl(L), rel=0.01)
    assert m["reference_matched"] == pytest.approx(reference_fl(L), rel=0.01)


# -- views against the naive computation ----------------------------------

VIEWS = [
    "default",
    "drop-pos0",
    "token-norm",
    "token-norm+drop-pos0",
    "center",
    "top2pc",
    "token-norm+top1pc",
    "drop-pos0+top1pc",
    "center+top1pc",
    "top1pc-shared",
]


def view_pcs(acc, view):
    spec = parse_views([view])[0]
    fit = acc.fits.get(spec.stream)
    return None if not spec.top_pcs else fit["pcs"].numpy()


def assert_cka_equals_the_naive(acc, seqs, views):
    """Each view's summed HSIC and update HSIC equal the naive token-pair computation."""
    for view in views:
        h, u, pairs, left_out = naive_cka_stats(seqs, view, view_pcs(acc, view))
        totals = acc.unit_statistics(view, "cka").total()
        np.testing.assert_allclose(totals["hsic"], h, rtol=TIGHT, err_msg=view)
        np.testing.assert_allclose(totals["update_hsic"], u, rtol=TIGHT, atol=TIGHT * np.abs(u).max(), err_msg=view)
        assert totals["cka_pairs"] == pairs and acc.left_out(view, "cka") == left_out


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_equals_the_naive_cka(view):
    s = residual_like(B=5)  # five: the last sequence has no partner
    mask = torch.ones(s.shape[1], s.shape[2], dtype=torch.bool)
    mask[1, 9:] = False  # a shorter sequence: padding never enters
    acc = accumulate(s, [view], mask=mask, pc_estimate="exact")
    pcs = view_pcs(acc, view)  # the fit itself is tested in test_views.py
    seqs = sequences_of(s, mask)
    assert_cka_equals_the_naive(acc, seqs, [view])
    h, *_ = naive_cka_stats(seqs, view, pcs)
    assert metrics(acc, view, "cka")["deff"] == pytest.approx(deff(cka_sim(h)), rel=TIGHT)
    hf, ef = naive_cka_full(seqs, view, pcs)
    full = acc.unit_statistics(view, "cka-full").total()
    np.testing.assert_allclose(full["hsic_full"], hf, rtol=TIGHT)
    np.testing.assert_allclose(full["cka_full_energy"], ef, rtol=TIGHT)


def test_views_accumulated_together_equal_the_naive_cka():
    s = residual_like(B=6)
    mask = torch.ones(s.shape[1], s.shape[2], dtype=torch.bool)
    mask[1, 9:] = False
    views = ["default", "drop-pos0", "token-norm", "token-norm+drop-pos0", "top1pc", "drop-pos0+top1pc"]
    acc = accumulate(s, views, mask=mask, pc_estimate="exact", similarities=("cka",))
    assert_cka_equals_the_naive(acc, sequences_of(s, mask), views)


def test_the_cross_gram_in_row_blocks_equals_it_whole():
    g = torch.Generator().manual_seed(4)
    yp, yq = (
        torch.randn(3, 37, 5, generator=g, dtype=torch.float64),
        torch.randn(3, 29, 5, generator=g, dtype=torch.float64),
    )
    whole = cross_hsic(yp, yq)
    for budget in (1, 12 * 3 * 29 * 5, 12 * 3 * 29 * 36):  # one row, five rows, all but one
        torch.testing.assert_close(cross_hsic(yp, yq, budget), whole, rtol=1e-12, atol=0)
    np.testing.assert_allclose(whole.numpy(), naive_pair_hsic(yp.numpy(), yq.numpy()), rtol=1e-12)
    s = residual_like(B=4, T=40)
    small = accumulate(s, ["default", "token-norm"], similarities=("cka",), gram_budget_bytes=4096)
    big = accumulate(s, ["default", "token-norm"], similarities=("cka",))
    for view in ("default", "token-norm"):
        np.testing.assert_allclose(
            small.unit_statistics(view, "cka").total()["hsic"],
            big.unit_statistics(view, "cka").total()["hsic"],
            rtol=1e-12,
        )


def test_top_pc_view_matches_pcs_from_an_svd():
    s = residual_like(T=20)
    acc = accumulate(s, ["top1pc"], pc_estimate="exact")
    flat = s.numpy().reshape(s.shape[0], -1, s.shape[-1])
    pcs = []
    for layer in flat:
        _, _, vt = np.linalg.svd(layer - layer.mean(0), full_matrices=False)
        pcs.append(vt[:1].T)
    h, *_ = naive_cka_stats(sequences_of(s), "top1pc", np.stack(pcs))
    np.testing.assert_allclose(acc.unit_statistics("top1pc", "cka").total()["hsic"], h, rtol=1e-7)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), shift=st.floats(-1e3, 1e3), scale=st.floats(1e-3, 1e3))
def test_cka_ignores_a_constant_shift_a_rotation_and_a_scale(seed, shift, scale):
    s = residual_like(seed=seed)
    rot = torch.linalg.qr(
        torch.randn(s.shape[-1], s.shape[-1], dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    )[0]
    moved = scale * (s @ rot) + shift
    a = metrics(accumulate(s, similarities=("cka",)), "default", "cka")
    b = metrics(accumulate(moved, similarities=("cka",)), "default", "cka")
    np.testing.assert_allclose(a["similarity"], b["similarity"], rtol=1e-8)
    assert a["reference_matched"] == pytest.approx(b["reference_matched"], rel=1e-8)


# -- precision: float32 products, float64 sums ---------------------------------------------------


@pytest.mark.parametrize("view", ["default", "drop-pos0", "token-norm", "top1pc"])
def test_float32_states_agree_with_float64_even_with_a_1e4_norm_token(view):
    g = torch.Generator().manual_seed(9)
    L, B, T, d = 6, 6, 64, 48
    s = torch.randn(L + 1, B, T, d, generator=g, dtype=torch.float64).cumsum(0)
    s[:, :, 0] *= 1e4 / s[:, :, 0].norm(dim=-1, keepdim=True)  # a massive first token, norm 1e4
    single = s.float()
    exact = accumulate(single.double(), [view], similarities=("cka",))  # the same inputs, products in float64
    fast = fitted_on(single.double(), [view], similarities=("cka",))  # the same fitted directions
    fast.update(single)
    a, b = metrics(fast, view, "cka"), metrics(exact, view, "cka")
    np.testing.assert_allclose(a["similarity"], b["similarity"], rtol=0, atol=2e-5)
    assert a["deff"] == pytest.approx(b["deff"], rel=1e-5)
    assert a["reference_matched"] == pytest.approx(b["reference_matched"], rel=1e-5)


def test_centring_sums_the_mean_in_float64():
    # A float32 sum of 4096 values of 1e4 and 1 would lose the ones; the mean is summed in float64.
    z = torch.ones(1, 4096, 2)
    z[0, 0] = 1e4
    y = centred_view_states(z, parse_views("default")[0])
    assert y.dtype == torch.float32
    want = z.double() - z.double().mean(dim=1, keepdim=True)
    torch.testing.assert_close(y.double(), want, rtol=0, atol=1e-3)


# -- pairing: sequence order, never the batch size ---------------------------------------


@pytest.mark.parametrize("batch", [1, 2, 3, 7])
def test_pairs_do_not_depend_on_the_batch_size(batch):
    s = residual_like(B=7, T=10)
    mask = torch.ones(7, 10, dtype=torch.bool)
    mask[3, 7:] = False
    views = ["default", "drop-pos0", "token-norm"]
    one = accumulate(s, views, mask=mask, similarities=("cka",))
    split = ViewAccumulator(views, similarities=("cka",))
    for start in range(0, 7, batch):
        split.update(s[:, start : start + batch], mask[start : start + batch])
    for view in views:
        a, b = one.unit_statistics(view, "cka").arrays, split.unit_statistics(view, "cka").arrays
        for k in a:
            np.testing.assert_allclose(b[k], a[k], rtol=1e-12, atol=1e-12, err_msg=f"{view} {k}")
        assert split.left_out(view, "cka") == 1  # the seventh sequence has no partner
    assert split.bootstrap_units("cka") == 3


def test_a_partner_held_across_batches_is_a_copy_of_the_caller_buffer():
    s = residual_like(B=2, T=9)
    buffer = s[:, :1].clone()
    acc = ViewAccumulator(["default"], similarities=("cka",))
    acc.update(buffer)
    buffer.zero_()  # the capture reuses its buffer for the next batch
    acc.update(s[:, 1:])
    want = accumulate(s, similarities=("cka",))
    np.testing.assert_allclose(
        acc.unit_statistics("default", "cka").total()["hsic"],
        want.unit_statistics("default", "cka").total()["hsic"],
        rtol=1e-12,
    )


def test_update_sequence_equals_a_batch():
    s = residual_like(B=4, T=9)
    one = ViewAccumulator(["default", "drop-pos0"], similarities=("cka",))
    each = ViewAccumulator(["default", "drop-pos0"], similarities=("cka",))
    one.update(s)
    for b in range(4):
        each.update_sequence(s[:, b].clone())
    for view in ("default", "drop-pos0"):
        a, b = one.unit_statistics(view, "cka").arrays, each.unit_statistics(view, "cka").arrays
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    with pytest.raises(RuntimeError, match="fitted"):
        ViewAccumulator(["top1pc"]).update_sequence(s[:, 0])


def test_a_failed_update_leaves_the_accumulator_as_it_was(monkeypatch):
    s = residual_like(B=3, T=9)
    acc = ViewAccumulator(["default"], similarities=("cka",))
    acc.update(s[:, :1])  # the first waits for its partner

    def fail(*args):
        pair_cka(*args)  # the pair's unit is built, then the batch fails (e.g. out of memory)
        raise MemoryError

    monkeypatch.setattr(cka_module, "pair_cka", fail)
    with pytest.raises(MemoryError):
        acc.update(s[:, 1:])
    assert acc.bootstrap_units("cka") == 0 and acc.sequences == 1  # nothing of the batch was added
    monkeypatch.undo()
    acc.update(s[:, 1:])
    want = accumulate(s, similarities=("cka",))
    np.testing.assert_array_equal(
        acc.unit_statistics("default", "cka").total()["hsic"], want.unit_statistics("default", "cka").total()["hsic"]
    )


# -- availability, short sequences ------------------------------------------------------


def test_pos0_only_is_unavailable_never_a_number():
    acc = accumulate(residual_like(), ["default", "pos0-only"])
    for sim in BOTH:
        with pytest.raises(ViewUnavailable) as e:
            acc.unit_statistics("pos0-only", sim)
        assert "one token" in e.value.reason and isinstance(e.value, EffdepthError)
        again = pickle.loads(pickle.dumps(e.value))  # crosses process boundaries intact
        assert (again.view, again.similarity, again.reason, str(again)) == (
            "pos0-only",
            sim,
            e.value.reason,
            str(e.value),
        )
    # frobenius still has a value for it
    assert acc.unit_statistics("pos0-only").units == 4


def test_a_pair_with_a_sequence_under_four_tokens_is_left_out_and_counted():
    s = residual_like(B=6, T=8)
    mask = torch.ones(6, 8, dtype=torch.bool)
    mask[1, 3:] = False  # 3 tokens: its pair is out of both views
    mask[2, 4:] = False  # 4 tokens: its pair is in default, out of drop-pos0
    acc = accumulate(s, ["default", "drop-pos0"], mask=mask)
    assert acc.cka_left_out("default") == 2 and acc.cka_left_out("drop-pos0") == 4
    seqs = sequences_of(s, mask)
    for view in ("default", "drop-pos0"):
        h, _, pairs, out = naive_cka_stats(seqs, view)
        totals = acc.unit_statistics(view, "cka").total()
        np.testing.assert_allclose(totals["hsic"], h, rtol=TIGHT)
        # Left out of the view's units (and its bootstrap), and counted.
        assert acc.unit_statistics(view, "cka").units == pairs == (6 - acc.left_out(view, "cka")) // 2
        assert out == acc.left_out(view, "cka")


def test_a_view_without_any_long_enough_pair_is_unavailable():
    acc = accumulate(residual_like(T=4), ["drop-pos0"])
    with pytest.raises(ViewUnavailable, match="at least 4 tokens"):
        acc.unit_statistics("drop-pos0", "cka")
    one = accumulate(residual_like(B=1), ["default"])
    with pytest.raises(ViewUnavailable, match="pair.*at least two"):
        one.unit_statistics("default", "cka")


def test_unaccumulated_similarity_is_an_error():
    acc = accumulate(residual_like(), similarities=())
    with pytest.raises(EffdepthError, match="not accumulated"):
        acc.unit_statistics("default", "cka")


# -- resume, merge, memory ----------------------------------------------


def test_a_state_saved_with_a_partner_held_resumes_to_the_same_numbers():
    s = residual_like(B=6)
    views = ["default", "token-norm+drop-pos0", "top1pc"]
    first = ViewAccumulator(views, similarities=BOTH)
    first.update(s[:, :3])  # an odd count: the third waits for its partner
    arrays, meta = first.state_dict()
    assert meta["similarities"] == list(BOTH) and meta["partner"]["index"] == 2
    resumed = ViewAccumulator(views, similarities=BOTH)
    resumed.load_state_dict({k: np.array(v) for k, v in arrays.items()}, meta)
    resumed.update(s[:, 3:])
    whole = fitted_on(s[:, :3], views, similarities=BOTH)  # fitted as the first was
    whole.update(s)
    for view in views:
        for sim in BOTH:
            a, b = whole.unit_statistics(view, sim).total(), resumed.unit_statistics(view, sim).total()
            for k in a:
                np.testing.assert_allclose(b[k], a[k], rtol=1e-11, atol=1e-11, err_msg=f"{view} {sim} {k}")
    with pytest.raises(EffdepthError, match="kernel similarities"):
        ViewAccumulator(views, similarities=("cka",)).load_state_dict(arrays, meta)


def test_extend_appends_the_other_pairs_after_this_ones_sequences():
    s = residual_like(B=7)
    views = ["default", "top1pc"]
    first = ViewAccumulator(views, similarities=("cka",))
    first.update(s[:, :4])
    rest = fitted_on(s[:, :4], views, similarities=("cka",))  # fitted as the first was
    rest.update(s[:, 4:])
    whole = fitted_on(s[:, :4], views, similarities=("cka",))
    whole.update(s)
    first.merge(rest)
    for view in views:
        a, b = whole.unit_statistics(view, "cka").arrays, first.unit_statistics(view, "cka").arrays
        for k in a:
            np.testing.assert_allclose(b[k], a[k], rtol=1e-12, atol=1e-12)
    assert first.left_out("default", "cka") == whole.left_out("default", "cka") == 1


def test_pooled_merge_with_a_different_shift_equals_one_pass():
    g = torch.Generator().manual_seed(5)
    y = torch.randn(4, 30, 6, generator=g, dtype=torch.float64) + 1e4  # a dominant mean
    whole = PooledCka()
    whole.update(y)
    a, b = PooledCka(), PooledCka()
    a.update(y[:, :7])
    b.update(y[:, 7:] * 1.0)
    a.merge(b)
    for k, v in whole.compute().items():
        np.testing.assert_allclose(a.compute()[k], v, rtol=1e-9)
    yc = (y - y.mean(1, keepdim=True)).numpy()
    exact = np.einsum("itd,jte->ijde", yc, yc)
    np.testing.assert_allclose(whole.compute()["hsic_full"], (exact**2).sum((2, 3)) / 29**2, rtol=1e-9)


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
    acc = accumulate(residual_like(B=8))
    stats = acc.unit_statistics("default", "cka-full")
    assert stats.units == 1
    assert bootstrap_intervals(stats, similarity="cka-full", include_embedding=False, resamples=50) is None
    ci = bootstrap_intervals(
        acc.unit_statistics("default", "cka"), similarity="cka", include_embedding=False, resamples=50
    )
    assert ci["units"] == 4 and ci["deff"][0] <= ci["deff"][1]  # four pairs
    m = metrics(acc, "default", "cka-full")
    assert set(m["reference_profiles"]) == {"fl", "init", "size", "matched"}


def test_a_resample_without_any_cka_pair_is_nan_not_a_number():
    from effdepth.numerics.statistics import UnitStatistics

    s = residual_like(B=6, T=6)
    mask = torch.ones(6, 6, dtype=torch.bool)
    mask[2:, 3:] = False  # only the first pair has a cka value
    acc = accumulate(s, mask=mask)
    assert acc.unit_statistics("default", "cka").units == 1  # the others are left out
    # Totals that hold no cka pair (e.g. a resample of left-out units: their cka keys are zeros)
    # are NaN, never a number.
    kept = acc.unit_statistics("default", "cka").arrays
    left_out = {k: np.zeros_like(v) if k in CKA_KEYS else v for k, v in kept.items()}
    stats = UnitStatistics({k: np.concatenate([kept[k], left_out[k], left_out[k]]) for k in kept})
    totals = stats.weighted_totals(np.array([[0, 2, 1], [1, 1, 1]]))
    d = scalar_metrics(totals, "cka", False)["deff"]
    assert np.isnan(d[0]) and np.isfinite(d[1])


def test_cka_and_cka_full_are_close_on_residual_like_data():
    # cka-full is biased by about d / T; with T >> d the two agree.
    g = torch.Generator().manual_seed(11)
    L, B, T, d = 6, 8, 256, 8
    shared = torch.randn(L + 1, 1, 1, d, generator=g, dtype=torch.float64) * 2.0
    s = (torch.randn(L + 1, B, T, d, generator=g, dtype=torch.float64) + shared).cumsum(0)
    acc = accumulate(s)
    a = metrics(acc, "default", "cka")["deff"]
    b = metrics(acc, "default", "cka-full")["deff"]
    assert a == pytest.approx(b, rel=0.03)
    assert (
        np.abs(
            similarity_matrix(acc.unit_statistics("default", "cka").total(), "cka", False)
            - similarity_matrix(acc.unit_statistics("default", "cka-full").total(), "cka-full", False)
        ).max()
        < 0.03
    )


def test_a_pair_unit_holds_the_pair_statistics():
    y = torch.randn(3, 6, 4, dtype=torch.float64)
    unit = pair_cka(y - y.mean(1, keepdim=True), y.flip(1) - y.mean(1, keepdim=True))
    assert set(unit) == set(CKA_KEYS) and float(unit["cka_pairs"]) == 1.0 and float(unit["cka_tokens"]) == 12.0


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
        np.testing.assert_array_equal(
            clean.unit_statistics(view, "cka-full").total()["hsic_full"],
            flaky.unit_statistics(view, "cka-full").total()["hsic_full"],
        )


def test_a_non_finite_hsic_gives_nan_never_a_similarity():
    # Read as "unlike the rest" (0), a NaN layer would make D_eff look like a real result.
    from effdepth.numerics.similarity import cka_from_hsic

    h = np.array([[4.0, 1.0, 0.5], [1.0, np.nan, 0.2], [0.5, 0.2, 1.0]])
    sim = cka_from_hsic(h)
    assert np.isnan(sim[1]).all() and np.isnan(sim[:, 1]).all()
    assert sim[0, 2] == pytest.approx(0.25) and sim[0, 0] == 1.0
    assert np.isnan(deff(sim))
