"""The sensitivity forms of docs/method.md#sensitivity: tapers and maximum lags against a naive sum over
layer pairs, the aggregations on known spectra, each form's reference, and their resamples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from effdepth.numerics.analysis import AnalysisPlan, analyse_pooled
from effdepth.numerics.references import energy_ratio_matrix, reference_fl
from effdepth.numerics.sensitivity import (
    effective_rank,
    lag_window_deff,
    participation_ratio,
    sensitivity_numbers,
    spearman,
    taper,
    threshold_count,
)
from effdepth.numerics.similarity import deff


def naive_lag_window_deff(sim: np.ndarray, weight, max_lag: int) -> float:
    """N / (1 + 2 sum_k w(k/N) mean_i sim[i, i+k]), written as loops over the layer pairs."""
    n = len(sim)
    total = 0.0
    for k in range(1, max_lag + 1):
        pairs = [sim[i, i + k] for i in range(n - k)]
        total += weight(k / n) * sum(pairs) / len(pairs)
    return n / (1.0 + 2.0 * total)


def random_similarity(n: int, seed: int) -> np.ndarray:
    x = np.cumsum(np.random.default_rng(seed).normal(size=(n, 40)), axis=0)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return (x @ x.T) ** 2


TEXTBOOK = {
    "bartlett": lambda x: 1.0 - x,
    "parzen": lambda x: 1.0 - 6.0 * x * x + 6.0 * x**3 if x <= 0.5 else 2.0 * (1.0 - x) ** 3,
    "tukey-hanning": lambda x: 0.5 * (1.0 + math.cos(math.pi * x)),
}


@pytest.mark.parametrize("name", sorted(TEXTBOOK))
@pytest.mark.parametrize("max_lag", [1, 5, None])
def test_lag_forms_match_a_naive_sum_over_layer_pairs(name, max_lag):
    sim = random_similarity(12, seed=3)
    expected = naive_lag_window_deff(sim, TEXTBOOK[name], 11 if max_lag is None else max_lag)
    assert float(lag_window_deff(sim, max_lag=max_lag, taper_name=name)) == pytest.approx(expected, rel=1e-12)


def test_taper_values_at_known_points():
    assert taper("parzen", np.array([0.25, 0.5, 0.75])).tolist() == pytest.approx([0.71875, 0.25, 0.03125])
    assert taper("tukey-hanning", np.array([1 / 3, 1.0])).tolist() == pytest.approx([0.75, 0.0])
    with pytest.raises(ValueError, match="unknown taper"):
        taper("hann", np.array([0.0]))


def test_full_bartlett_is_d_eff_and_a_lag_beyond_n_is_the_full_lag():
    sim = random_similarity(9, seed=1)
    assert float(lag_window_deff(sim)) == pytest.approx(float(deff(sim)), rel=1e-12)
    assert float(lag_window_deff(sim, max_lag=25)) == pytest.approx(float(deff(sim)), rel=1e-12)
    assert float(lag_window_deff(sim, max_lag=1)) > float(deff(sim))  # a short lag ignores the slow decay


def test_aggregations_on_known_spectra():
    # S = Q diag(lam) Q^T: the aggregations read the spectrum alone.
    lam = np.array([4.0, 2.0, 1.0, 1.0])
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(4, 4)))
    s = q @ np.diag(lam) @ q.T
    p = lam / lam.sum()
    assert float(effective_rank(s)) == pytest.approx(math.exp(-(p * np.log(p)).sum()), rel=1e-10)
    assert float(participation_ratio(s)) == pytest.approx(lam.sum() ** 2 / (lam**2).sum(), rel=1e-10)
    assert float(threshold_count(s)) == 4.0  # 4, 2 cover 75%; 4, 2, 1 only 87.5%; all four 100%
    assert float(threshold_count(s, cover=0.75)) == 2.0
    for n in (1, 5):
        assert float(effective_rank(np.eye(n))) == pytest.approx(n)
        assert float(effective_rank(np.ones((n, n)))) == pytest.approx(1.0)
        assert float(participation_ratio(np.eye(n))) == pytest.approx(n)
        assert float(threshold_count(np.ones((n, n)))) == 1.0


def test_every_form_lands_on_its_reference_for_orthogonal_equal_updates_and_bartlett_reference_is_f_l():
    for n in (3, 12, 30):
        numbers = sensitivity_numbers(energy_ratio_matrix(np.arange(1.0, n + 1.0))[None])
        assert numbers["bartlett"]["reference"][0] == pytest.approx(reference_fl(n), rel=1e-12)
        for key, v in numbers.items():
            assert v["gap_pct"][0] == pytest.approx(0.0, abs=1e-9), key


def test_a_resample_without_a_similarity_has_no_spectrum():
    sims = np.stack([np.eye(3), np.full((3, 3), np.nan)])
    assert np.isnan(effective_rank(sims)[1]) and effective_rank(sims)[0] == pytest.approx(3.0)
    assert np.isnan(threshold_count(sims)[1])


def test_passage_analysis_saves_every_form_with_an_interval_that_holds_it():
    rng = np.random.default_rng(4)
    states = np.concatenate([np.zeros((1, 80, 6)), np.cumsum(rng.normal(size=(8, 80, 6)), axis=0)])
    v = analyse_pooled({"default": states}, AnalysisPlan(bootstrap=100, calibrated=False))["similarities"]["cka"][
        "default"
    ]
    assert v["sensitivity"]["bartlett"]["deff"] == pytest.approx(v["deff"], rel=1e-12)
    assert v["ci"]["sensitivity.bartlett.deff"] == pytest.approx(v["ci"]["deff"], rel=1e-12)
    for key, numbers in v["sensitivity"].items():
        lo, hi = v["ci"][f"sensitivity.{key}.deff"]
        assert lo <= numbers["deff"] <= hi, key
        assert f"sensitivity.{key}.reference" not in v["ci"]


def test_spearman_with_ties_and_degenerate_input():
    assert spearman([1, 2, 3, 4], [1, 2, 3, 4]) == pytest.approx(1.0)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(0.9486832980505138)  # scipy.stats.spearmanr
    assert math.isnan(spearman([1, 2], [2, 1]))
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
