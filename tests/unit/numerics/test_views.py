"""Views (docs/method.md#views): each equals its transform applied to the raw states, then the default."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import effdepth
from effdepth.errors import EffdepthError
from effdepth.numerics.fits import FitAccumulator
from effdepth.numerics.views import parse_view, parse_views


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


VIEWS = [
    "default",
    "drop-pos0",
    "pos0-only",
    "token-norm",
    "center",
    "top2pc",
    "token-norm+drop-pos0",
    "drop-pos0+center",
]


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
    from effdepth.numerics.fits import FitAccumulator

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
    grams = {name: np.array(v[name].statistics["gram_states"]) for name in v}
    np.testing.assert_allclose(grams["default"], grams["drop-pos0"] + grams["pos0-only"], rtol=1e-12)


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
        "default",
        "drop-pos0",
        "pos0-only",
        "token-norm",
        "top1pc",
        "token-norm+drop-pos0",
    ]
    assert [v.name for v in parse_views("default,paper")][:2] == ["default", "drop-pos0"]
    for bad in ["nonsense", "top0pc", "drop-pos0+pos0-only", "token-norm+token-norm", ""]:
        with pytest.raises(EffdepthError) as e:
            parse_views([bad]) if bad else parse_view(bad)
        assert "\n" not in str(e.value)


def test_every_view_reports_everything():
    r = from_states(states(B=4), views="paper", bootstrap=50)
    for v in r.views.values():
        assert v.ci is not None and set(v.ci) >= {"deff", "ratio", "gap_pct", "initial_state", "profile"}
        assert len(v.profile) == v.num_states and v.references and v.attribution and v.related["angular_distance"]


@pytest.mark.parametrize("spectrum", ["gapped", "flat"])
def test_top_eigenpairs_match_a_naive_eigendecomposition(spectrum):
    from effdepth.numerics.fits import relative_eigengap, top_eigenpairs

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 400, 64, generator=g, dtype=torch.float64)
    if spectrum == "gapped":
        x[:, :, :2] *= torch.tensor([20.0, 8.0], dtype=torch.float64)
    cov = x.transpose(1, 2) @ x / 400
    vectors, values = top_eigenpairs(cov, 2)
    want_values, want_vectors = np.linalg.eigh(cov.numpy())
    want = want_vectors[..., -2:]
    # Compare projections: eigenvector signs are arbitrary.
    np.testing.assert_allclose((vectors @ vectors.transpose(1, 2)).numpy(), want @ want.transpose(0, 2, 1), atol=1e-8)
    np.testing.assert_allclose(values.numpy(), want_values[:, ::-1][:, :3], rtol=1e-12)
    np.testing.assert_allclose(relative_eigengap(values, 2), 1 - want_values[:, -3] / want_values[:, -2], rtol=1e-12)


def correlated_layers(L=5, n=400, d=48, seed=5):
    """States whose layers share a planted leading direction plus fresh noise, as residual streams do."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(L + 1, n, d, generator=g)
    x[..., :3] *= torch.tensor([9.0, 5.0, 3.0])
    return x.cumsum(0)


@pytest.mark.parametrize("views", [("top1pc",), ("top2pc", "top1pc-shared", "center"), ("token-norm+top2pc",)])
def test_a_fit_streamed_in_parts_equals_the_naive_fit_of_all_states(views):
    s = correlated_layers()
    specs = [parse_view(v) for v in views]
    token_norm = "token-norm" in views[0]
    acc = FitAccumulator()
    for part in (s[:, :150], [s[:, 150:170], s[:, 170:]]):
        acc.update(part, specs[0].before_fit)
    y = s.double() / (s.double().norm(dim=-1, keepdim=True) if token_norm else 1.0)
    mean = y.mean(1)
    cov = (y - mean[:, None]).transpose(1, 2) @ (y - mean[:, None]) / y.shape[1]
    for spec in specs:
        fit = acc.fit(spec)
        torch.testing.assert_close(fit["mean"], mean, rtol=1e-12, atol=1e-12)
        if spec.top_pcs:
            c = cov.mean(0, keepdim=True) if spec.name.endswith("-shared") else cov
            want = np.linalg.eigh(c.numpy())[1][..., -spec.top_pcs :]
            got = fit["pcs"].numpy()
            np.testing.assert_allclose(got @ got.transpose(0, 2, 1), want @ want.transpose(0, 2, 1), atol=1e-9)


def test_a_float32_calibration_fit_agrees_with_the_float64_one():
    # The calibration estimate forms each update's centred product in float32; its directions
    # differ from float64's by rounding only (the centring comes first, in float64).
    s = correlated_layers() + 1e4  # a dominant mean
    spec = parse_view("top1pc")
    fits = []
    for precision in (torch.float32, torch.float64):
        acc = FitAccumulator(precision=precision)
        acc.update(s)
        fits.append(acc.fit(spec))
    proj = [f["pcs"] @ f["pcs"].transpose(1, 2) for f in fits]
    torch.testing.assert_close(proj[0], proj[1], rtol=0, atol=1e-5)
    np.testing.assert_allclose(fits[0]["eigengap"], fits[1]["eigengap"], rtol=1e-5)


def test_merged_accumulators_equal_one_fed_everything():
    s = correlated_layers().double() + 1e6
    a, b, both = FitAccumulator(), FitAccumulator(), FitAccumulator()
    a.update(s[:, :100])
    b.update(s[:, 100:])
    both.update(s)
    a.merge(b)
    empty = FitAccumulator()
    empty.merge(both)
    for acc in (a, empty):
        assert acc.count == both.count
        torch.testing.assert_close(acc.mean, both.mean, rtol=1e-14, atol=0)
        torch.testing.assert_close(acc.scatter, both.scatter, rtol=1e-10, atol=1e-6)


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
    want = FitAccumulator(precision=torch.float32)
    want.update(s)
    fit = next(iter(acc.fits.values()))
    torch.testing.assert_close(fit["mean"], want.fit(parse_view("top1pc"))["mean"], rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("k", [1, 2, 5])
@pytest.mark.parametrize("batched", [False, True])
def test_removing_directions_equals_the_naive_projection(k, batched):
    from effdepth.numerics.fits import remove_directions

    g = torch.Generator().manual_seed(k)
    shape = (3, 7, 11) if batched else (7, 11)
    states = torch.randn(*shape, generator=g, dtype=torch.float64)
    directions = torch.linalg.qr(torch.randn(*shape[:-2], 11, k, generator=g, dtype=torch.float64))[0]
    x, v = states.numpy(), directions.numpy()
    want = x - (x @ v) @ np.swapaxes(v, -1, -2)
    np.testing.assert_allclose(remove_directions(states, directions).numpy(), want, rtol=0, atol=1e-13)
