"""Passage mode's similarity across samples: the HSIC estimators against brute force, the closed forms
of docs/method.md under both estimators, the references, and the bootstrap's coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from naive_hsic import naive_biased, naive_copy_aware_biased, naive_debiased

from effdepth.numerics import analysis as numerics_analysis
from effdepth.numerics.analysis import AnalysisPlan, analyse_pooled
from effdepth.numerics.hsic_resample import Units, resample_weights, resampled_hsic
from effdepth.numerics.metrics import (
    cka,
    correlated_reference_similarity,
    kernel_numbers,
)
from effdepth.numerics.references import reference_fl
from effdepth.numerics.sample_hsic import hsic_route, stack_sums
from effdepth.numerics.similarity import deff


def feature_hsic(matrices) -> dict:
    """The estimates alone (no resample) through the feature route: ``{"biased", "debiased"}``, (M, M) each."""
    sums = stack_sums(matrices, Units.blocks(len(matrices[0]), 1), route="feature")
    return {key: value[0] for key, value in resampled_hsic(sums, resample_weights(1, 0, 0)).items()}


def stack(seed: int, n: int = 23, d: int = 5, m: int = 3) -> list:
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, d)) + 3.0
    return [base + rng.normal(size=(n, d)) * (i + 1) for i in range(m)]


@pytest.mark.parametrize("units", [23, 7])
def test_both_estimators_match_brute_force_and_the_feature_route(units):
    mats = stack(0)
    blocks = Units.blocks(23, units)
    h = resampled_hsic(stack_sums([torch.from_numpy(m) for m in mats], blocks), resample_weights(blocks.count, 0, 0))
    feature = feature_hsic([torch.from_numpy(m) for m in mats])
    for i in range(3):
        for j in range(3):
            assert h["biased"][0, i, j] == pytest.approx(naive_biased(mats[i], mats[j]), rel=1e-10)
            assert h["debiased"][0, i, j] == pytest.approx(naive_debiased(mats[i], mats[j]), rel=1e-9)
            assert float(feature["biased"][i, j]) == pytest.approx(naive_biased(mats[i], mats[j]), rel=1e-10)
            assert float(feature["debiased"][i, j]) == pytest.approx(naive_debiased(mats[i], mats[j]), rel=1e-9)


@pytest.mark.parametrize("units", [9, 3])
def test_a_resample_of_the_biased_estimator_never_pairs_a_passage_with_its_own_copy(units):
    """Every tuple of passages weighs the counts of its distinct passages (brute force over all tuples)."""
    mats = stack(1, n=9, d=4)
    blocks = Units.blocks(9, units)
    weights = resample_weights(blocks.count, 4, seed=1)
    h = resampled_hsic(stack_sums([torch.from_numpy(m) for m in mats], blocks), weights)
    for r in range(5):
        counts = weights[r][blocks.index().numpy()]
        for i, j in ((0, 0), (0, 2), (1, 2)):
            assert h["biased"][r, i, j] == pytest.approx(naive_copy_aware_biased(mats[i], mats[j], counts), rel=1e-9)
    assert h["biased"][0, 0, 2] == pytest.approx(naive_biased(mats[0], mats[2]), rel=1e-10)


@pytest.mark.parametrize("similarity,view", [("cka", "default"), ("cka-debiased", "default"), ("cka", "top1pc")])
def test_intervals_cover_where_a_fresh_sample_lands_when_d_exceeds_n(similarity, view):
    """With d = 2N the biased estimator's self-pair bias is large; a resample that paired a passage with
    its own copy doubled it and put every interval below its own estimate. Intervals must hold the
    estimate and cover the mean estimate over fresh samples (95% nominal; conservative here). The top-PC
    fit is made once on all N, not per resample: the intervals must not be too narrow for it."""
    rng = np.random.default_rng(5)
    estimates, intervals = [], []
    for trial in range(20):
        states = isotropic_updates(64, 128, 4, seed=int(rng.integers(1 << 30)))
        v = analyse_pooled(
            {"default": states},
            AnalysisPlan(views=(view,), bootstrap=200, seed=trial, calibrated=False, similarities=(similarity,)),
        )
        v = v["similarities"][similarity][view]
        estimates.append(v["deff"])
        intervals.append(v["ci"]["deff"])
    mean = np.mean(estimates)
    assert all(lo <= e <= hi for e, (lo, hi) in zip(estimates, intervals))
    assert np.mean([lo <= mean <= hi for lo, hi in intervals]) >= 0.8


@pytest.mark.parametrize("units", [23, 7, 1])
def test_the_feature_and_gram_routes_give_the_same_sums_and_resamples(units):
    """Per unit the feature route's d x d cross-products give the Gram route's unit-pair sums exactly."""
    mats = [torch.from_numpy(m) for m in stack(3)]
    blocks = Units.blocks(23, units)
    gram, feature = (stack_sums(mats, blocks, route=r) for r in ("gram", "feature"))
    assert (gram.route, feature.route) == ("gram", "feature")
    kernel = float(gram.diag.abs().max()) * 23  # the size of a sum over a row of K
    for name, scale in (("pair_blocks", kernel**2), ("pair_diag", kernel**2), ("rows", kernel), ("diag", kernel)):
        a, b = getattr(gram, name).numpy(), getattr(feature, name).numpy()
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12 * scale, err_msg=name)
    weights = resample_weights(blocks.count, 30, seed=4)
    for key, value in resampled_hsic(gram, weights).items():
        np.testing.assert_allclose(resampled_hsic(feature, weights)[key], value, rtol=1e-10, atol=1e-12, err_msg=key)


def test_the_route_follows_the_shapes_and_both_give_the_same_numbers(monkeypatch):
    """Many passages of few features take the feature route, few of many the Gram route; forcing the
    other route changes no number."""
    assert hsic_route(4, 1000, 6, 128) == "feature" and hsic_route(4, 40, 64, 40) == "gram"
    assert hsic_route(4, 1000, 6, 128, budget_bytes=1 << 16) == "gram"  # its d x d per unit would not fit
    states = isotropic_updates(1000, 6, 3, seed=3)
    plan = AnalysisPlan(views=("default", "top1pc"), bootstrap=30)
    feature = analyse_pooled({"default": states}, plan)
    monkeypatch.setattr(numerics_analysis, "hsic_route", lambda *args, **kwargs: "gram")
    gram = analyse_pooled({"default": states}, plan)
    assert feature["analysis"]["hsic_routes"] == ["feature"] and gram["analysis"]["hsic_routes"] == ["gram"]
    for sim in ("cka", "cka-debiased"):
        for view in ("default", "top1pc"):
            a, b = feature["similarities"][sim][view], gram["similarities"][sim][view]
            assert a["deff"] == pytest.approx(b["deff"], rel=1e-10), (sim, view)
            assert a["ci"]["deff"] == pytest.approx(b["ci"]["deff"], rel=1e-10), (sim, view)
            for name, value in a["references"].items():
                assert value == pytest.approx(b["references"][name], rel=1e-10), (sim, view, name)
    monkeypatch.undo()
    narrow = analyse_pooled({"default": isotropic_updates(40, 64, 3, seed=1)}, AnalysisPlan(bootstrap=0))
    assert narrow["analysis"]["hsic_routes"] == ["gram"]


def test_gram_tiles_under_a_small_memory_budget_give_the_same_sums():
    mats = [torch.from_numpy(m) for m in stack(2, n=40, d=6)]
    units = Units.blocks(40, 8)
    weights = resample_weights(units.count, 20, 0)
    whole = resampled_hsic(stack_sums(mats, units), weights)
    tiled = resampled_hsic(stack_sums(mats, units, budget_bytes=4096), weights)
    for key in whole:
        np.testing.assert_allclose(tiled[key], whole[key], rtol=1e-12, atol=1e-14)


def assert_the_sums_of_the_whole_grams(sums, mats: list, units: Units) -> None:
    """Every pair's unit blocks and every matrix's unit row sums, against the whole K_m formed naively."""
    grams = [(m - m.mean(0)) @ (m - m.mean(0)).T for m in mats]
    member = [units.index().numpy() == u for u in range(units.count)]
    for p, (i, j) in enumerate(sums.pairs):
        naive = [[(grams[i] * grams[j])[np.ix_(a, b)].sum() for b in member] for a in member]
        np.testing.assert_allclose(sums.pair_blocks[p].numpy(), naive, rtol=1e-12, atol=1e-12)
    for m, k in enumerate(grams):
        naive_rows = np.stack([k[:, b].sum(1) for b in member], axis=1)
        np.testing.assert_allclose(sums.rows[m].numpy(), naive_rows, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("budget,tile_units", [(4096, 1), (22_600, 2), (26_200, 3), (None, 7)])
def test_the_gram_routes_unit_sums_equal_those_of_the_whole_grams_whatever_the_tiles(budget, tile_units):
    """Tiles form only the lower triangle of unit blocks; mirrored, the sums are those of the whole K_m
    (23 samples in 7 units of 3 and 4: padded units; the budgets give tiles of 1, 2, 3 and all 7 units)."""
    from effdepth.numerics.hsic_plan import stack_plan

    mats = stack(4, n=23, d=5, m=3)
    units = Units.blocks(23, 7)
    kwargs = {} if budget is None else {"budget_bytes": budget}
    sums = stack_sums([torch.from_numpy(m) for m in mats], units, **kwargs)
    assert sums.route == "gram"
    assert_the_sums_of_the_whole_grams(sums, mats, units)
    assert stack_plan(3, 23, 5, 7, budget or 4 << 30, "gram")["tile_units"] == tile_units


@pytest.mark.parametrize("budget", [4096, None])
@pytest.mark.parametrize("route", ["gram", "feature"])
def test_both_routes_give_the_whole_grams_unit_sums_on_units_of_very_different_sizes(route, budget):
    """The token reduction's units hold whole passages (here 1, 7, 3 and 12 samples): every unit is padded
    to the largest, on both routes and whatever the tiles."""
    mats = stack(4, n=23, d=5, m=3)
    units = Units(np.array([0, 1, 8, 11, 23]))
    kwargs = {} if budget is None else {"budget_bytes": budget}
    sums = stack_sums([torch.from_numpy(m) for m in mats], units, route=route, **kwargs)
    assert_the_sums_of_the_whole_grams(sums, mats, units)


def test_float32_gram_tiles_of_centred_data_stay_close_to_float64_even_with_a_huge_offset():
    rng = np.random.default_rng(3)
    mats = [torch.from_numpy(rng.normal(size=(60, 16)) + 1e4 * (i == 0)) for i in range(3)]
    units = Units.blocks(60, 60)
    w = resample_weights(60, 0, 0)
    exact = resampled_hsic(stack_sums(mats, units), w)
    single = resampled_hsic(stack_sums(mats, units, dtype=torch.float32), w)
    np.testing.assert_allclose(cka(single["biased"]), cka(exact["biased"]), atol=1e-5)


def isotropic_updates(samples: int, width: int, layers: int, seed: int) -> np.ndarray:
    """S_0 = 0 and S_l = S_{l-1} + f_l, the f_l independent isotropic Gaussians of equal size: (L+1, N, d)."""
    rng = np.random.default_rng(seed)
    updates = rng.standard_normal((layers, samples, width))
    return np.concatenate([np.zeros((1, samples, width)), np.cumsum(updates, axis=0)])


def test_proposition_3_under_both_estimators():
    """Debiased within 1% of F_L at N = 1,000, d = 384, L = 12; the biased estimator far below it, on its own null."""
    states = isotropic_updates(1000, 384, 12, seed=0)
    out = analyse_pooled({"default": states}, AnalysisPlan(bootstrap=0, seed=1))
    fl = reference_fl(12)
    debiased = out["similarities"]["cka-debiased"]["default"]
    biased = out["similarities"]["cka"]["default"]
    assert abs(debiased["deff"] / fl - 1.0) < 0.01
    assert biased["deff"] / fl < 0.9  # the paper's estimator's bias at this N and d
    assert abs(biased["deff"] / biased["references"]["structural_cal"] - 1.0) < 0.01
    assert abs(debiased["references"]["structural_cal"] / fl - 1.0) < 0.01


def orthogonal_equal_updates(layers: int, width: int) -> np.ndarray:
    """METHOD 8's exact construction: Z_l = columns of an orthonormal basis of the complement of 1 in R^n."""
    samples = layers * width + 1
    ones = np.ones((samples, 1)) / math.sqrt(samples)
    q, _ = np.linalg.qr(np.hstack([ones, np.random.default_rng(0).normal(size=(samples, samples - 1))]))
    basis = q[:, 1:]
    updates = np.stack([basis[:, l * width : (l + 1) * width] for l in range(layers)])
    return np.concatenate([np.zeros((1, samples, width)), np.cumsum(updates, axis=0)])


def test_orthogonal_equal_updates_give_f_l_exactly_and_every_reference_reduces_to_it():
    """Exact for the biased estimator (feature cross-products vanish); the unbiased one, which drops
    each passage's pairing with itself, meets F_L only statistically (Proposition 3's test)."""
    out = analyse_pooled({"default": orthogonal_equal_updates(6, 4)}, AnalysisPlan(bootstrap=0, calibrated=False))
    v = out["similarities"]["cka"]["default"]
    fl = reference_fl(6)
    assert v["deff"] == pytest.approx(fl, abs=1e-9)
    for name in ("init", "size", "matched"):
        assert v["references"][name] == pytest.approx(fl, abs=1e-9), name
    # R_corr takes square roots of update similarities that are zero up to rounding (1e-16 -> 1e-8)
    assert v["references"]["corr"] == pytest.approx(fl, abs=1e-6)
    assert all(abs(t) < 1e-6 for t in v["attribution"].values())


def test_orthogonal_updates_with_an_initial_state_land_on_r_matched():
    states = orthogonal_equal_updates(5, 4)
    sizes = np.array([3.0, 1.0, 2.0, 0.5, 1.5])
    updates = np.diff(states, axis=0) * np.sqrt(sizes)[:, None, None]
    rng = np.random.default_rng(5)
    start = rng.normal(size=states.shape[1:])
    # an initial state orthogonal to every update: project it off their span
    span = updates.transpose(1, 0, 2).reshape(states.shape[1], -1)
    span = np.hstack([span, np.ones((states.shape[1], 1))])
    start -= span @ np.linalg.lstsq(span, start, rcond=None)[0]
    built = np.concatenate([start[None], start[None] + np.cumsum(updates, axis=0)])
    v = analyse_pooled({"default": built}, AnalysisPlan(bootstrap=0, calibrated=False))["similarities"]["cka"][
        "default"
    ]
    assert v["deff"] == pytest.approx(v["references"]["matched"], abs=1e-7)
    assert v["deff"] == pytest.approx(v["references"]["corr"], abs=1e-6)
    assert v["attribution"]["correlated_updates"] == pytest.approx(0.0, abs=1e-7)


def correlated_process(samples: int, width: int, sizes: np.ndarray, start: float, rho: float, seed: int) -> np.ndarray:
    """Gaussian updates with Cov(f_k, f_m) = rho^|k-m| sqrt(a_k a_m) I and an independent initial state."""
    rng = np.random.default_rng(seed)
    layers = len(sizes)
    lag = np.abs(np.arange(layers)[:, None] - np.arange(layers)[None, :])
    chol = np.linalg.cholesky(rho**lag)
    noise = rng.standard_normal((samples, width, layers)) @ chol.T  # correlated across layers, per coordinate
    updates = noise.transpose(2, 0, 1) * np.sqrt(sizes)[:, None, None]
    h0 = rng.standard_normal((samples, width)) * math.sqrt(start)
    return np.concatenate([h0[None], h0[None] + np.cumsum(updates, axis=0)])


def test_r_corr_is_the_d_eff_of_a_gaussian_process_with_exactly_that_covariance():
    sizes, start, rho = np.array([1.0, 2.0, 0.5, 1.5, 1.0, 3.0, 0.8, 1.2]), 2.0, 0.6
    built = correlated_process(4000, 48, sizes, start, rho, seed=7)
    v = analyse_pooled({"default": built}, AnalysisPlan(bootstrap=0, calibrated=False))["similarities"]["cka-debiased"][
        "default"
    ]
    # the population: covariance norms proportional to a_k (isotropic, d coordinates), lag profile rho^j
    lags = rho ** np.arange(len(sizes))
    expected = float(deff(correlated_reference_similarity(np.array(start), sizes, lags, False)))
    assert v["references"]["corr"] == pytest.approx(expected, rel=0.01)
    assert v["deff"] == pytest.approx(expected, rel=0.01)
    assert v["deff"] < v["references"]["matched"] - 0.1  # positively correlated updates lower D_eff


def debiased_default(states: np.ndarray, calibrated: bool = False) -> dict:
    plan = AnalysisPlan(bootstrap=0, calibrated=calibrated, similarities=("cka-debiased",))
    return analyse_pooled({"default": states}, plan)["similarities"]["cka-debiased"]["default"]


UNEVEN = np.array([1.0, 2.0, 0.5, 1.5, 1.0, 3.0, 0.8, 1.2])


def test_r_size_is_the_d_eff_of_the_same_updates_without_an_initial_state():
    """R_size (F_norm) keeps the measured update sizes and drops S_0: a process built that way lands on it."""
    measured = debiased_default(correlated_process(4000, 48, UNEVEN, 4.0, 0.0, seed=11))
    built = debiased_default(correlated_process(4000, 48, UNEVEN, 0.0, 0.0, seed=12))
    assert measured["references"]["size"] > measured["references"]["matched"] + 0.3  # S_0 of size 4: far apart
    assert built["deff"] == pytest.approx(measured["references"]["size"], rel=0.01)


def test_r_init_is_the_d_eff_of_equal_updates_of_the_mean_size_after_the_same_initial_state():
    """R_init keeps S_0 and gives every update the mean size: a process built that way lands on it."""
    shrinking = np.array([4.0, 2.0, 1.0, 0.5, 0.3, 0.2, 0.1, 0.1])  # most of the movement in the first layers
    measured = debiased_default(correlated_process(4000, 48, shrinking, 1.0, 0.0, seed=13))
    built = debiased_default(correlated_process(4000, 48, np.full(8, shrinking.mean()), 1.0, 0.0, seed=14))
    assert measured["references"]["init"] > measured["references"]["matched"] + 0.3  # the sizes matter here
    assert built["deff"] == pytest.approx(measured["references"]["init"], rel=0.01)


@pytest.mark.parametrize("rho", [0.0, 0.6])
def test_matched_cal_lands_on_r_matched_whatever_the_correlation_of_the_updates(rho):
    """METHOD 5.3: matched_cal keeps S_0 and the measured updates, passages permuted per layer (zero
    cross-covariance). Under the unbiased estimator it is R_matched's finite-sample value: near R_matched
    (not R_size, which leaves S_0 out, nor D_eff, which keeps the correlation); with uncorrelated updates
    all three coincide."""
    v = debiased_default(correlated_process(4000, 48, UNEVEN, 1.0, rho, seed=15), calibrated=True)
    refs = v["references"]
    assert refs["matched_cal"] == pytest.approx(refs["matched"], rel=0.01)
    assert refs["matched_cal"] < refs["size"] - 0.1
    if rho:
        assert v["deff"] < refs["matched_cal"] - 0.15
    else:
        assert v["deff"] == pytest.approx(refs["matched_cal"], rel=0.01)


def naive_cosine_deff(states: np.ndarray, counts: np.ndarray) -> float:
    """D_eff of the passage-weighted mean cosine of uncentred pooled vectors, over S_1..S_L."""
    layers = states[1:] / np.linalg.norm(states[1:], axis=-1, keepdims=True)
    sim = np.einsum("ind,jnd,n->ij", layers, layers, counts) / counts.sum()
    return float(len(layers) ** 2 / sim.sum())


@pytest.mark.parametrize("view", ["default", "top1pc"])
def test_cosine_equals_a_naive_numpy_computation_with_its_resamples(view):
    from effdepth.numerics.analysis import LEVEL

    rng = np.random.default_rng(6)
    states = np.cumsum(rng.normal(size=(5, 40, 6)) + np.array([2.0, 0, 0, 0, 0, 0]), axis=0)
    if view == "top1pc":
        naive_states = np.stack([layer - naive_centred_top(layer, 1) for layer in states])
    else:
        naive_states = states
    v = analyse_pooled(
        {"default": states},
        AnalysisPlan(
            views=(view,), bootstrap=30, seed=4, bootstrap_units=8, calibrated=False, similarities=("cosine",)
        ),
    )
    v = v["similarities"]["cosine"][view]
    units = Units.blocks(40, 8)
    weights = resample_weights(units.count, 30, 4)
    draws = [naive_cosine_deff(naive_states, w[units.index().numpy()]) for w in weights]
    assert v["deff"] == pytest.approx(draws[0], rel=1e-12)
    lo, hi = np.percentile(draws[1:], [100 * (1 - LEVEL) / 2, 100 * (1 + LEVEL) / 2])
    assert v["ci"]["deff"] == pytest.approx([lo, hi], rel=1e-12)


def naive_centred_top(layer: np.ndarray, k: int) -> np.ndarray:
    """The part of a layer along its top-k principal directions (of the centred matrix), to subtract."""
    _, _, vt = np.linalg.svd(layer - layer.mean(0), full_matrices=False)
    return layer @ vt[:k].T @ vt[:k]


def test_kernel_numbers_split_the_gap_without_remainder():
    rng = np.random.default_rng(0)
    built = correlated_process(300, 16, rng.uniform(0.5, 2.0, 6), 1.0, 0.4, seed=1)
    torch_states = [torch.from_numpy(s) for s in built]
    units = Units.blocks(300, 300)
    w = resample_weights(300, 0, 0)
    hs = resampled_hsic(stack_sums(torch_states, units), w)["biased"]
    hf = resampled_hsic(stack_sums([b - a for a, b in zip(torch_states[:-1], torch_states[1:])], units), w)["biased"]
    out = kernel_numbers(hs, hf, False)
    total = out["initial_state"] + out["size_imbalance"] + out["correlated_updates"]
    assert float(total[0]) == pytest.approx(float(reference_fl(6) - out["deff"][0]), abs=1e-12)


def ar1_states(samples: int, width: int, layers: int, rho: float, rng) -> np.ndarray:
    s = rng.standard_normal((samples, width))
    out = [s]
    for _ in range(layers):
        s = rho * s + math.sqrt(1 - rho * rho) * rng.standard_normal((samples, width))
        out.append(s)
    return np.stack(out)


def test_ar1_lands_on_its_closed_form_and_the_bootstrap_interval_covers_it():
    """Percentile intervals over passages cover the population D_eff about as often as they say."""
    layers, rho = 6, 0.7
    truth = layers**2 / (layers + 2 * sum((layers - k) * rho ** (2 * k) for k in range(1, layers)))
    rng = np.random.default_rng(11)
    trials, covered, estimates = 30, 0, []
    for trial in range(trials):
        states = ar1_states(400, 24, layers, rho, rng)
        v = analyse_pooled(
            {"default": states},
            AnalysisPlan(bootstrap=300, seed=trial, calibrated=False, similarities=("cka-debiased",)),
        )
        v = v["similarities"]["cka-debiased"]["default"]
        lo, hi = v["ci"]["deff"]
        covered += lo <= truth <= hi
        estimates.append(v["deff"])
    assert abs(np.mean(estimates) / truth - 1.0) < 0.01
    assert covered / trials >= 0.8  # 95% nominal; 30 trials: below 80% would be a broken interval


@pytest.mark.parametrize("view", ["default", "top1pc"])
def test_results_do_not_depend_on_the_memory_budget(view):
    """At the least budget (these shapes: the Gram tiles', not the resamples') every stack streams its
    layers through one-unit Gram tiles, a resample at a time; with plenty the view and its centred layers
    stay in memory: the same numbers."""
    from effdepth.numerics.analysis import analysis_memory

    states = isotropic_updates(64, 16, 4, seed=2)
    plan = AnalysisPlan(views=(view,), bootstrap=50, similarities=("cka", "cosine"))
    least = analysis_memory(64, 4, 16, plan)["least_bytes"]
    tight = AnalysisPlan(views=(view,), bootstrap=50, similarities=("cka", "cosine"), max_memory=least)
    streamed = analysis_memory(64, 4, 16, tight)
    assert not streamed["kept"] and not streamed["stack"]["resident"] and streamed["stack"]["tile_units"] == 1
    a = analyse_pooled({"default": states}, plan)
    b = analyse_pooled({"default": states}, tight)
    assert a["analysis"]["memory"]["view_kept"] and b["analysis"]["memory"]["passes"] > 1
    for sim in ("cka", "cka-debiased", "cosine"):
        x, y = a["similarities"][sim][view], b["similarities"][sim][view]
        assert x["deff"] == pytest.approx(y["deff"], rel=1e-12), sim
        assert x["ci"]["deff"] == pytest.approx(y["ci"]["deff"], rel=1e-12), sim
        for name, value in x["references"].items():
            assert value == pytest.approx(y["references"][name], rel=1e-12), (sim, name)


def test_a_budget_below_the_least_working_set_is_one_line_naming_the_least():
    from effdepth.errors import EffdepthError

    with pytest.raises(
        EffdepthError, match=r"^--max-memory 2\.0 KiB is below the .* use --max-memory [0-9.]+KiB or more"
    ):
        analyse_pooled({"default": isotropic_updates(64, 8, 4, seed=2)}, AnalysisPlan(bootstrap=0, max_memory=2048))
