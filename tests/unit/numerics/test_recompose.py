"""Offline recomposition, the pure maths: the carry matrix, recomposition commuting with mean pooling,
and Gram-Schmidt decorrelation (docs/method.md#recomposition)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effdepth
from effdepth.errors import EffdepthError
from effdepth.numerics.recompose import (
    carried,
    carry_matrix,
    centred,
    decorrelated_increments,
    increments,
    recomposed,
)

lams = st.floats(0.0, 1.0)


def random_tokens(seed, layers, passages, tokens, d):
    """Token states (L+1, N, T, d) with a large initial state and correlated increments of uneven sizes."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((layers + 1, passages, tokens, d)) * rng.uniform(0.1, 5.0, size=(layers + 1, 1, 1, 1))
    x[0] += 3.0
    x[1:] += rng.uniform(-1, 1) * x[:-1]
    return np.cumsum(x, axis=0)


def carry_sweep(states, lam):
    """S'_0 = S_0, S'_l = lam S'_{l-1} + (S_l - S_{l-1}), built explicitly, layer by layer."""
    out = np.empty_like(states)
    out[0] = states[0]
    for layer in range(1, len(states)):
        out[layer] = lam * out[layer - 1] + (states[layer] - states[layer - 1])
    return out


def mean_pool(tokens, weights):
    """Each passage's weighted mean over its tokens: (L+1, N, T, d), (N, T) weights summing to 1 per passage."""
    return np.einsum("lntd,nt->lnd", tokens, weights)


def pooling_weights(rng, passages, tokens, drop_first):
    """Weights of a linear view: each passage's first n tokens (n varies), position 0 left out when asked."""
    lengths = rng.integers(2, tokens + 1, size=passages)
    keep = (np.arange(tokens)[None, :] < lengths[:, None]).astype(float)
    if drop_first:
        keep[:, 0] = 0.0
    return keep / keep.sum(axis=1, keepdims=True)


# ---------------------------------------------------------------- the carry matrix


@given(n=st.integers(1, 9), lam=lams)
def test_carry_matrix_inverts_the_one_step_recursion(n, lam):
    """A = (I - lam J)^-1 with J the shift below the diagonal: S' - lam S'_shifted = X, each step."""
    a = carry_matrix(n, lam)
    step = np.eye(n) - lam * np.eye(n, k=-1)
    np.testing.assert_allclose(a @ step, np.eye(n), atol=1e-12)
    np.testing.assert_allclose(np.diag(a), np.ones(n))
    assert np.all(np.triu(a, 1) == 0)


def test_carry_matrix_closed_forms():
    np.testing.assert_array_equal(carry_matrix(4, 0.0), np.eye(4))  # lam = 0: each state is its own increment
    np.testing.assert_array_equal(carry_matrix(3, 1.0), np.tril(np.ones((3, 3))))  # lam = 1: the cumulative sum
    np.testing.assert_allclose(carry_matrix(3, 0.5)[2], [0.25, 0.5, 1.0])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), layers=st.integers(1, 7), lam=lams)
def test_carried_increments_are_the_explicit_sweep(seed, layers, lam):
    states = random_tokens(seed, layers, 3, 4, 5)
    x = increments(states)
    np.testing.assert_array_equal(x[0], states[0])
    np.testing.assert_allclose(carried(x, lam), carry_sweep(states, lam), rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(recomposed(states, 1.0), states, rtol=1e-12, atol=1e-10)


def test_increments_need_two_states():
    with pytest.raises(EffdepthError, match="L >= 1"):
        increments(np.ones((1, 4, 3)))


# ---------------------------------------------------------------- recomposition commutes with pooling


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    layers=st.integers(1, 6),
    passages=st.integers(1, 5),
    tokens=st.integers(2, 7),
    lam=lams,
    drop_first=st.booleans(),
)
def test_recomposed_pooled_vectors_are_the_pooled_recomposed_token_stream(
    seed, layers, passages, tokens, lam, drop_first
):
    """Mean pooling (any fixed selection of tokens, as default, drop-bos and drop-pos0 pool) is linear in
    the token states, so recomposing the pooled vectors equals pooling the explicitly recomposed tokens."""
    rng = np.random.default_rng(seed)
    states = random_tokens(seed, layers, passages, tokens, 4)
    weights = pooling_weights(rng, passages, tokens, drop_first)
    pooled_then_recomposed = recomposed(mean_pool(states, weights), lam)
    recomposed_then_pooled = mean_pool(carry_sweep(states, lam), weights)
    np.testing.assert_allclose(pooled_then_recomposed, recomposed_then_pooled, rtol=1e-11, atol=1e-10)


def test_the_same_through_the_length_control():
    """The length control is one linear map of the passages for every layer, so it commutes too."""
    rng = np.random.default_rng(0)
    states = random_tokens(1, 4, 12, 6, 3)
    pooled = mean_pool(states, pooling_weights(rng, 12, 6, False))
    basis = np.stack([np.ones(12), 1.0 / rng.integers(2, 7, size=12)], axis=1)
    residual = np.eye(12) - basis @ np.linalg.pinv(basis)
    regress = lambda s: np.einsum("mn,lnd->lmd", residual, s)  # noqa: E731
    np.testing.assert_allclose(regress(recomposed(pooled, 0.6)), recomposed(regress(pooled), 0.6), atol=1e-10)


# ---------------------------------------------------------------- decorrelation


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), layers=st.integers(1, 6), passages=st.integers(3, 8), d=st.integers(2, 6))
def test_gram_schmidt_gives_orthogonal_centred_increments_with_their_energies(seed, layers, passages, d):
    rng = np.random.default_rng(seed)
    pooled = np.cumsum(rng.standard_normal((layers + 1, passages, d)) + rng.uniform(-2, 2), axis=0)
    x = centred(increments(pooled))
    if (layers + 1) > (passages - 1) * d:  # centred, the increments span at most (N - 1) d dimensions
        return
    if np.linalg.matrix_rank(x.reshape(layers + 1, -1), tol=1e-8) < layers + 1:
        return
    z = decorrelated_increments(increments(pooled))
    flat, orig = z.reshape(layers + 1, -1), x.reshape(layers + 1, -1)
    energy = np.sum(orig**2, axis=1)
    gram = flat @ flat.T
    np.testing.assert_allclose(np.diag(gram), energy, rtol=1e-10)  # energies kept
    off = gram - np.diag(np.diag(gram))
    assert np.max(np.abs(off)) <= 1e-9 * energy.max()  # orthogonal
    np.testing.assert_allclose(z.mean(axis=1), 0.0, atol=1e-9 * np.sqrt(energy.max()))  # centred across passages
    # In order: the first keeps its direction, and the first k span what the first k centred increments span.
    np.testing.assert_allclose(flat[0], orig[0], rtol=1e-10, atol=1e-10)
    for k in range(1, layers + 2):
        q, _ = np.linalg.qr(orig[:k].T)
        np.testing.assert_allclose(q @ (q.T @ flat[:k].T), flat[:k].T, atol=1e-8 * np.sqrt(energy.max()))
    # each new increment points along what its original adds to the earlier ones (positive overlap)
    assert np.all(np.sum(flat * orig, axis=1) > 0)


def test_orthogonal_increments_are_left_as_they_are_and_a_zero_one_stays_zero():
    rng = np.random.default_rng(1)
    q, _ = np.linalg.qr(centred(rng.standard_normal((1, 16, 4)))[0].reshape(16, 4))  # orthonormal, centred columns
    x = np.stack([2.0 * np.outer(q[:, 0], [1.0, 0.0]), np.zeros((16, 2)), 0.5 * np.outer(q[:, 1], [0.0, 1.0])])
    np.testing.assert_allclose(decorrelated_increments(x), x, atol=1e-12)


def test_an_increment_in_the_span_of_the_earlier_ones_is_refused():
    x = np.random.default_rng(2).standard_normal((3, 5, 2))
    x[2] = 2.0 * x[0] - x[1]
    with pytest.raises(EffdepthError, match="increment 2 lies in the span"):
        decorrelated_increments(x)
    with pytest.raises(EffdepthError, match="L\\+1 = 4 independent"):
        decorrelated_increments(np.random.default_rng(3).standard_normal((4, 2, 1)))  # (N - 1) d = 1 dimension


@pytest.mark.parametrize("include_embedding", [False, True])
def test_decorrelating_isotropic_orthogonal_increments_lands_on_r_matched(include_embedding):
    """The closed-form case (docs/method.md#closed-forms-cka): isotropic increments with zero
    cross-covariance are the process R_matched describes, and decorrelation leaves them as they are, so
    the biased CKA (the paper's) lands on R_matched exactly. (The debiased estimator's diagonal
    corrections do not vanish for these matrices; for other increments the decorrelated D_eff and
    R_matched differ under CKA.)"""
    n, d, layers = 64, 4, 5
    rng = np.random.default_rng(4)
    basis, _ = np.linalg.qr(centred(rng.standard_normal((1, n, n - 1)))[0])
    scales = rng.uniform(0.5, 2.0, size=layers + 1)
    x = np.stack([scales[k] * basis[:, k * d : (k + 1) * d] for k in range(layers + 1)])
    z = decorrelated_increments(x)
    np.testing.assert_allclose(z, x, atol=1e-12)
    r = effdepth.from_pooled(carried(z, 1.0), include_embedding=include_embedding, bootstrap=0)
    v = r.similarities["cka"]["default"]
    assert v.deff == pytest.approx(v.references["matched"], rel=1e-9)
