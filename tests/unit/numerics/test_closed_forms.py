"""docs/method.md#closed-forms: every closed form, through the public from_states."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import effdepth
from effdepth.numerics.references import reference_fl, reference_from_energies


def from_states(states, **options):
    """These closed forms and identities are the cosine families': frobenius unless a test says otherwise."""
    options.setdefault("similarity", "frobenius")
    return effdepth.from_states(states, **options)


REL = 1e-12


def orthogonal_increment_states(energies, initial, tokens, d, seed=0):
    """States S_0..S_L whose increments are exactly orthogonal (a QR basis),
    with |S_0|^2 = initial and |U_l|^2 = energies[l-1], for every token alike."""
    rng = np.random.default_rng(seed)
    L = len(energies)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    a = rng.standard_normal(tokens)
    a /= np.linalg.norm(a)
    incs = [np.sqrt(initial) * np.outer(a, q[:, 0])]
    incs += [np.sqrt(e) * np.outer(a, q[:, l]) for l, e in enumerate(energies, start=1)]
    states = np.cumsum(np.stack(incs), axis=0)
    assert states.shape == (L + 1, tokens, d)
    return torch.from_numpy(states)


sizes = st.integers(min_value=1, max_value=12)


@settings(max_examples=40, deadline=None)
@given(L=sizes, tokens=st.integers(1, 6), data=st.data())
def test_identical_states_give_one(L, tokens, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 10_000)))
    s = np.repeat(rng.standard_normal((1, tokens, 8)), L + 1, axis=0) * rng.uniform(0.5, 2)
    for sim in ("frobenius", "token"):
        assert from_states(s, similarity=sim).default.deff == pytest.approx(1.0, rel=REL)


@settings(max_examples=40, deadline=None)
@given(L=sizes, include=st.booleans())
def test_mutually_orthogonal_states_give_n(L, include):
    d = L + 2
    s = torch.zeros(L + 1, 3, d, dtype=torch.float64)
    for l in range(L + 1):
        s[l, :, l] = torch.tensor([1.0, 2.0, 3.0])
    n = L + 1 if include else L
    for sim in ("frobenius", "token"):
        assert from_states(s, include_embedding=include, similarity=sim).default.deff == pytest.approx(n, rel=REL)


@settings(max_examples=40, deadline=None)
@given(L=sizes, tokens=st.integers(1, 5))
def test_orthogonal_equal_updates_without_initial_state_give_fl(L, tokens):
    s = orthogonal_increment_states([1.0] * L, 0.0, tokens, L + 1)
    for sim in ("frobenius", "token"):
        v = from_states(s, similarity=sim).default
        assert v.deff == pytest.approx(2 * L / (L + 1), rel=REL)
        assert v.reference == pytest.approx(2 * L / (L + 1), rel=REL)
        assert v.ratio == pytest.approx(1.0, rel=REL)


@settings(max_examples=40, deadline=None)
@given(L=sizes)
def test_include_embedding_with_unit_first_state_gives_fn(L):
    # With the embedding analysed, F_N counts S_0 as one unit update (E = 1..N).
    s = orthogonal_increment_states([1.0] * L, 1.0, 2, L + 2)
    v = from_states(s, include_embedding=True).default
    assert v.deff == pytest.approx(reference_fl(L + 1), rel=REL)


@settings(max_examples=60, deadline=None)
@given(
    energies=st.lists(st.floats(1e-3, 1e3), min_size=1, max_size=12),
    initial=st.floats(0.0, 1e3),
    include=st.booleans(),
    sim=st.sampled_from(["frobenius", "token"]),
)
def test_orthogonal_updates_give_r_of_cumulative_energies(energies, initial, include, sim):
    L = len(energies)
    s = orthogonal_increment_states(energies, initial, 3, L + 2)
    cumulative = initial + np.cumsum([0.0] + list(energies))  # E_0..E_L
    expected = reference_from_energies(cumulative if include else cumulative[1:])
    if include and initial == 0.0:
        return  # S_0 = 0 has no direction: the closed form needs E_0 > 0
    v = from_states(s, include_embedding=include, similarity=sim).default
    assert v.deff == pytest.approx(float(expected), rel=1e-10)
    # Orthogonal updates: D_eff is exactly R_matched, nothing is left to correlation.
    assert v.references["matched"] == pytest.approx(v.deff, rel=1e-10)
    assert v.attribution["correlated_updates"] == pytest.approx(0.0, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(fl=st.floats(1, 2), r_init=st.floats(1, 2), r_matched=st.floats(1, 2), d=st.floats(1, 2))
def test_attribution_sums_to_gap(fl, r_init, r_matched, d):
    from effdepth.numerics.references import gap_attribution

    parts = gap_attribution(fl, r_init, r_matched, d)
    assert sum(float(v) for v in parts.values()) == pytest.approx(fl - d, abs=1e-12)


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_ar1_in_high_dimension(rho):
    L, d, tokens = 8, 4096, 64
    gen = torch.Generator().manual_seed(1)
    s = torch.empty(L + 1, tokens, d, dtype=torch.float64)
    s[0] = torch.randn(tokens, d, generator=gen, dtype=torch.float64)
    for l in range(1, L + 1):
        s[l] = rho * s[l - 1] + np.sqrt(1 - rho**2) * torch.randn(tokens, d, generator=gen, dtype=torch.float64)
    n = L
    expected = n**2 / (n + 2 * sum((n - k) * rho ** (2 * k) for k in range(1, n)))
    got = from_states(s).default.deff
    # finite-d noise: squared cosines of independent vectors are ~1/(tokens*d), not 0
    assert got == pytest.approx(expected, rel=0.01)


def test_fl_below_two_for_every_n():
    for n in range(1, 500):
        assert reference_fl(n) < 2


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.lists(st.sampled_from([0.0, 1e-30, 1e-8, 0.5, 1.0, 3.0, 1e12]), min_size=1, max_size=7),
        min_size=1,
        max_size=5,
    ).filter(lambda rows: len({len(r) for r in rows}) == 1),
)
def test_the_reference_sums_as_one_product_equal_the_ratio_matrices_summed(steps):
    # Cumulative energies never decrease (with zeros, ties and wide ranges): the product form
    # the per-token statistics use equals the min/max ratios summed over tokens.
    from effdepth.numerics.references import energy_ratio_matrix, ratio_matrix_sum

    energies = torch.tensor(np.cumsum(np.asarray(steps), axis=1), dtype=torch.float64)
    want = energy_ratio_matrix(energies).sum(0)
    np.testing.assert_allclose(ratio_matrix_sum(energies).numpy(), want.numpy(), rtol=1e-14, atol=0)
