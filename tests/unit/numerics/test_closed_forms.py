"""docs/method.md#closed-forms: the closed forms of METHOD section 8 through the public from_states, for both
reductions (a passage's mean, its tokens), and the identities of the references."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import effdepth
from effdepth.numerics.references import reference_fl

REL = 1e-12
sizes = st.integers(min_value=2, max_value=12)


@settings(max_examples=25, deadline=None)
@given(L=sizes, pooling=st.sampled_from(["mean", "none"]), data=st.data())
def test_identical_states_give_one(L, pooling, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 10_000)))
    s = np.repeat(rng.standard_normal((1, 6, 3, 8)), L + 1, axis=0) * rng.uniform(0.5, 2)
    for similarity in ("cka", "cosine"):
        r = effdepth.from_states(s, similarity=similarity, pooling=pooling)
        assert r.default.deff == pytest.approx(1.0, rel=REL)


@settings(max_examples=25, deadline=None)
@given(L=sizes, include=st.booleans(), pooling=st.sampled_from(["mean", "none"]))
def test_mutually_orthogonal_states_give_n(L, include, pooling):
    # METHOD section 8: state l is an orthonormal column q_l (orthogonal to the all-ones vector) over the
    # passages, in a coordinate of its own, so every cross-covariance is exactly zero; each passage holds two
    # identical tokens, so its mean and its tokens give the same columns.
    passages = L + 4
    q, _ = np.linalg.qr(np.column_stack([np.ones(passages), np.random.default_rng(L).normal(size=(passages, L + 1))]))
    s = torch.zeros(L + 1, passages, 2, L + 1, dtype=torch.float64)
    for l in range(L + 1):
        s[l, :, :, l] = torch.from_numpy(q[:, l + 1])[:, None]
    n = L + 1 if include else L
    r = effdepth.from_states(s, include_embedding=include, pooling=pooling)
    # The biased estimator's cross terms vanish exactly; the debiased one's zeroed diagonals leave a
    # finite-sample remainder (its own closed forms are the isotropic ones, test_passage_estimators.py).
    assert r.view("default", "cka").deff == pytest.approx(n, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(fl=st.floats(1, 2), r_init=st.floats(1, 2), r_matched=st.floats(1, 2), d=st.floats(1, 2))
def test_attribution_sums_to_gap(fl, r_init, r_matched, d):
    from effdepth.numerics.references import gap_attribution

    parts = gap_attribution(fl, r_init, r_matched, d)
    assert sum(float(v) for v in parts.values()) == pytest.approx(fl - d, abs=1e-12)


def test_fl_below_two_for_every_n():
    for n in range(1, 500):
        assert reference_fl(n) < 2
