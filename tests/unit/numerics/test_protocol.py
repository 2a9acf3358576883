"""Every stateful statistic follows one protocol: update, merge, state_dict / load_state_dict, compute.

For each, fed in two halves, (a) saving after the first half (through np.savez and JSON, as a
checkpoint does) and continuing computes what one statistic fed everything computes, and (b)
merging a second statistic fed the second half computes it too; computing changes nothing.
"""

import io
import json
from typing import Protocol, runtime_checkable

import numpy as np
import pytest
import torch

from effdepth.measure import MeasurementState
from effdepth.numerics.cka_full import PooledCka
from effdepth.numerics.fits import FitAccumulator
from effdepth.numerics.loss import LossAccumulator
from effdepth.numerics.sequence_units import SequenceUnits
from effdepth.numerics.statistics import UnitStatistics
from effdepth.numerics.streams import ViewAccumulator
from effdepth.numerics.surrogate import CalibratedReferences
from effdepth.numerics.views import parse_view
from effdepth.options import AnalysisOptions

VIEWS = ("default", "drop-pos0", "token-norm")


@runtime_checkable
class Statistic(Protocol):
    """The protocol every stateful statistic follows (in the spirit of torchmetrics' ``Metric``): checkpoints,
    resume and distributed gathering rely on it alone."""

    def update(self, *args, **kwargs) -> None: ...

    def merge(self, other) -> None: ...

    def state_dict(self) -> tuple: ...

    def load_state_dict(self, arrays: dict, meta: dict) -> None: ...

    def compute(self): ...


def batch(seed, B=4, L=3, T=7, d=6):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(L + 1, B, T, d, generator=g, dtype=torch.float64).cumsum(0)


def analysis():
    return AnalysisOptions(views=",".join(VIEWS), similarity="cka,frobenius", surrogate_seqs="all", pooling="none")


def logits_for(states):
    return states[-1, :, :, :5], torch.randint(0, 5, states.shape[1:3], generator=torch.Generator().manual_seed(1))


# name: (make(first_sequence), update(statistic, states))
CASES = {
    "FitAccumulator": (
        lambda first: FitAccumulator(views=[parse_view("top1pc"), parse_view("center")]),
        lambda acc, s: acc.update(s.flatten(1, 2)),
    ),
    "PooledCka": (lambda first: PooledCka(), lambda acc, s: acc.update(s.flatten(1, 2))),
    "LossAccumulator": (lambda first: LossAccumulator(), lambda acc, s: acc.update(*logits_for(s), None)),
    "SequenceUnits": (lambda first: SequenceUnits(VIEWS), lambda acc, s: acc.update(s)),
    "ViewAccumulator": (
        lambda first: ViewAccumulator(VIEWS, similarities=("cka", "frobenius")),
        lambda acc, s: acc.update(s),
    ),
    "CalibratedReferences": (
        lambda first: CalibratedReferences(VIEWS, similarities=("cka",), seed=3, first_sequence=first),
        lambda acc, s: acc.update(s),
    ),
    "MeasurementState": (
        lambda first: MeasurementState.new(analysis(), with_loss=True, first_sequence=first),
        lambda acc, s: acc.update(s, None, *logits_for(s)),
    ),
}


def computed(statistic):
    """What ``compute`` gives, as plain numbers: the per-unit statistics as their totals and unit counts."""
    return numbers(statistic.compute())


def numbers(value):
    if isinstance(value, dict):
        return {k: numbers(v) for k, v in value.items()}
    if isinstance(value, UnitStatistics):
        return {"units": value.units, **value.total()}
    return value


def saved_and_loaded(statistic):
    arrays, meta = statistic.state_dict()
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as loaded:
        return {k: loaded[k] for k in loaded.files}, json.loads(json.dumps(meta))


def assert_same(got, want):
    if want is None:
        assert got is None
    elif isinstance(want, dict):
        assert set(got) == set(want)
        for k in want:
            assert_same(got[k], want[k])
    elif isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_saving_and_continuing_gives_what_one_pass_gives(name):
    make, update = CASES[name]
    whole = make(0)
    for seed in (0, 1):
        update(whole, batch(seed))
    first = make(0)
    assert isinstance(first, Statistic)
    update(first, batch(0))
    resumed = make(0)
    resumed.load_state_dict(*saved_and_loaded(first))
    update(resumed, batch(1))
    assert_same(computed(resumed), computed(whole))


@pytest.mark.parametrize("name", list(CASES))
def test_merging_the_second_half_gives_what_one_pass_gives(name):
    make, update = CASES[name]
    whole = make(0)
    for seed in (0, 1):
        update(whole, batch(seed))
    first, second = make(0), make(4)
    update(first, batch(0))
    update(second, batch(1))
    first.merge(second)
    assert_same(computed(first), computed(whole))


@pytest.mark.parametrize("name", list(CASES))
def test_computing_changes_nothing_and_a_result_outlives_later_updates(name):
    make, update = CASES[name]
    once, twice = make(0), make(0)
    update(once, batch(0))
    update(twice, batch(0))
    early = computed(twice)
    assert_same(computed(twice), early)
    for statistic in (once, twice):
        update(statistic, batch(1))
    assert_same(computed(twice), computed(once))
    assert_same(early, computed(make_fed(make, update, 0)))


def make_fed(make, update, *seeds):
    statistic = make(0)
    for seed in seeds:
        update(statistic, batch(seed))
    return statistic


def test_what_each_statistic_computes():
    s = batch(0)
    fits = FitAccumulator(views=[parse_view("top1pc"), parse_view("center")])
    fits.update(s.flatten(1, 2))
    assert set(fits.compute()) == {"top1pc", "center"} and set(fits.compute()["top1pc"]) >= {"mean", "pcs", "eigengap"}
    views = make_fed(*CASES["ViewAccumulator"], 0, 1).compute()
    assert {v: set(by) for v, by in views.items()} == {v: {"cka", "frobenius"} for v in VIEWS}
    assert views["default"]["frobenius"].units == 8 and views["default"]["cka"].units == 4  # sequences; pairs
    loss = make_fed(*CASES["LossAccumulator"], 0).compute()
    assert loss["tokens"] == 4 * 6 and loss["perplexity"] == pytest.approx(np.exp(loss["mean"]))
    state = make_fed(*CASES["MeasurementState"], 0).compute()
    assert set(state) == {"views", "calibrated", "loss"} and set(state["calibrated"]) == {"structural", "matched"}
