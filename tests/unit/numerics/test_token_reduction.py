"""The token reduction in the passage core (numerics/sampling.py): a passage's tokens as samples, through the
same analysis as the mean. Against a naive token-level CKA; the isotropic null on F_L under the debiased
estimator; draws that do not depend on the batch; units of whole passages."""

import numpy as np
import pytest
import torch
from naive_hsic import naive_biased, naive_debiased

from effdepth.numerics.analysis import AnalysisPlan, analyse_pooled
from effdepth.numerics.hsic_resample import Units
from effdepth.numerics.references import reference_fl
from effdepth.numerics.sampling import TokenReduction, TokenSampler, sample_counts, sample_offsets, sample_units
from effdepth.numerics.views import parse_view


def sampled(states, mask, bos, variants, k, seed=0, batch=4):
    """Each variant's samples (L+1, S, d) in passage order, batch by batch as a forward would give them."""
    layers, n = states.shape[0], states.shape[1]
    sampler = TokenSampler(variants, layers - 1, k=k, seed=seed)
    out = {v: [] for v in variants}
    for lo in range(0, n, batch):
        idx = list(range(lo, min(n, lo + batch)))
        sampler.start(mask[idx], bos[idx], idx)
        for layer in range(layers):
            sampler.layer(layer, states[layer, idx])
        for v, x in sampler.output().items():
            out[v].append(x.numpy())
    return {v: np.concatenate(parts, axis=1) for v, parts in out.items()}


def naive_deff(stack: np.ndarray, debiased: bool) -> float:
    layers = stack[1:]
    hsic = naive_debiased if debiased else naive_biased
    h = np.array([[hsic(a - a.mean(0), b - b.mean(0)) if debiased else hsic(a, b) for b in layers] for a in layers])
    return float(len(layers) ** 2 / (h / np.sqrt(np.outer(np.diag(h), np.diag(h)))).sum())


def token_states(passages=12, longest=9, width=6, layers=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    states = torch.randn(layers + 1, passages, longest, width, dtype=torch.float64, generator=g).cumsum(0)
    lengths = torch.randint(3, longest + 1, (passages,), generator=g)
    mask = (torch.arange(longest)[None] < lengths[:, None]).to(torch.float64)
    bos = torch.arange(passages) % 3 == 0
    return states, mask, bos, lengths.numpy()


@pytest.mark.parametrize("k", [None, 3])
def test_the_token_reduction_equals_a_naive_token_level_cka(k):
    states, mask, bos, lengths = token_states()
    variants = ["default", "drop-pos0", "drop-bos", "token-norm"]
    samples = sampled(states, mask, bos, variants, k)
    offsets = TokenReduction(k).offsets(lengths, bos.numpy(), variants)
    for v in variants:
        assert samples[v].shape[1] == offsets[v][-1]
    plan = AnalysisPlan(views="default,drop-pos0,drop-bos,token-norm,top1pc", bootstrap=0, calibrated=False)
    out = analyse_pooled(samples, plan, lengths=lengths, offsets=offsets)
    for view in ("default", "drop-pos0", "drop-bos", "token-norm"):
        for sim, debiased in (("cka", False), ("cka-debiased", True)):
            got = out["similarities"][sim][view]["deff"]
            assert got == pytest.approx(naive_deff(samples[view], debiased), rel=1e-9), (view, sim)
    # the samples themselves: each passage's kept tokens, token-norm's divided by their norms
    first = samples["default"][:, : offsets["default"][1]]
    kept = np.flatnonzero(mask[0].numpy())
    if k is None:
        np.testing.assert_allclose(first, states[:, 0, kept].numpy())
    np.testing.assert_allclose(
        samples["token-norm"], samples["default"] / np.linalg.norm(samples["default"], axis=-1, keepdims=True)
    )
    assert "confounds" in out and out["sample_size"]["cka"]["points"]


def test_draws_depend_on_the_passage_and_the_selection_never_on_the_batch():
    states, mask, bos, lengths = token_states(passages=10, longest=12)
    one = sampled(states, mask, bos, ["default", "token-norm", "drop-pos0"], 4, batch=10)
    other = sampled(states, mask, bos, ["default", "token-norm", "drop-pos0"], 4, batch=3)
    for v in one:
        np.testing.assert_array_equal(one[v], other[v])
    tn = one["token-norm"]  # token-norm selects as default: the same tokens, normalised
    np.testing.assert_allclose(tn, one["default"] / np.linalg.norm(one["default"], axis=-1, keepdims=True))
    reseeded = sampled(states, mask, bos, ["default"], 4, seed=1)
    assert not np.array_equal(reseeded["default"], one["default"])


def test_units_hold_whole_passages_and_counts_follow_the_selection():
    counts = sample_counts([4, 6, 2, 5], [True, False, True, False], parse_view("drop-bos"), None)
    assert counts.tolist() == [3, 6, 1, 5]
    offsets = sample_offsets(counts)
    units = sample_units(Units.blocks(4, 2), offsets)
    assert units.bounds.tolist() == [0, 9, 15]  # passages 0-1 and 2-3, all their tokens
    assert sample_counts([4, 6], [False, False], parse_view("drop-pos0"), 3).tolist() == [3, 3]


def test_the_isotropic_null_of_the_token_reduction_lands_on_f_l_under_the_debiased_estimator():
    """Tokens of isotropic Gaussian equal increments, independent token by token: F_L's process."""
    g = torch.Generator().manual_seed(3)
    layers, passages, longest, width = 6, 64, 16, 48
    steps = torch.randn(layers + 1, passages, longest, width, dtype=torch.float64, generator=g)
    steps[0] *= 1e-6  # (almost) no initial state: S_l is the sum of l equal updates
    states = steps.cumsum(0)
    mask = torch.ones(passages, longest)
    bos = torch.zeros(passages, dtype=torch.bool)
    samples = sampled(states, mask, bos, ["default"], 8)
    offsets = TokenReduction(8).offsets(np.full(passages, longest), bos.numpy(), ["default"])
    out = analyse_pooled(samples, AnalysisPlan(bootstrap=0, calibrated=False), offsets=offsets)
    ratio = out["similarities"]["cka-debiased"]["default"]["deff"] / reference_fl(layers)
    assert ratio == pytest.approx(1.0, abs=0.02)
