"""What from_states says about input that does not fit (a user's own states, no model)."""

import warnings

import pytest
import torch

import effdepth
from effdepth.errors import EffdepthError


def test_a_mask_that_does_not_match_the_states_is_refused():
    with pytest.raises(EffdepthError, match=r"mask of shape \(4, 5\) does not match.*must be \(4, 10\)"):
        effdepth.from_states(torch.randn(7, 4, 10, 16), mask=torch.ones(4, 5))
    with pytest.raises(EffdepthError, match=r"mask of shape \(4, 10\).*must be \(40,\) or \(1, 40\)"):
        effdepth.from_states(torch.randn(7, 40, 16), mask=torch.ones(4, 10), pooling="none")


@pytest.mark.parametrize("pooling", ["mean", "none"])
def test_a_matching_mask_counts_only_real_tokens(pooling):
    mask = torch.ones(4, 10, dtype=torch.bool)
    mask[:, 7:] = False
    r = effdepth.from_states(torch.randn(7, 4, 10, 16), mask=mask, pooling=pooling)
    assert r.default.tokens == 28


@pytest.mark.parametrize("pooling", ["mean", "none"])
@pytest.mark.parametrize("shape", [(4, 3, 6, 8), (4, 6, 8)])
def test_too_few_passages_is_a_one_line_error_naming_the_way_out(pooling, shape):
    # Passages are the bootstrap's units and the debiased estimator pairs four of them, whatever the samples.
    with pytest.raises(EffdepthError, match="needs at least 4") as info:
        effdepth.from_states(torch.randn(*shape), pooling=pooling)
    assert "\n" not in str(info.value)


def test_nan_in_user_states_names_the_layer_not_a_dtype():
    s = torch.randn(4, 6, 6, 8, dtype=torch.float64)
    s[2, 1, 3, 0] = float("nan")
    with pytest.raises(EffdepthError, match=r"states\[2\] contains NaN") as info:
        effdepth.from_states(s)
    assert "--dtype" not in str(info.value)


def test_all_zero_states_warn_and_enough_passages_do_not():
    with pytest.warns(UserWarning, match="every state is zero"):
        effdepth.from_states(torch.zeros(4, 6, 6, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        effdepth.from_states(torch.randn(4, 24, 6, 8), bootstrap=20)


def test_more_tokens_per_passage_than_the_reduction_allows_is_refused():
    with pytest.raises(EffdepthError, match="--tokens-per-passage must be a whole number of 1 or more"):
        effdepth.from_states(torch.randn(4, 6, 6, 8), pooling="none", tokens_per_passage=0)
    with pytest.raises(EffdepthError, match="add --pooling none or leave it out"):
        effdepth.from_states(torch.randn(4, 6, 6, 8), tokens_per_passage=3)


def test_more_tokens_per_passage_than_a_passage_holds_is_one_line():
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[2, 3:] = False
    with pytest.raises(
        EffdepthError, match=r"--tokens-per-passage 5 is more than passage\(s\) 2 hold \(as few as 3"
    ) as e:
        effdepth.from_states(torch.randn(4, 4, 6, 8), mask=mask, pooling="none", tokens_per_passage=5)
    assert "\n" not in str(e.value)
    assert effdepth.from_states(torch.randn(4, 4, 6, 8), mask=mask, pooling="none", tokens_per_passage=3).default.deff


@pytest.mark.parametrize("pooling", ["mean", "none"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_states_given_to_an_accumulator_are_refused_in_one_line(pooling, bad):
    acc = effdepth.Accumulator(pooling=pooling, bootstrap=0)
    acc.update(torch.randn(4, 6, 6, 8))
    s = torch.randn(4, 6, 6, 8)
    s[2, 1, :, 0] = bad
    with pytest.raises(
        EffdepthError,
        match=r"non-finite states at layer 2 \(S_2, model dtype float32\) in passages 6, 7, 8, 9, \.\.\.:",
    ) as info:
        acc.update(s)
    assert "\n" not in str(info.value)
    assert acc.sequences == 6 and acc.result().default.sequences == 6  # the batch is refused whole
