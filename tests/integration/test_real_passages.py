"""Passage mode on the two embedded real models (SmolLM2-135M, Gemma-3-270m) against a naive numpy
computation, every paper view and both estimators, to 1e-6."""

import pytest

from effdepth.measure import prepare
from effdepth.options import AnalysisOptions, LoadOptions, RunOptions
from effdepth.passage_measure import measure_passages
from test_passage_mode import VIEWS, check_against_naive

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma-3-270m"])
def test_a_real_model_in_passage_mode_equals_the_naive_computation(name):
    prepared = prepare(LoadOptions(model=name, corpus="shakespeare", seq_len=48, num_seqs=16), progress=False,
                       passages=True)
    analysis = AnalysisOptions(views=VIEWS, states="hidden", bootstrap=0, batch_size=8)
    result = measure_passages(prepared, analysis, run=RunOptions(progress=False))
    assert result.passages and result.default.sequences == 16
    check_against_naive(prepared, result, "hidden", tol=1e-6)
