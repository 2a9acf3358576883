"""Every stateful statistic follows one protocol: update, merge, state_dict / load_state_dict.

For each, fed in two halves, (a) saving after the first half (through np.savez and JSON, as a
checkpoint does) and continuing gives what one statistic fed everything gives, and (b) merging
a second statistic fed the second half gives it too.
"""

import io
import json

import numpy as np
import pytest
import torch

from effdepth.measure import MeasurementState
from effdepth.numerics.cka_full import PooledCka
from effdepth.numerics.fits import FitAccumulator
from effdepth.numerics.loss import LossAccumulator
from effdepth.numerics.protocol import Statistic
from effdepth.numerics.streams import ViewAccumulator
from effdepth.numerics.surrogate import CalibratedReferences
from effdepth.numerics.views import parse_view
from effdepth.options import AnalysisOptions

VIEWS = ("default", "drop-pos0", "token-norm")


def batch(seed, B=4, L=3, T=7, d=6):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(L + 1, B, T, d, generator=g, dtype=torch.float64).cumsum(0)


def view_numbers(acc):
    return {(v, s): acc.unit_statistics(v, s).total() for v in VIEWS for s in ("cka", "frobenius")}


def analysis():
    return AnalysisOptions(views=",".join(VIEWS), similarity="cka,frobenius", surrogate_seqs="all", pooling="none")


def logits_for(states):
    return states[-1, :, :, :5], torch.randint(0, 5, states.shape[1:3], generator=torch.Generator().manual_seed(1))


# name: (make(first_sequence), update(statistic, states), what it gives)
CASES = {
    "FitAccumulator": (lambda first: FitAccumulator(), lambda acc, s: acc.update(s.flatten(1, 2)),
                       lambda acc: acc.fit(parse_view("top1pc"))["mean"]),
    "PooledCka": (lambda first: PooledCka(), lambda acc, s: acc.update(s.flatten(1, 2)), lambda acc: acc.statistics()),
    "LossAccumulator": (lambda first: LossAccumulator(), lambda acc, s: acc.update(*logits_for(s), None),
                        lambda acc: acc.result()),
    "ViewAccumulator": (lambda first: ViewAccumulator(VIEWS, similarities=("cka", "frobenius")),
                        lambda acc, s: acc.update(s), view_numbers),
    "CalibratedReferences": (lambda first: CalibratedReferences(VIEWS, similarities=("cka",), seed=3, first_sequence=first),
                             lambda acc, s: acc.update(s),
                             lambda acc: {k: acc.unit_statistics(v, "cka", kind=k).total() for v in VIEWS
                                          for k in ("structural", "matched")}),
    "MeasurementState": (lambda first: MeasurementState.new(analysis(), first_sequence=first),
                         lambda acc, s: acc.update(s, None), lambda acc: view_numbers(acc.views)),
}


def saved_and_loaded(statistic):
    arrays, meta = statistic.state_dict()
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as loaded:
        return {k: loaded[k] for k in loaded.files}, json.loads(json.dumps(meta))


def assert_same(got, want):
    if isinstance(want, dict):
        assert set(got) == set(want)
        for k in want:
            assert_same(got[k], want[k])
    elif isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_saving_and_continuing_gives_what_one_pass_gives(name):
    make, update, gives = CASES[name]
    whole = make(0)
    for seed in (0, 1):
        update(whole, batch(seed))
    first = make(0)
    assert isinstance(first, Statistic)
    update(first, batch(0))
    resumed = make(0)
    resumed.load_state_dict(*saved_and_loaded(first))
    update(resumed, batch(1))
    assert_same(gives(resumed), gives(whole))


@pytest.mark.parametrize("name", list(CASES))
def test_merging_the_second_half_gives_what_one_pass_gives(name):
    make, update, gives = CASES[name]
    whole = make(0)
    for seed in (0, 1):
        update(whole, batch(seed))
    first, second = make(0), make(4)
    update(first, batch(0))
    update(second, batch(1))
    first.merge(second)
    assert_same(gives(first), gives(whole))
