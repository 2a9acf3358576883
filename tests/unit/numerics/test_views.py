"""Views (docs/method.md#views): each equals its transform applied to the raw states, then the default."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import effdepth
from effdepth.errors import EffdepthError
from effdepth.numerics.views import FitAccumulator, parse_view, parse_views


def from_states(states, **options):
    """These closed forms and identities are the cosine families': frobenius unless a test says otherwise."""
    options.setdefault("similarity", "frobenius")
    return effdepth.from_states(states, **options)


def states(L=5, B=3, T=6, d=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(L + 1, B, T, d, generator=g, dtype=torch.float64)
    return x.cumsum(0) + 0.5


def naive_default(s):
    """D_eff of (M, B, T, d) states, by hand."""
    S = s.reshape(s.shape[0], -1).numpy()
    S = S[1:]
    G = S @ S.T
    sim = G**2 / np.outer(np.diag(G), np.diag(G))
    return S.shape[0] ** 2 / sim.sum()


def per_layer_pcs(x, k):
    """Top-k principal directions of each layer's mean-centred tokens: (M, d, k)."""
    out = []
    for layer in x:
        flat = layer.reshape(-1, layer.shape[-1])
        c = flat - flat.mean(0)
        _, _, vt = torch.linalg.svd(c, full_matrices=False)
        out.append(vt[:k].T)
    return torch.stack(out)


def remove(x, v):
    flat = x.reshape(x.shape[0], -1, x.shape[-1])
    return (flat - flat @ v @ v.transpose(1, 2)).reshape(x.shape)


def transform(view, s):
    if view == "default":
        return s
    if view == "drop-pos0":
        return s[:, :, 1:]
    if view == "pos0-only":
        return s[:, :, :1]
    if view == "token-norm":
        return s / s.norm(dim=-1, keepdim=True)
    if view == "center":
        return s - s.reshape(s.shape[0], -1, s.shape[-1]).mean(1)[:, None, None]
    if view == "top2pc":
        return remove(s, per_layer_pcs(s, 2))
    if view == "token-norm+drop-pos0":
        return transform("token-norm", s)[:, :, 1:]
    if view == "drop-pos0+center":
        return transform("center", s[:, :, 1:])
    raise AssertionError(view)


VIEWS = ["default", "drop-pos0", "pos0-only", "token-norm", "center", "top2pc", "token-norm+drop-pos0", "drop-pos0+center"]


@pytest.mark.parametrize("view", VIEWS)
def test_view_equals_transform_then_default(view):
    s = states()
    got = from_states(s, views=[view], pc_estimate="exact").views[view].deff
    assert got == pytest.approx(naive_default(transform(view, s)), rel=1e-9)


def test_calibration_fit_uses_first_batch_which_here_is_everything():
    # Same tokens; calibration forms its scatter matrices in float32, exact in float64.
    s = states()
    a = from_states(s, views=["top2pc"], pc_estimate="exact").views["top2pc"]
    b = from_states(s, views=["top2pc"], pc_estimate="calibration").views["top2pc"]
    assert a.deff == pytest.approx(b.deff, rel=1e-5)


def test_fit_is_robust_to_a_dominant_mean():
    # A huge shared offset (massive activation) must not cancel the covariance away.
    from effdepth.numerics.views import FitAccumulator

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 500, 6, generator=g, dtype=torch.float64)
    x[..., 0] *= 5.0
    offset = torch.tensor([0, 0, 0, 0, 0, 1e7], dtype=torch.float64)
    acc = FitAccumulator(precision=torch.float32)
    for part in (x[:, :200], x[:, 200:]):
        acc.update(part + offset)
    got = acc.fit(parse_view("top1pc"))["pcs"][:, :, 0]
    centred = x - x.mean(1, keepdim=True)
    want = torch.linalg.eigh(centred.transpose(1, 2) @ centred)[1][:, :, -1]
    assert torch.allclose((got * want).sum(-1).abs(), torch.ones(2, dtype=torch.float64), atol=1e-6)
    torch.testing.assert_close(acc.mean, x.mean(1) + offset, rtol=1e-12, atol=1e-6)


def test_views_sharing_a_fit_feed_it_once():
    from effdepth.numerics.streams import ViewAccumulator

    acc = ViewAccumulator(["center", "top1pc", "center+top1pc"], pc_estimate="exact")
    s = states()
    acc.fit_batch(s)
    acc.finalize_fit("test")
    assert set(acc.fit_info["tokens"].values()) == {s.shape[1] * s.shape[2]}


def test_top1pc_recovers_a_planted_dominant_direction():
    s = states(T=40)
    g = torch.Generator().manual_seed(3)
    direction = torch.randn(s.shape[-1], generator=g, dtype=torch.float64)
    direction /= direction.norm()
    strength = torch.randn(s.shape[1], s.shape[2], generator=g, dtype=torch.float64) * 1e4
    planted = s + strength[None, :, :, None] * direction
    r = from_states(planted, views=["default", "top1pc"], pc_estimate="exact")
    clean = from_states(s, views=["default"]).views["default"].deff
    # the planted direction makes every layer look alike...
    assert r.views["default"].deff < 1.01
    # ...and removing the top PC gives back the clean stream's D_eff.
    assert r.views["top1pc"].deff == pytest.approx(clean, rel=0.05)


@settings(max_examples=25, deadline=None)
@given(scale=st.floats(1e-6, 1e6), b=st.integers(0, 2), t=st.integers(0, 5))
def test_token_norm_is_invariant_to_rescaling_a_token(scale, b, t):
    s = states()
    scaled = s.clone()
    scaled[:, b, t] *= scale
    a = from_states(s, views=["token-norm"]).views["token-norm"].deff
    c = from_states(scaled, views=["token-norm"]).views["token-norm"].deff
    assert a == pytest.approx(c, rel=1e-10)


def test_drop_pos0_ignores_a_huge_position_zero_default_does_not():
    s = states()
    huge = s.clone()
    huge[:, :, 0] = 1e9 * torch.ones(s.shape[-1], dtype=torch.float64)  # same huge vector every layer
    a = from_states(s, views=["default", "drop-pos0"]).views
    b = from_states(huge, views=["default", "drop-pos0"]).views
    assert b["drop-pos0"].deff == pytest.approx(a["drop-pos0"].deff, rel=1e-12)
    assert b["default"].deff < 1.0001  # dominated: every layer looks like position 0
    assert a["default"].deff > 1.2


def test_parts_add_up_to_default():
    s = states()
    v = from_states(s, views=["default", "drop-pos0", "pos0-only"]).views
    g = lambda name: np.array(v[name].statistics["gram_states"])
    np.testing.assert_allclose(g("default"), g("drop-pos0") + g("pos0-only"), rtol=1e-12)


def test_selection_and_token_norm_commute():
    s = states()
    r = from_states(s, views=["token-norm+drop-pos0", "drop-pos0+token-norm"]).views
    assert r["token-norm+drop-pos0"].deff == r["drop-pos0+token-norm"].deff


def test_documented_order_selection_before_center():
    # center+drop-pos0 is applied in the documented order: select, then centre.
    s = states()
    r = from_states(s, views=["center+drop-pos0"], pc_estimate="exact").views["center+drop-pos0"]
    assert r.deff == pytest.approx(naive_default(transform("drop-pos0+center", s)), rel=1e-9)
    assert parse_view("center+drop-pos0").canonical == "drop-pos0+center"
    assert parse_view("top1pc+token-norm+center").canonical == "token-norm+center+top1pc"


def test_shared_pcs_remove_one_direction_for_all_layers():
    s = states(T=30)
    v = from_states(s, views=["top1pc-shared"], pc_estimate="exact").views["top1pc-shared"]
    flat = s.reshape(s.shape[0], -1, s.shape[-1])
    cov = torch.stack([torch.cov(layer.T, correction=0) for layer in flat]).mean(0)
    _, vecs = torch.linalg.eigh(cov)
    u = vecs[:, -1:]
    expected = naive_default((flat - flat @ u @ u.T).reshape(s.shape))
    assert v.deff == pytest.approx(expected, rel=1e-9)


def test_paper_views_and_errors():
    assert [v.name for v in parse_views("paper")] == [
        "default", "drop-pos0", "pos0-only", "token-norm", "top1pc", "token-norm+drop-pos0",
    ]
    assert [v.name for v in parse_views("default,paper")][:2] == ["default", "drop-pos0"]
    for bad in ["nonsense", "top0pc", "drop-pos0+pos0-only", "token-norm+token-norm", ""]:
        with pytest.raises(EffdepthError) as e:
            parse_views([bad]) if bad else parse_view(bad)
        assert "\n" not in str(e.value)


def test_every_view_reports_everything():
    r = from_states(states(B=4), views="paper", bootstrap=50)
    for name, v in r.views.items():
        assert v.ci is not None and set(v.ci) >= {"deff", "ratio", "gap_pct", "initial_state", "profile"}
        assert len(v.profile) == v.num_states and v.references and v.attribution and v.related["angular_distance"]


@pytest.mark.parametrize("spectrum", ["gapped", "flat"])
def test_top_eigenvectors_match_eigh(spectrum):
    from effdepth.numerics.views import top_eigenvectors

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 400, 64, generator=g, dtype=torch.float64)
    if spectrum == "gapped":
        x[:, :, :2] *= torch.tensor([20.0, 8.0], dtype=torch.float64)
    cov = x.transpose(1, 2) @ x / 400
    got = top_eigenvectors(cov, 2)
    want = torch.linalg.eigh(cov)[1][..., -2:].flip(-1)
    # compare projections (eigenvector signs are arbitrary)
    torch.testing.assert_close(got @ got.transpose(1, 2), want @ want.transpose(1, 2), rtol=0, atol=1e-8)


@pytest.mark.parametrize("tol", [1e-6, 1e-9, 1e-12])
@pytest.mark.parametrize("spectrum", ["gapped", "slow", "flat"])
def test_top_eigenpairs_meet_their_residual_tolerance(spectrum, tol):
    from effdepth.numerics.views import relative_eigengap, top_eigenpairs

    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 300, 64, generator=g, dtype=torch.float64)
    if spectrum != "flat":
        x[:, :, 0] *= 12.0 if spectrum == "gapped" else 1.6  # "slow": a small gap, many iterations
    cov = x.transpose(1, 2) @ x / 300
    vecs, values = top_eigenpairs(cov, 1, tol=tol)
    lam = values[:, :1]
    residual = (cov @ vecs - vecs * lam[:, None, :]).norm(dim=1) / lam
    assert float(residual.max()) <= tol
    exact = torch.linalg.eigvalsh(cov)[:, -2:].flip(-1)
    torch.testing.assert_close(values[:, 0], exact[:, 0], rtol=max(tol, 1e-12), atol=0)
    # lambda_2 is converged as far as the eigen-gap needs: that gap within about the tolerance (its
    # error bound rests on the Ritz values' own estimate of how far lambda_2 is from lambda_3).
    gaps = np.asarray(relative_eigengap(values, 1))
    np.testing.assert_allclose(gaps, (1 - exact[:, 1] / exact[:, 0]).numpy(), rtol=0, atol=10 * max(tol, 1e-12))


def test_a_calibration_fit_is_solved_to_the_precision_of_its_float32_scatter():
    from effdepth.numerics.views import CALIBRATION_EIGEN_TOL

    g = torch.Generator().manual_seed(2)
    s = torch.randn(3, 500, 32, generator=g)
    s[..., 0] *= 6.0
    spec = parse_view("top1pc")
    for precision, tol in ((torch.float32, CALIBRATION_EIGEN_TOL), (torch.float64, 1e-9)):
        acc = FitAccumulator(precision=precision)
        acc.update(s)
        v = acc.fit(spec)["pcs"]
        cov = acc.scatter / acc.count
        lam = (v.transpose(1, 2) @ cov @ v)[..., 0]
        residual = (cov @ v - v * lam[:, None, :]).norm(dim=1) / lam
        assert float(residual.max()) <= tol


def test_a_flat_spectrum_goes_to_the_dense_solver_instead_of_iterating_on():
    from unittest import mock

    from effdepth.numerics.views import top_eigenpairs

    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 300, 64, generator=g, dtype=torch.float64)  # isotropic: Ritz ratios near 1
    cov = x.transpose(1, 2) @ x / 300
    with mock.patch.object(torch.linalg, "qr", wraps=torch.linalg.qr) as qr:
        vecs, values = top_eigenpairs(cov, 1, tol=1e-9)
    assert qr.call_count <= 3  # the start basis and two iterations, not all 24
    exact = torch.linalg.eigh(cov)
    torch.testing.assert_close(values[:, 0], exact[0][:, -1], rtol=1e-12, atol=0)
    torch.testing.assert_close((vecs[..., 0] * exact[1][..., -1]).sum(-1).abs(), torch.ones(4, dtype=torch.float64))


def correlated_layers(L=5, n=400, d=48, seed=5):
    """States whose layers share a planted leading direction plus fresh noise: consecutive
    layers have nearly the same principal directions, as residual streams do."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(L + 1, n, d, generator=g)
    x[..., :3] *= torch.tensor([9.0, 5.0, 3.0])
    return x.cumsum(0)


@pytest.mark.parametrize("views", [("top1pc",), ("top1pc", "top2pc", "top1pc-shared", "center"), ("token-norm+top2pc",),
                                   ("center",), ("top1pc-shared", "center")])
def test_a_held_calibration_fit_equals_the_streamed_scatter(views):
    # A calibration set is fitted layer by layer (no (L+1) x d x d scatter); the streamed
    # scatter is what a run fitted on several batches or an exact estimate uses.
    from effdepth.numerics.views import CALIBRATION_EIGEN_TOL, token_transform

    s = correlated_layers()
    parts = [s[:, :150], s[:, 150:]]
    specs = [parse_view(v) for v in views]
    transform = (lambda z: token_transform(z, specs[0])) if specs[0].token_norm else None
    kw = dict(precision=torch.float32, layer_pcs=max((v.top_pcs for v in specs if not v.shared_pcs), default=0),
              shared=any(v.shared_pcs for v in specs))
    deferred, streamed = FitAccumulator(**kw), FitAccumulator(**kw)
    deferred.update(parts, transform, hold=True)
    streamed.update(parts, transform)
    assert deferred.scatter is None and deferred.count == streamed.count == 400
    for spec in specs:
        got, want = deferred.fit(spec), streamed.fit(spec)
        torch.testing.assert_close(got["mean"], want["mean"], rtol=1e-12, atol=1e-12)
        if spec.top_pcs:
            proj = lambda v: v @ v.transpose(1, 2)  # noqa: E731  (signs are arbitrary)
            torch.testing.assert_close(proj(got["pcs"]), proj(want["pcs"]), rtol=0, atol=10 * CALIBRATION_EIGEN_TOL)
            np.testing.assert_allclose(got["eigengap"], want["eigengap"], rtol=1e-5)
    assert deferred.scatter is None  # still nothing of (L+1) x d x d held


def test_a_second_update_turns_the_held_one_into_the_streamed_scatter():
    s = correlated_layers()
    deferred, streamed = FitAccumulator(layer_pcs=1), FitAccumulator(layer_pcs=1)
    for acc in (deferred, streamed):
        acc.update(s[:, :200], hold=acc is deferred)
        acc.update(s[:, 200:], hold=acc is deferred)
    torch.testing.assert_close(deferred.scatter, streamed.scatter, rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(deferred.fit(parse_view("top1pc"))["pcs"].abs(), streamed.fit(parse_view("top1pc"))["pcs"].abs())


def test_each_layer_starts_from_the_previous_layers_directions():
    from unittest import mock

    # Every layer the same: from the second on, the start is already converged.
    one = correlated_layers(L=0, d=64)[0]
    s = one.expand(6, -1, -1).contiguous()
    acc = FitAccumulator(layer_pcs=1, precision=torch.float64)
    acc.update(s, hold=True)
    with mock.patch.object(torch.linalg, "qr", wraps=torch.linalg.qr) as qr:
        acc.fit(parse_view("top1pc"))
    first = FitAccumulator(layer_pcs=1, precision=torch.float64)
    first.update(s[:1], hold=True)
    with mock.patch.object(torch.linalg, "qr", wraps=torch.linalg.qr) as alone:
        first.fit(parse_view("top1pc"))
    assert qr.call_count == alone.call_count + 5  # one QR (of the start) per further layer



@pytest.mark.parametrize("precision,tol", [(torch.float64, 1e-9), (torch.float32, 1e-6)])
def test_a_held_fit_takes_its_directions_from_the_states_without_forming_the_covariance(precision, tol):
    # Layers sharing their leading directions: each starts from the last one's and converges in a
    # few O(n d q) products; no d x d covariance is formed, and the result is the exact
    # eigendecomposition's (lambda_2 included: the eigen-gap).
    from unittest import mock

    from effdepth.numerics import views

    s = correlated_layers(L=7, n=600, d=64)
    acc = FitAccumulator(precision=precision, layer_pcs=1)
    acc.update(s, hold=True)
    with mock.patch.object(views, "symmetric_product", wraps=views.symmetric_product) as covariance, \
         mock.patch.object(views, "_data_eigenpairs", wraps=views._data_eigenpairs) as data:
        fit = acc.fit(parse_view("top1pc"))
    assert covariance.call_count == 0 and data.call_count == 8
    y = s.double() - s.double().mean(1, keepdim=True)
    values, vectors = torch.linalg.eigh(y.transpose(1, 2) @ y / 600)
    got = fit["pcs"][..., 0]
    np.testing.assert_allclose((got * vectors[..., -1]).sum(-1).abs().numpy(), 1.0, atol=10 * tol)
    gaps = (1 - values[:, -2] / values[:, -1]).numpy()
    np.testing.assert_allclose(fit["eigengap"], gaps, rtol=10 * tol)


def test_a_held_fit_of_a_flat_spectrum_forms_the_covariance_after_a_few_products():
    # Isotropic states converge too slowly from the states themselves: the covariance route
    # takes over (after at most three products), with its own answer.
    from unittest import mock

    from effdepth.numerics import views

    x = torch.randn(3, 400, 64, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    held, streamed = FitAccumulator(layer_pcs=1), FitAccumulator(layer_pcs=1)
    held.update(x, hold=True)
    streamed.update(x)
    with mock.patch.object(torch.nn.functional, "linear", wraps=torch.nn.functional.linear) as products, \
         mock.patch.object(views, "symmetric_product", wraps=views.symmetric_product) as covariance:
        got = held.fit(parse_view("top1pc"))
    assert products.call_count <= 3 * 3 and covariance.call_count == 3
    want = streamed.fit(parse_view("top1pc"))
    torch.testing.assert_close(got["pcs"].abs(), want["pcs"].abs(), rtol=0, atol=1e-8)
    np.testing.assert_allclose(got["eigengap"], want["eigengap"], rtol=1e-8)


def test_the_states_route_needs_a_subspace_well_below_the_width():
    from effdepth.numerics.views import DATA_EXTRA_VECTORS, _data_eigenpairs

    y = torch.randn(50, 4 * (1 + DATA_EXTRA_VECTORS), dtype=torch.float64)
    assert _data_eigenpairs(y - y.mean(0), 1, 1e-9, None) is None


@pytest.mark.parametrize("estimate", ["calibration", "exact"])
def test_non_finite_states_in_a_fit_name_the_layer_and_the_dtype(estimate):
    from effdepth.numerics.streams import ViewAccumulator

    s = states().float()
    s[3, 1, 2, 0] = float("inf")
    acc = ViewAccumulator(["default", "top1pc"], pc_estimate=estimate)
    with pytest.raises(EffdepthError, match=r"block 3 \(S_3\) with dtype float32.*--dtype"):
        if estimate == "calibration":
            acc.update(s)
            acc.flush()  # a set this small is held until the run ends
        else:
            acc.fit_batch(s)


def test_a_fit_fed_from_a_reused_buffer_takes_each_batch_as_it_was_fed():
    # The surrogate streams feed their fit from one work buffer, rewritten for every sequence:
    # nothing of a batch fed without hold may be read after the next one is written.
    from effdepth.numerics.streams import ViewAccumulator

    s = correlated_layers()
    buffer = torch.empty_like(s[:, :200])
    acc = ViewAccumulator(["top1pc"], similarities=())
    for part in (s[:, :200], s[:, 200:]):
        buffer.copy_(part)
        acc.fit_batch(buffer[:, None])
    acc.finalize_fit("test")
    want = FitAccumulator(precision=torch.float32, layer_pcs=1)
    want.update(s)
    fit = next(iter(acc.fits.values()))
    torch.testing.assert_close(fit["mean"], want.fit(parse_view("top1pc"))["mean"], rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("width", [1, 127, 255, 256, 385, 577, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_scatter_formed_over_its_upper_triangle_equals_the_full_product(width, dtype):
    from effdepth.numerics.views import symmetric_product

    y = torch.randn(37, width, generator=torch.Generator().manual_seed(width), dtype=dtype)
    got = symmetric_product(y)
    scale = (y.abs().T @ y.abs()).to(torch.float64)  # the products' magnitudes bound their rounding
    eps = torch.finfo(dtype).eps
    assert float(((got.double() - (y.double().T @ y.double())).abs() / scale).max()) < 40 * eps


@pytest.mark.parametrize("k", [1, 2, 5])
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("in_place", [False, True])
def test_removing_k_scores_times_directions_equals_the_naive_product(k, batched, in_place):
    # k = 1 (top1pc, the paper's view) takes an element-wise outer product instead of a matrix
    # product of inner size 1: the same numbers to rounding, for every shape it is used with.
    from effdepth.numerics.views import minus_product

    g = torch.Generator().manual_seed(k)
    shape = (3, 7, 11) if batched else (7, 11)
    base = torch.randn(*shape, generator=g, dtype=torch.float64)
    left = torch.randn(*shape[:-1], k, generator=g, dtype=torch.float64)
    right = torch.randn(*shape[:-2], k, shape[-1], generator=g, dtype=torch.float64)
    want = base.numpy() - left.numpy() @ right.numpy()
    before = base.clone()
    got = minus_product(base, left, right, in_place=in_place)
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-13)
    if in_place:
        assert got.data_ptr() == base.data_ptr()
    else:
        assert torch.equal(base, before)


def test_the_dense_solver_of_a_calibration_fit_meets_its_tolerance_in_float32_or_again_in_float64():
    # Surrogate streams' near-flat spectra always end in the dense solver: float32 where the
    # calibration tolerance allows, float64 again for a matrix whose top vectors miss it there.
    from effdepth.numerics.views import CALIBRATION_EIGEN_TOL, dense_eigh

    g = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(2, 200, 200, generator=g, dtype=torch.float64))
    lam = torch.linspace(0.5, 1.0, 200, dtype=torch.float64).repeat(2, 1)
    lam[0, -2:] = torch.tensor([2.0, 1e4], dtype=torch.float64)  # lambda_2 / lambda_1 = 2e-4: float32 misses
    cov = q @ torch.diag_embed(lam) @ q.transpose(1, 2)

    def residuals(values, vectors, k=2):
        top, leading = vectors[..., -k:], values[..., -k:]
        return ((cov @ top - top * leading[:, None]).norm(dim=1) / leading.abs()).max(dim=1).values

    float32 = residuals(*(t.double() for t in torch.linalg.eigh(cov.float())))
    assert float32[0] > CALIBRATION_EIGEN_TOL >= float32[1]
    values, vectors = dense_eigh(cov, 2, CALIBRATION_EIGEN_TOL)
    got = residuals(values, vectors)
    assert vectors.dtype == torch.float64
    np.testing.assert_allclose(vectors.norm(dim=1).numpy(), 1.0, rtol=1e-14)
    assert got[0] < 1e-12  # solved again in float64
    assert 1e-10 < got[1] <= CALIBRATION_EIGEN_TOL  # float32 was enough
    np.testing.assert_allclose(values[:, -2:].numpy(), lam[:, -2:].numpy(), rtol=1e-6)
    assert float(residuals(*dense_eigh(cov, 2, 1e-9)).max()) < 1e-12  # an exact fit: float64 throughout


def test_a_float32_dense_solve_that_fails_is_done_in_float64(monkeypatch):
    from effdepth.numerics import views

    real_eigh = torch.linalg.eigh

    def eigh(a, *args, **kwargs):
        if a.dtype == torch.float32:
            raise torch.linalg.LinAlgError("linalg.eigh: the algorithm failed to converge")
        return real_eigh(a, *args, **kwargs)

    monkeypatch.setattr(torch.linalg, "eigh", eigh)
    cov = torch.diag(torch.tensor([1.0, 5.0, 2.0], dtype=torch.float64))[None]
    values, vectors = views.dense_eigh(cov, 1, views.CALIBRATION_EIGEN_TOL)
    assert values.dtype == torch.float64 and float(values[0, -1]) == 5.0
    assert vectors[0, :, -1].abs().tolist() == [0.0, 1.0, 0.0]
