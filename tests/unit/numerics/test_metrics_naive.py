"""from_states against an independent naive computation written here: for a passage's mean and for its tokens
as samples, with padding, the embedding state and both CKA estimators."""

import numpy as np
import pytest
import torch
from naive_hsic import naive_biased, naive_debiased

import effdepth


def naive_deff(samples, include_embedding, debiased):
    """D_eff = N^2 / sum of the CKA matrix, straight from docs/method.md, with loops."""
    layers = samples if include_embedding else samples[1:]
    hsic = naive_debiased if debiased else naive_biased
    h = np.array([[hsic(a, b) for b in layers] for a in layers])
    cka = h / np.sqrt(np.outer(np.diag(h), np.diag(h)))
    return len(layers) ** 2 / cka.sum()


def naive_samples(states, mask, pooling):
    """Per layer, the samples: each passage's mean over its real tokens, or every real token; float32, as the
    store keeps them."""
    per_passage = [s[:, mask[b]] for b, s in enumerate(np.moveaxis(states, 1, 0))]  # each (L+1, T_b, d)
    if pooling == "mean":
        samples = np.stack([p.mean(axis=1) for p in per_passage], axis=1)
    else:
        samples = np.concatenate(per_passage, axis=1)
    return samples.astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("pooling", ["mean", "none"])
@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_naive(pooling, include, seed):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(5, 7, 6, 4, generator=g, dtype=torch.float64).cumsum(0)
    mask = torch.ones(7, 6, dtype=torch.bool)
    mask[2, 4:] = False
    mask[5, :2] = False
    r = effdepth.from_states(s, mask=mask, pooling=pooling, include_embedding=include)
    samples = naive_samples(s.numpy(), mask.numpy(), pooling)
    for similarity, debiased in (("cka", False), ("cka-debiased", True)):
        want = naive_deff(samples, include, debiased)
        assert r.view("default", similarity).deff == pytest.approx(want, rel=1e-10), similarity
    assert r.default.tokens == int(mask.sum())


def test_k_tokens_per_passage_are_drawn_from_the_passage_and_reproducible():
    s = torch.randn(4, 6, 10, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64).cumsum(0)
    one = effdepth.from_states(s, pooling="none", tokens_per_passage=3, seed=4)
    again = effdepth.from_states(s, pooling="none", tokens_per_passage=3, seed=4)
    other = effdepth.from_states(s, pooling="none", tokens_per_passage=3, seed=5)
    assert one.config["reduction"]["per_variant"]["default"] == 18 and one.default.sequences == 6
    assert one.default.deff == again.default.deff != other.default.deff
    assert one.config["reduction"]["tokens_per_passage"] == 3 and one.token_samples


def deff_from_profile(profile: np.ndarray) -> np.ndarray:
    """D_eff = N / (1 + 2 sum_{k>=1} (1 - k/N) P(k)), the integrated-autocorrelation form."""
    p = np.asarray(profile, dtype=np.float64)
    n = p.shape[-1]
    k = np.arange(1, n)
    return n / (1.0 + 2.0 * ((1.0 - k / n) * p[..., 1:]).sum(axis=-1))


def test_profile_form_equals_matrix_form():
    from effdepth.numerics.similarity import deff

    r = effdepth.from_states(torch.randn(6, 8, 4, 5, generator=torch.Generator().manual_seed(2)).cumsum(0))
    v = r.default
    assert float(deff_from_profile(np.array(v.profile))) == pytest.approx(
        float(deff(np.array(v.similarity))), rel=1e-12
    )
