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
        effdepth.from_states(torch.randn(7, 40, 16), mask=torch.ones(4, 10))


def test_a_matching_mask_counts_only_real_tokens():
    mask = torch.ones(4, 10, dtype=torch.bool)
    mask[:, 7:] = False
    r = effdepth.from_states(torch.randn(7, 4, 10, 16), mask=mask)
    assert r.default.tokens == 28
    one = effdepth.from_states(torch.randn(7, 40, 16), mask=torch.arange(40) < 30, similarity="frobenius")
    assert one.default.tokens == 30


def test_one_sequence_under_cka_is_a_one_line_error_naming_the_way_out():
    # Token-mode cka compares the sequences of a pair: one sequence has none.
    with pytest.raises(EffdepthError, match="at least two sequences.*frobenius or token first") as info:
        effdepth.from_states(torch.randn(4, 6, 8))
    assert "\n" not in str(info.value)


def test_nan_in_user_states_names_the_layer_not_a_dtype():
    s = torch.randn(4, 2, 6, 8, dtype=torch.float64)
    s[2, 1, 3, 0] = float("nan")
    with pytest.raises(EffdepthError, match=r"states\[2\] contains NaN") as info:
        effdepth.from_states(s)
    assert "--dtype" not in str(info.value)


def test_all_zero_states_and_a_lone_sequence_with_bootstrap_warn():
    with pytest.warns(UserWarning, match="every state is zero"):
        effdepth.from_states(torch.zeros(4, 2, 6, 8))
    with pytest.warns(UserWarning, match="one sequence"):
        r = effdepth.from_states(torch.randn(4, 6, 8), bootstrap=200, similarity="frobenius")
    assert r.default.ci is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        effdepth.from_states(torch.randn(4, 3, 6, 8), bootstrap=20)
