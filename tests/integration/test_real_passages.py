"""Passage mode on the two embedded real models (SmolLM2-135M, Gemma-3-270m) against a naive numpy
computation, every paper view, the confound controls (drop-pos0, length and their compositions) and both
estimators, to 1e-6; equal-length windows on their real tokenizers (the pooling of a window is a
passage's: the first test covers it; tests/unit/numerics/test_confounds.py that length is default on equal lengths);
paragraphs cut on the text, the same for the byte tokenizer and both real ones."""

import pytest
from test_passage_mode import VIEWS, check_against_naive

from effdepth.data.passages import load_passages
from effdepth.data.tokenizers import byte_tokenizer
from effdepth.measurement import prepare
from effdepth.measurement.run import measure_passages
from effdepth.models.loading import load_tokenizer, locate_model
from effdepth.options import AnalysisOptions, LoadOptions, RunOptions

pytestmark = pytest.mark.slow

MODELS = ["smollm2-135m", "gemma-3-270m"]


@pytest.fixture(scope="module", params=MODELS)
def real(request):
    """The model and 16 Shakespeare passages of varying length (paragraphs packed up to 189 bytes of text, about
    48 tokens)."""
    return prepare(
        LoadOptions(model=request.param, corpus="shakespeare", seq_len=192, num_seqs=16, passage_split="paragraphs"),
        progress=False,
    )


def test_a_real_model_in_passage_mode_equals_the_naive_computation(real):
    assert len(set(real.tokens.lengths.tolist())) > 1  # the length view has something to regress out
    analysis = AnalysisOptions(views=VIEWS, states="hidden", bootstrap=0, batch_size=8, surrogate_seqs=0)
    result = measure_passages(real, analysis, run=RunOptions(progress=False))
    assert result.passages and result.default.sequences == 16
    check_against_naive(real, result, "hidden", tol=1e-6)
    confounds = result.extras["confounds"]
    for sim in ("cka", "cka-debiased"):
        for control in ("drop-pos0", "length"):  # the table's row is the view's own number
            assert confounds[sim][control]["deff"] == pytest.approx(result.similarities[sim][control].deff, abs=1e-6)


def test_windows_on_a_real_tokenizer_have_equal_lengths_and_special_tokens_only_at_their_start(real):
    tokenizer = real.lm.tokenizer
    windows = load_passages("shakespeare", tokenizer, max_len=64, num_passages=32, split="windows")
    assert set(windows.lengths.tolist()) == {64}
    prefix, suffix = windows.info["prefix_ids"], windows.info["suffix_ids"]
    assert prefix == [t for t in tokenizer("a")["input_ids"][: len(prefix)]]  # what the tokenizer adds itself
    special = set(tokenizer.all_special_ids)
    for i in range(windows.num_passages):
        tokens = windows.passage(i).tolist()
        assert tokens[: len(prefix)] == prefix and not special & set(tokens[len(prefix) : len(tokens) - len(suffix)])


def test_paragraphs_are_the_same_text_for_the_byte_tokenizer_and_both_real_ones():
    """The seeded draw is over passages cut on the text: every tokenizer gets the same spans, in --seq-len tokens."""
    tokenizers = [byte_tokenizer()] + [load_tokenizer(locate_model(name)) for name in MODELS]
    loaded = [
        load_passages("shakespeare", t, max_len=max_len, num_passages=256, split="paragraphs", bos=bos)
        for max_len in (64, 512)
        for t in tokenizers
        for bos in ("auto", "always")
    ]
    for first, others in ((loaded[0], loaded[1:6]), (loaded[6], loaded[7:])):
        for p in others:
            assert p.info["text_sha256"] == first.info["text_sha256"]
            assert all(p.identity[k].tolist() == first.identity[k].tolist() for k in first.identity)
            assert p.info["passages_available"] == first.info["passages_available"]
    for p in loaded:
        assert int(p.lengths.max()) <= p.info["max_len"] and p.num_passages == 256
    assert len({p.info["tokenizer_sha256"] for p in loaded}) == 3
    assert len({p.sha256 for p in loaded[:6:2]}) == 3  # three token contents, one text
