"""The token-mode similarity registry: every spec is complete, and a new spec is all a similarity needs."""

import dataclasses

import numpy as np
import pytest
import torch

from effdepth.errors import EffdepthError
from effdepth.numerics import similarities
from effdepth.numerics.accumulate import STAT_KEYS, deff_statistics
from effdepth.numerics.metrics import similarity_matrix
from effdepth.numerics.similarities import SIMILARITIES, UNITS, get_similarity
from effdepth.numerics.streams import ViewAccumulator
from effdepth.numerics.summary import view_summaries


def states(seed=0, L=4, B=6, T=8, d=5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(L + 1, B, T, d, generator=g, dtype=torch.float64).cumsum(0)


@pytest.mark.parametrize("name", list(SIMILARITIES))
def test_every_spec_is_complete(name):
    spec = get_similarity(name)
    assert spec.name == name and spec.unit in UNITS and spec.label and spec.axis_label
    assert set(spec.deff_keys) <= set(STAT_KEYS) and "n" in spec.deff_keys
    assert spec.resampled == (spec.unit != "run")


def test_an_unknown_similarity_is_a_one_line_error():
    with pytest.raises(EffdepthError, match="unknown similarity 'cosine'; choose from frobenius, token, cka, cka-full"):
        get_similarity("cosine")


@pytest.mark.parametrize("name", list(SIMILARITIES))
def test_each_matrix_is_one_on_the_diagonal_and_symmetric(name):
    acc = ViewAccumulator(["default"], similarities=(name,))
    acc.update(states())
    totals = acc.unit_statistics("default", name).total()
    sim = similarity_matrix(totals, name, include_embedding=False)
    np.testing.assert_allclose(np.diag(sim), 1.0)
    np.testing.assert_allclose(sim, sim.T, atol=1e-12)


def test_a_registered_spec_is_all_a_new_similarity_needs(monkeypatch):
    # A copy of frobenius under another name goes through the accumulator, its statistics and the
    # summaries with no change anywhere else, and gives frobenius's numbers.
    copy = dataclasses.replace(SIMILARITIES["frobenius"], name="frobenius-copy", label="a copy")
    monkeypatch.setitem(similarities.SIMILARITIES, "frobenius-copy", copy)
    assert deff_statistics(["frobenius-copy"]) == ("n", "gram_states")
    acc = ViewAccumulator(["default", "drop-pos0"], similarities=("frobenius-copy",))
    acc.update(states())
    got, _ = view_summaries(acc, similarity="frobenius-copy", include_embedding=False, bootstrap=20, seed=0)
    want, _ = view_summaries(acc, similarity="frobenius", include_embedding=False, bootstrap=20, seed=0)
    for view in ("default", "drop-pos0"):
        assert got[view]["deff"] == want[view]["deff"]
        assert got[view]["ci"]["deff"] == want[view]["ci"]["deff"]
        assert got[view]["sequences"] == want[view]["sequences"] == 6
