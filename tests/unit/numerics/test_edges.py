"""Edges: degenerate views, runaway inputs, fits on enough data, intervals for every reported summary."""

import math
import warnings

import numpy as np
import pytest
import torch

import effdepth
from effdepth.errors import EffdepthError
from effdepth.measure import MeasurementState
from effdepth.numerics.bootstrap import bootstrap_intervals, bootstrap_weights
from effdepth.numerics.fits import FitAccumulator, calibration_prefix, top_eigenpairs
from effdepth.numerics.references import reference_fl
from effdepth.numerics.statistics import UnitStatistics
from effdepth.numerics.streams import ViewAccumulator
from effdepth.numerics.views import parse_view
from effdepth.options import AnalysisOptions

SIMILARITIES = ("frobenius", "token", "cka")


def residual(L=4, B=3, T=8, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(L + 1, B, T, d, generator=g, dtype=torch.float64).cumsum(0) + 0.3


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# -- 1. a view with no tokens ---------------------------------------------------------------


@pytest.mark.parametrize("similarity", ["frobenius", "token"])
def test_a_view_without_any_token_is_unavailable_never_n(similarity):
    one_token = residual()[:, :, :1]
    r = effdepth.from_states(one_token, views=["default", "drop-pos0"], similarity=similarity)
    assert "drop-pos0" not in r.views
    assert "single token" in r.unavailable[similarity]["drop-pos0"]
    with pytest.raises(EffdepthError) as e:
        effdepth.from_states(one_token, views=["drop-pos0"], similarity=similarity)
    msg = str(e.value)
    assert "\n" not in msg and "no view has a" in msg and "drop-pos0" in msg
    assert "put frobenius or token first" not in msg  # that hint is for cka


@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_a_sequence_without_tokens_in_a_view_is_left_out_of_it_and_its_bootstrap(similarity):
    s = residual(B=6, T=8)
    mask = torch.ones(6, 8, dtype=torch.bool)
    mask[1, 1:] = False  # one token: nothing left under drop-pos0 (and under 4 for cka)
    r = effdepth.from_states(s, mask=mask, views=["default", "drop-pos0"], similarity=similarity, bootstrap=200, seed=5)
    # cka pairs sequences (0, 1), (2, 3), (4, 5): the pair of the short sequence leaves with it.
    rest = [2, 3, 4, 5] if similarity == "cka" else [0, 2, 3, 4, 5]
    kept = effdepth.from_states(s[:, rest], views=["drop-pos0"], similarity=similarity, bootstrap=200, seed=5)
    v, want = r.views["drop-pos0"], kept.views["drop-pos0"]
    assert (v.sequences, v.left_out, v.tokens) == (len(rest), 6 - len(rest), want.tokens)
    assert v.deff == pytest.approx(want.deff, rel=1e-12)
    # Resampled over the units that have the view, exactly as if the others were absent.
    units = len(rest) // 2 if similarity == "cka" else len(rest)
    assert v.ci["units"] == units and v.ci["deff"] == pytest.approx(want.ci["deff"], rel=1e-12)
    assert v.ci["nan_resamples"] == 0
    default = r.views["default"]
    assert default.left_out == (2 if similarity == "cka" else 0)


def test_one_length_one_sequence_of_two_gives_no_interval_not_a_leak():
    s = residual(B=2, T=6)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 1:] = False
    v = effdepth.from_states(s, mask=mask, views=["drop-pos0"], similarity="frobenius", bootstrap=500).views[
        "drop-pos0"
    ]
    assert v.sequences == 1 and v.left_out == 1 and v.ci is None
    alone = effdepth.from_states(s[:, :1], views=["drop-pos0"], similarity="frobenius").views["drop-pos0"]
    assert v.deff == pytest.approx(alone.deff, rel=1e-12)


def test_a_fitted_view_without_tokens_to_fit_on_is_unavailable():
    one_token = residual()[:, :, :1]
    r = effdepth.from_states(one_token, views=["default", "center+drop-pos0"], similarity="frobenius")
    assert "center+drop-pos0" not in r.views and "fit" in r.unavailable["frobenius"]["center+drop-pos0"]


# -- 2. rows that are all padding ---------------------------------------------------------------


@pytest.mark.parametrize("views", [("default", "drop-pos0"), ("default", "top1pc", "center")])
def test_all_padding_rows_are_skipped_and_counted(views):
    s = residual(B=5, T=8)
    mask = torch.ones(5, 8, dtype=torch.bool)
    mask[1] = False
    sims = "cka,frobenius,token"
    r = effdepth.from_states(s, mask=mask, views=list(views), similarity=sims, surrogate_seqs=None, bootstrap=50)
    want = effdepth.from_states(
        s[:, [0, 2, 3, 4]], views=list(views), similarity=sims, surrogate_seqs=None, bootstrap=50
    )
    assert r.provenance["padding_rows_skipped"] == 1 and want.provenance["padding_rows_skipped"] == 0
    for sim in ("cka", "frobenius", "token"):
        for name in views:
            a, b = r.view(name, sim), want.view(name, sim)
            assert a.sequences == b.sequences == 4
            assert a.deff == pytest.approx(b.deff, rel=1e-12)
            # Surrogate noise is drawn per row index, so only its presence is comparable here.
            assert math.isfinite(a.references["matched_cal"]) and a.ci["nan_resamples"] == 0


def test_a_batch_of_padding_only_is_skipped():
    s = residual(B=4, T=8)
    state = MeasurementState.new(
        AnalysisOptions(pooling="none", views="default,top1pc", similarity="cka,frobenius", surrogate_seqs=None)
    )
    plain = MeasurementState.new(
        AnalysisOptions(pooling="none", views="default,top1pc", similarity="cka,frobenius", surrogate_seqs=None)
    )
    state.update(s[:, :2], torch.zeros(2, 8, dtype=torch.bool))
    state.update(s[:, 2:], None)
    plain.update(s[:, 2:], None)
    assert state.views.padding_rows == 2 and state.views.sequences == plain.views.sequences == 2
    for sim in ("cka", "frobenius"):
        a = state.views.unit_statistics("top1pc", sim).total()
        b = plain.views.unit_statistics("top1pc", sim).total()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_a_mask_without_any_real_token_is_a_one_line_error():
    with pytest.raises(EffdepthError, match="marks no real token") as e:
        effdepth.from_states(residual(), mask=torch.zeros(3, 8, dtype=torch.bool))
    assert "\n" not in str(e.value)


# -- 3. top{k}pc with k >= d ----------------------------------------------------------------------


@pytest.mark.parametrize("view", ["top16pc", "top100000pc", "top16pc-shared", "token-norm+top20pc"])
@pytest.mark.parametrize("estimate", ["calibration", "exact"])
def test_removing_every_direction_is_refused_naming_the_width(view, estimate):
    s = residual(d=16)
    with pytest.raises(EffdepthError) as e:
        effdepth.from_states(s, views=["default", view], pc_estimate=estimate)
    msg = str(e.value)
    assert "\n" not in msg and "width d = 16" in msg and "k < 16" in msg and view in msg
    # At the first batch, before any statistics; no clamping anywhere.
    acc = ViewAccumulator(["default", view], pc_estimate=estimate)
    with pytest.raises(EffdepthError, match="width d = 16"):
        acc.update(s) if estimate == "calibration" else acc.fit_batch(s)
    assert acc.sequences == 0 and acc.unit_arrays() == {}


def test_k_just_below_the_width_runs_and_nothing_clamps_the_eigenvectors():
    s = residual(d=16)
    assert math.isfinite(effdepth.from_states(s, views=["top15pc"]).views["top15pc"].deff)
    fit = FitAccumulator()
    fit.update(s.reshape(s.shape[0], -1, 16))
    with pytest.raises(EffdepthError, match="width d = 16"):
        fit.fit(parse_view("top16pc"))
    with pytest.raises(ValueError, match="k <= d"):
        top_eigenpairs(torch.eye(3, dtype=torch.float64)[None], 4)


# -- 4. no updates at all ----------------------------------------------------------------------------


@pytest.mark.parametrize("include_embedding", [False, True])
@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_a_state_that_never_moves_books_the_gap_as_initial_state(similarity, include_embedding):
    g = torch.Generator().manual_seed(1)
    s0 = torch.randn(1, 4, 8, 6, generator=g, dtype=torch.float64)
    s = s0.expand(5, -1, -1, -1).clone()  # every U_l = 0
    v = effdepth.from_states(s, similarity=similarity, include_embedding=include_embedding, bootstrap=50).default
    fl = reference_fl(5 if include_embedding else 4)
    assert v.deff == pytest.approx(1.0, rel=1e-12)
    for ref in ("init", "size", "matched"):
        assert v.references[ref] == pytest.approx(1.0, rel=1e-12), ref
    assert v.attribution["initial_state"] == pytest.approx(fl - 1.0, rel=1e-12)
    assert v.attribution["size_imbalance"] == pytest.approx(0.0, abs=1e-12)
    assert v.attribution["correlated_updates"] == pytest.approx(0.0, abs=1e-12)
    assert v.ci["reference_init"] == pytest.approx([1.0, 1.0], rel=1e-12) and v.ci["nan_resamples"] == 0


# -- 5. calibration on enough data --------------------------------------------------------------------


def heterogeneous(B=16, T=256, d=8, L=2, seed=0):
    """Sequences that differ in mean and dominant direction: one sequence is a poor sample of the fit."""
    g = torch.Generator().manual_seed(seed)
    offsets = 3.0 * torch.randn(1, B, 1, d, generator=g, dtype=torch.float64)
    directions = torch.randn(1, B, 1, d, generator=g, dtype=torch.float64)
    scores = 4.0 * torch.randn(L + 1, B, T, 1, generator=g, dtype=torch.float64)
    noise = torch.randn(L + 1, B, T, d, generator=g, dtype=torch.float64)
    return (noise + scores * directions).cumsum(0) + offsets


def fitted_then_measured(s, views, mask=None, batch=1, rows=None, start=0, state=None, **options):
    """What :func:`effdepth.measure.fit_views` and the measuring loop do, in batches of ``batch``: the
    fit phase over the calibration set (all sequences for the exact estimate), then rows ``start:rows``
    measured (a resumed ``state`` keeps its fits)."""
    if state is None:
        options = {"similarity": "frobenius", "surrogate_seqs": 0, **options}
        state = MeasurementState.new(AnalysisOptions(pooling="none", views=views, bootstrap=0, **options))
    if not state.fitted:
        lengths = [s.shape[2]] * s.shape[1] if mask is None else mask.sum(dim=1).tolist()
        prefix = s.shape[1] if state.views.pc_estimate == "exact" else calibration_prefix(lengths)
        sequences = tokens = 0
        for b in range(0, prefix, batch):
            m = None if mask is None else mask[b : min(b + batch, prefix)]
            state.fit_batch(s[:, b : min(b + batch, prefix)], m)
            sequences += int((m.sum(dim=1) > 0).sum()) if m is not None else min(batch, prefix - b)
            tokens += int(m.sum()) if m is not None else min(batch, prefix - b) * s.shape[2]
        state.finalize_fit(sequences=sequences, tokens=tokens)
    for b in range(start, s.shape[1] if rows is None else rows, batch):
        state.update(s[:, b : b + batch], None if mask is None else mask[b : b + batch])
    return state


def test_calibration_on_one_sequence_batches_lands_close_to_the_exact_fit():
    s = heterogeneous()
    views = "center,top2pc"
    exact = effdepth.from_states(s, views=views.split(","), pc_estimate="exact", similarity="frobenius")
    state = fitted_then_measured(s, views)
    info = state.views.fit_info
    assert info["calibration"] == {"sequences": 8, "tokens": 2048} and "first 8 sequences" in info["how"]
    assert set(info["tokens"].values()) == {2048}
    # What fitting on one sequence alone (an update before any fit, of a batch of one) gives.
    first = ViewAccumulator(views.split(","), similarities=())
    first.update(s[:, :1])
    assert "the first batch (1 sequences)" in first.fit_info["how"]
    old = ViewAccumulator(views.split(","), similarities=())  # fitted the same way, then measuring every sequence
    old.fit_batch(s[:, :1])
    old.finalize_fit("the first sequence")
    old.update(s)
    for view in views.split(","):
        want = exact.views[view].deff
        got = effdepth.numerics.summary.view_summary(
            state.views.unit_statistics(view, "frobenius"), similarity="frobenius", include_embedding=False
        )["deff"]
        before = effdepth.numerics.summary.view_summary(
            old.unit_statistics(view, "frobenius"), similarity="frobenius", include_embedding=False
        )["deff"]
        assert abs(got - want) < 0.2 * abs(before - want), (view, got, want, before)
        assert got == pytest.approx(want, rel=0.02)


def test_the_calibration_set_is_the_fewest_first_sequences_with_8_sequences_and_2048_tokens():
    assert calibration_prefix([256] * 16) == 8
    assert calibration_prefix([64] * 40) == 32
    assert calibration_prefix([100] * 10) == 10  # the run is smaller: all of it
    assert calibration_prefix([256, 0] * 10) == 15  # padding-only rows do not count
    assert calibration_prefix([]) == 0


@pytest.mark.parametrize("similarity", ["frobenius", "cka"])
def test_the_fit_and_the_numbers_do_not_depend_on_the_batch_size(similarity):
    s = heterogeneous(B=12, T=256)
    runs = [fitted_then_measured(s, "default,top1pc", batch=b, similarity=similarity) for b in (1, 3, 12)]
    for state in runs:
        assert state.views.fit_info["calibration"] == {"sequences": 8, "tokens": 2048}
    want = runs[0].views.unit_statistics("top1pc", similarity).total()
    for state in runs[1:]:
        got = state.views.unit_statistics("top1pc", similarity).total()
        for k in want:  # the fit's float32 products are summed in another order: equal to rounding
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-8, err_msg=k)


def test_an_update_before_any_fit_fits_on_its_own_batch():
    s = heterogeneous(B=8, T=256)
    acc = ViewAccumulator(["center", "top1pc"], similarities=())
    acc.update(s)
    assert acc.fitted and acc.sequences == 8
    assert acc.fit_info["calibration"] == {"sequences": 8, "tokens": 2048}
    exact = ViewAccumulator(["top1pc"], pc_estimate="exact", similarities=())
    with pytest.raises(RuntimeError, match="fit_batch over every batch"):
        exact.update(s)


@pytest.mark.parametrize("padding", [2, 0])
@pytest.mark.parametrize("estimate", ["calibration", "exact"])
def test_a_resume_from_a_checkpoint_gives_the_same_numbers_and_keeps_the_fits(estimate, padding, tmp_path):
    from effdepth.checkpoint import load_checkpoint, save_checkpoint

    s = heterogeneous(B=10, T=40, d=4)
    mask = torch.ones(10, 40, dtype=torch.bool)
    mask[padding : padding + 2] = False  # a batch of padding only
    options = dict(similarity="cka,frobenius", surrogate_seqs=None, pc_estimate=estimate)
    whole = fitted_then_measured(s, "default,top1pc", mask, batch=2, **options)
    interrupted = fitted_then_measured(s, "default,top1pc", mask, batch=2, rows=6, **options)
    save_checkpoint(tmp_path, *interrupted.state_dict())
    arrays, meta = load_checkpoint(tmp_path)
    assert meta["calibrated"]["sequences"] == 6 and meta["accumulator"]["sequences"] == 4
    resumed = MeasurementState.new(AnalysisOptions(pooling="none", views="default,top1pc", bootstrap=0, **options))
    assert not resumed.fitted
    resumed.load_state_dict(arrays, meta)
    assert resumed.fitted and resumed.views.rows == 6  # the fit phase is not run again
    fitted_then_measured(s, "default,top1pc", mask, batch=2, start=resumed.views.rows, state=resumed)
    assert resumed.views.padding_rows == whole.views.padding_rows == 2
    assert resumed.views.fit_info == whole.views.fit_info
    for sim in ("cka", "frobenius"):
        a = whole.views.unit_statistics("top1pc", sim).total()
        b = resumed.views.unit_statistics("top1pc", sim).total()
        ca = whole.calibrated.unit_statistics("top1pc", sim, "matched").total()
        cb = resumed.calibrated.unit_statistics("top1pc", sim, "matched").total()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
        for k in ca:
            np.testing.assert_array_equal(ca[k], cb[k])
    assert whole.calibrated.accumulators["matched"].fit_info["calibration"] == {"sequences": 8, "tokens": 320}
    assert whole.calibrated.sequences == resumed.calibrated.sequences == 10
    assert whole.views.fit_info["calibration"] == {"sequences": 8, "tokens": 320}


def test_the_eigengap_is_recorded_and_a_repeated_eigenvalue_warns():
    # Tokens +-a e1, +-a e2: the top two eigenvalues are equal, so "the" top PC is arbitrary.
    t = torch.tensor(
        [[2.0, 0, 0], [-2.0, 0, 0], [0, 2.0, 0], [0, -2.0, 0], [0, 0, 1.0], [0, 0, -1.0]], dtype=torch.float64
    )
    s = torch.stack([t, 1.5 * t]).unsqueeze(1).repeat(1, 2, 1, 1)  # (2, 2, 6, 3)
    with pytest.warns(UserWarning, match=r"eigen-gap after principal component 1 is 0 .*S_0, S_1"):
        r = effdepth.from_states(s, views=["top1pc", "top2pc"], similarity="frobenius")
    info = r.config["pc_estimate"]
    assert info["eigengap"]["top1pc"] == pytest.approx([0.0, 0.0], abs=1e-12)
    assert info["eigengap"]["top2pc"] == pytest.approx([0.75, 0.75], rel=1e-9)  # (2 - 0.5) / 2
    assert len(info["warnings"]) == 1 and "top1pc" in info["warnings"][0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        effdepth.from_states(s, views=["top2pc"], similarity="frobenius")


# -- 6. fits are fixed in the bootstrap ---------------------------------------------------------------


def test_the_result_says_the_bootstrap_keeps_fits_fixed():
    r = effdepth.from_states(residual(), views=["default", "center"], bootstrap=20)
    assert r.config["bootstrap_fits"].startswith("fixed")


# -- 7. NaN resamples ------------------------------------------------------------------------------------


def test_nan_resamples_are_counted_and_warned():
    from effdepth.numerics.accumulate import empty_statistics, token_set_statistics

    units = [token_set_statistics(residual(B=1)[:, 0]), empty_statistics(5, False)]
    stats = UnitStatistics.from_units(units)
    weights = bootstrap_weights(2, 400, seed=1)
    with pytest.warns(UserWarning, match=r"of view 'x' .*gave NaN"):
        ci = bootstrap_intervals(
            stats, similarity="frobenius", include_embedding=False, weights=weights, label="view 'x'"
        )
    assert ci["nan_resamples"] == int((weights[:, 0] == 0).sum()) > 0
    assert np.isfinite(ci["deff"]).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = bootstrap_intervals(
            UnitStatistics.from_units(units[:1] * 3), similarity="frobenius", include_embedding=False, resamples=50
        )
    assert ok["nan_resamples"] == 0


# -- 11. intervals of the related-work measures and update summaries --------------------------------------


def naive_related(seqs):
    """Block influence, adjacent angular distance, relative contribution, cos(U, S_prev), update
    cosines of a list of (M, T, d) sequences pooled, by hand."""
    x = torch.cat(seqs, dim=1)
    cos = torch.nn.functional.cosine_similarity(x[:-1], x[1:], dim=-1)  # (L, tokens)
    u, prev = x[1:] - x[:-1], x[:-1]
    flat_u = u.reshape(u.shape[0], -1)
    cu = flat_u @ flat_u.T
    return {
        "block_influence": (1 - cos.mean(1)).numpy(),
        "angular_distance_adjacent": (torch.arccos(cos.clamp(-1, 1)).mean(1) / math.pi).numpy(),
        "relative_contribution": (u.norm(dim=(1, 2)) / prev.norm(dim=(1, 2))).numpy(),
        "update_state_cosine": ((u * prev).sum((1, 2)) / (u.norm(dim=(1, 2)) * prev.norm(dim=(1, 2)))).numpy(),
        "update_cosine": (cu / torch.outer(cu.diag().sqrt(), cu.diag().sqrt())).numpy(),
    }


@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_related_measures_have_intervals_equal_to_a_naive_bootstrap(similarity):
    s = residual(B=10, T=7)
    v = effdepth.from_states(s, similarity=similarity, bootstrap=60, seed=4).default
    ci = v.ci
    # cka resamples the pairs (0, 1), (2, 3), ...; the others the sequences.
    units = [[2 * k, 2 * k + 1] for k in range(5)] if similarity == "cka" else [[b] for b in range(10)]
    weights = bootstrap_weights(len(units), 60, seed=4)
    draws = {}
    for w in weights:
        seqs = [s[:, b] for k, unit in enumerate(units) for _ in range(w[k]) for b in unit]
        for k, value in naive_related(seqs).items():
            draws.setdefault(k, []).append(value)
    for k, values in draws.items():
        lo, hi = np.percentile(np.stack(values), [2.5, 97.5], axis=0)
        np.testing.assert_allclose(ci[k][0], lo, rtol=1e-9, atol=1e-12, err_msg=k)
        np.testing.assert_allclose(ci[k][1], hi, rtol=1e-9, atol=1e-12, err_msg=k)
    m = 5
    assert np.shape(ci["angular_distance"]) == (2, m, m) and np.shape(ci["block_influence"]) == (2, m - 1)
    assert np.shape(ci["similarity"]) == (2, m - 1, m - 1) and np.shape(ci["update_cosine"]) == (2, m - 1, m - 1)
    np.testing.assert_allclose(np.diagonal(ci["angular_distance"][0], offset=1), ci["angular_distance_adjacent"][0])


# -- 12. zero states ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_zero_states_are_orthogonal_to_everything_and_identical_to_themselves(similarity):
    s = residual(L=5, B=3, T=8)
    s[2] = 0.0  # S_2 and S_3 are zero: distinct zero states
    s[3] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = effdepth.from_states(s, similarity=similarity)
    sim = np.array(r.default.similarity)  # S_1..S_5: rows 1 and 2 are the zero states
    assert np.diag(sim).tolist() == [1.0] * 5
    for z in (1, 2):
        others = [j for j in range(5) if j != z]
        assert sim[z, others].tolist() == [0.0] * 4 and sim[others, z].tolist() == [0.0] * 4
    assert r.config["zero_states"].startswith("a zero state is orthogonal")
