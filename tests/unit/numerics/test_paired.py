"""Paired differences of D_eff between two results on the same passages (numerics/paired.py, and the draws
numerics/analysis.deff_draws gives them): the draws are exactly analyse_pooled's, one result against itself
differs by exactly 0, and on planted data with a closed-form difference the paired interval holds it and is
narrower than an unpaired one."""

from __future__ import annotations

import numpy as np
import pytest

from effdepth.errors import EffdepthError
from effdepth.numerics.analysis import AnalysisPlan, analyse_pooled, deff_draws
from effdepth.numerics.confounds import subsample_curve
from effdepth.numerics.intervals import LEVEL, percentile_interval
from effdepth.numerics.paired import QUANTITIES, paired_differences
from effdepth.numerics.references import reference_fl, reference_from_energies
from effdepth.numerics.sampling import sample_offsets

SIMILARITIES = ("cka", "cka-debiased", "cosine")


def random_walk(layers: int, passages: int, width: int, seed: int) -> np.ndarray:
    """S_0..S_L ``(L+1, N, d)``: an offset start plus isotropic Gaussian updates."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.normal(size=(layers + 1, passages, width)), axis=0) + 2.0


def assert_draws_are_the_analysis(draws: dict, analysis: dict, views) -> None:
    """Row 0 is the reported D_eff and the percentiles of the other rows its interval, bit for bit."""
    for sim, by_view in analysis["similarities"].items():
        for view in views:
            rows, summary = draws["deff"][sim][view], by_view[view]
            assert rows[0] == summary["deff"], (sim, view)
            lo, hi = np.percentile(rows[1:], [100 * (1 - LEVEL) / 2, 100 * (1 + LEVEL) / 2])
            assert [float(lo), float(hi)] == summary["ci"]["deff"], (sim, view)


def test_the_draws_are_exactly_those_of_the_analysis_for_every_view_and_similarity():
    states = random_walk(3, 48, 6, seed=0)
    pooled = {"default": states, "drop-pos0": states + np.random.default_rng(1).normal(size=states.shape)}
    lengths = np.random.default_rng(2).integers(4, 40, size=48)
    plan = AnalysisPlan(views="default,top1pc,length,drop-pos0+top2pc", similarities=SIMILARITIES, bootstrap=40)
    analysis = analyse_pooled(pooled, plan, lengths=lengths)
    draws = deff_draws(pooled, plan, lengths=lengths)
    assert_draws_are_the_analysis(draws, analysis, plan.views)
    assert draws["states"] == 3 and draws["units"].samples == 48 and draws["weights"].shape == (41, 48)
    for sim in ("cka", "cka-debiased"):  # the sample-size curve: the default view's subsample rows
        full = draws["deff"][sim]["default"]
        curve = subsample_curve(
            draws["subsample_draws"], draws["subsamples"][sim], float(full[0]), percentile_interval(full[1:]), 48
        )
        assert curve == analysis["sample_size"][sim]
    # a view the plan does not hold (a confound control): the confounds table's D_eff (rounded there)
    control = deff_draws(pooled, plan, lengths=lengths, views=["drop-pos0"])["deff"]
    for sim in SIMILARITIES:
        assert set(control[sim]) == {"drop-pos0"}
        assert control[sim]["drop-pos0"][0] == pytest.approx(analysis["confounds"][sim]["drop-pos0"]["deff"], abs=1e-6)


def test_the_draws_under_the_token_reduction_are_those_of_the_analysis():
    rng = np.random.default_rng(3)
    counts = rng.integers(2, 6, size=20)
    offsets = {"default": sample_offsets(counts)}
    pooled = {"default": random_walk(3, int(offsets["default"][-1]), 5, seed=4)}
    plan = AnalysisPlan(views="default,top1pc", bootstrap=30, bootstrap_units=8, calibrated=False)
    analysis = analyse_pooled(pooled, plan, offsets=offsets)
    draws = deff_draws(pooled, plan, offsets=offsets)
    assert_draws_are_the_analysis(draws, analysis, plan.views)
    assert draws["units"].samples == 20 and draws["units"].count == 8  # units of whole passages


def test_a_view_that_cannot_be_measured_is_one_line():
    pooled = {"default": random_walk(3, 32, 4, seed=0)}
    with pytest.raises(EffdepthError, match="view drop-pos0 cannot be measured.*no drop-pos0 variant"):
        deff_draws(pooled, AnalysisPlan(bootstrap=5), views=["drop-pos0"])
    with pytest.raises(EffdepthError, match="view length cannot be measured.*no passage lengths"):
        deff_draws(pooled, AnalysisPlan(bootstrap=5), views=["length"])


def test_one_result_against_itself_differs_by_exactly_zero_with_a_zero_width_interval():
    pooled = {"default": random_walk(4, 64, 8, seed=5)}
    plan = AnalysisPlan(views="default,top1pc", similarities=SIMILARITIES, bootstrap=50)
    a, again = deff_draws(pooled, plan), deff_draws(pooled, plan)  # two measurements of the same states
    out = paired_differences(a, again)
    for sim in SIMILARITIES:
        for view in ("default", "top1pc"):
            for quantity in QUANTITIES:
                d = out["differences"][sim][view][quantity]
                assert (d["estimate"], d["interval"], d["resolved"]) == (0.0, [0.0, 0.0], False)
                assert d["a"] == d["b"]
    for sim in ("cka", "cka-debiased"):
        points = out["sample_size"][sim]["points"]
        assert [p["fraction"] for p in points] == ["N/8", "N/4", "N/2", "N"]
        assert all(p["deff"] == 0.0 and p["sd"] in (None, 0.0) for p in points)


def test_each_result_is_taken_against_its_own_f_l_and_the_gap_moves_against_the_ratio():
    states = random_walk(6, 64, 8, seed=6)
    plan = AnalysisPlan(bootstrap=30, calibrated=False)
    a, b = deff_draws({"default": states}, plan), deff_draws({"default": states[:4]}, plan)  # 6 and 3 layers
    d = paired_differences(a, b)["differences"]["cka"]["default"]
    assert d["ratio"]["estimate"] == pytest.approx(d["deff"]["b"] / reference_fl(3) - d["deff"]["a"] / reference_fl(6))
    assert d["gap_pct"]["estimate"] == pytest.approx(-100.0 * d["ratio"]["estimate"])


def test_draws_not_resampled_alike_are_refused():
    pooled = {"default": random_walk(3, 40, 4, seed=7)}
    a = deff_draws(pooled, AnalysisPlan(bootstrap=20, calibrated=False))
    for other in (AnalysisPlan(bootstrap=20, calibrated=False, seed=1), AnalysisPlan(bootstrap=10, calibrated=False)):
        with pytest.raises(EffdepthError, match="not resampled alike"):
            paired_differences(a, deff_draws(pooled, other))
    with pytest.raises(EffdepthError, match="not resampled alike"):
        paired_differences(a, deff_draws({"default": random_walk(3, 41, 4, seed=7)}, AnalysisPlan(bootstrap=20)))


#: Planted: S_0 of energy A0, unit isotropic updates; B is A on the same passages with extra isotropic
#: noise of variance EXTRA added as updates to layers K..L. Both are random walks of cumulative energies
#: E_l (per feature), whose population CKA is min(E_i, E_j) / max(E_i, E_j): D_eff in closed form.
LAYERS, A0, K, EXTRA = 6, 1.0, 4, 2.0


def planted(passages: int, width: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    start = np.sqrt(A0) * rng.normal(size=(1, passages, width))
    a = np.cumsum(np.concatenate([start, rng.normal(size=(LAYERS, passages, width))]), axis=0)
    extra = np.zeros_like(a)
    extra[K:] = np.cumsum(np.sqrt(EXTRA) * rng.normal(size=(LAYERS + 1 - K, passages, width)), axis=0)
    return a, a + extra


def true_difference() -> float:
    layers = np.arange(1.0, LAYERS + 1.0)
    energy_a = A0 + layers
    energy_b = energy_a + EXTRA * np.clip(layers - K + 1, 0, None)
    return float(reference_from_energies(energy_b) - reference_from_energies(energy_a))


@pytest.mark.parametrize("similarity", ["cka", "cka-debiased"])
def test_the_paired_interval_holds_the_planted_difference_and_is_narrower_than_an_unpaired_one(similarity):
    truth = true_difference()
    assert truth > 0.3  # B's noise spreads its later states apart: a difference worth resolving
    held, paired_widths, unpaired_widths = [], [], []
    for trial in range(12):
        a, b = planted(passages=384, width=6, seed=100 + trial)
        plan = AnalysisPlan(similarities=(similarity,), bootstrap=200, seed=trial, calibrated=False, controls=False)
        draws_a, draws_b = deff_draws({"default": a}, plan), deff_draws({"default": b}, plan)
        d = paired_differences(draws_a, draws_b)["differences"][similarity]["default"]["deff"]
        held.append(d["interval"][0] <= truth <= d["interval"][1])
        paired_widths.append(d["interval"][1] - d["interval"][0])
        # unpaired: B resampled independently of A (another seed), as two separate intervals would be
        independent = deff_draws({"default": b}, AnalysisPlan(**{**plan_fields(plan), "seed": trial + 1000}))
        rows = independent["deff"][similarity]["default"][1:] - draws_a["deff"][similarity]["default"][1:]
        lo, hi = percentile_interval(rows)
        unpaired_widths.append(hi - lo)
    assert np.mean(held) >= 0.75, held  # 95% nominal
    assert all(p < u for p, u in zip(paired_widths, unpaired_widths)), (paired_widths, unpaired_widths)
    assert np.median(np.divide(paired_widths, unpaired_widths)) < 0.8


def plan_fields(plan: AnalysisPlan) -> dict:
    return {k: getattr(plan, k) for k in ("views", "similarities", "bootstrap", "calibrated", "controls")}
