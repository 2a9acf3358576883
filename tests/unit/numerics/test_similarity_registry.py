"""The similarity registry: every spec is complete, the parser reads --similarity from the specs alone, the
similarities of the old token-level statistics are refused in one line, and a new spec is all a similarity
needs."""

import dataclasses

import numpy as np
import pytest

from effdepth.errors import EffdepthError
from effdepth.numerics import similarities
from effdepth.numerics.analysis import AnalysisPlan, analyse_pooled
from effdepth.numerics.hsic_plan import ESTIMATORS
from effdepth.numerics.similarities import (
    REMOVED,
    SIMILARITIES,
    fewest_samples,
    get_similarity,
    parse_similarities,
    specs,
)
from effdepth.options import AnalysisOptions, Options

# What each spec says, field by field: a change to a spec has to change this table too.
EXPECTED = {
    "cka": dict(min_samples=2, references=True, companions=("cka-debiased",), default=True, in_all=True),
    "cka-debiased": dict(min_samples=4, references=True, companions=(), default=False, in_all=True),
    "cosine": dict(min_samples=1, references=False, companions=(), default=False, in_all=True),
}


def test_the_registry_holds_exactly_the_expected_similarities():
    assert list(SIMILARITIES) == list(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_spec_says_what_the_table_says(name):
    spec = get_similarity(name)
    assert {k: getattr(spec, k) for k in EXPECTED[name]} == EXPECTED[name]
    assert spec.label and spec.axis_label
    assert spec.min_samples == 1 or spec.min_reason


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_spec_is_one_estimator_or_one_matrix(name):
    spec = get_similarity(name)
    assert (spec.estimator is None) != (spec.matrix is None)
    assert spec.estimator in (None, *ESTIMATORS)
    assert spec.kernel == spec.references  # matched references come from the HSIC of the updates


def test_companions_come_with_their_similarity_in_order():
    assert get_similarity("cka-debiased").companion_of == "cka"
    assert get_similarity("cka").companion_of is None
    assert parse_similarities("cka") == ("cka", "cka-debiased")
    assert parse_similarities("cosine,cka") == ("cosine", "cka", "cka-debiased")
    assert parse_similarities("cka-debiased,cka") == ("cka-debiased", "cka")


def test_the_parser_reads_defaults_all_and_repeats():
    everything = ("cka", "cka-debiased", "cosine")
    assert parse_similarities(None) == parse_similarities(()) == ("cka", "cka-debiased")
    assert parse_similarities("all") == parse_similarities(everything) == everything
    assert parse_similarities(" all , all ") == everything


@pytest.mark.parametrize("name", REMOVED)
def test_a_similarity_of_the_old_token_statistics_is_refused_saying_what_to_use(name):
    for build in (
        lambda: parse_similarities(f"cka,{name}"),
        lambda: Options.build(similarity=name),
        lambda: Options.build(similarity=name, pooling="none"),
    ):
        with pytest.raises(EffdepthError) as err:
            build()
        message = str(err.value)
        assert f"--similarity {name!r} is gone with the old token-level statistics" in message
        assert "--pooling none takes each passage's tokens as the samples" in message and "\n" not in message


def test_an_unknown_similarity_is_a_one_line_error():
    with pytest.raises(
        EffdepthError, match="must be one of cka, cka-debiased, cosine, a comma list of them, or all; got 'cos'"
    ):
        parse_similarities("cos")
    with pytest.raises(EffdepthError, match="got 'token'|'token' is gone"):
        get_similarity("token")


def test_the_options_and_the_analysis_use_the_same_parser():
    assert AnalysisOptions(similarity="all").similarity == parse_similarities("all")
    assert AnalysisOptions(similarity="all", pooling="none").similarity == parse_similarities("all")
    assert AnalysisPlan(similarities="cosine").similarities == ("cosine",)


def test_the_analysis_needs_the_largest_minimum_of_the_similarities():
    least = fewest_samples()
    assert least.name == "cka-debiased" and least.min_samples == max(s.min_samples for s in specs())
    rng = np.random.default_rng(0)
    few = np.cumsum(rng.normal(size=(3, least.min_samples - 1, 4)), axis=0)
    # Even a similarity that needs fewer is refused: stored vectors may be analysed again under any of them.
    with pytest.raises(EffdepthError, match=f"needs at least {least.min_samples} \\({least.min_reason}\\)"):
        analyse_pooled({"default": few}, AnalysisPlan(similarities="cosine", bootstrap=0))


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_matrix_is_one_on_the_diagonal_and_symmetric(name):
    pooled = {"default": np.cumsum(np.random.default_rng(2).normal(size=(5, 16, 6)), axis=0)}
    view = analyse_pooled(pooled, AnalysisPlan(similarities=(name,), bootstrap=0))["similarities"][name]["default"]
    sim = np.asarray(view["similarity"])
    np.testing.assert_allclose(np.diag(sim), 1.0, atol=1e-12)
    np.testing.assert_allclose(sim, sim.T, atol=1e-12)


@pytest.mark.parametrize("original", ["cosine", "cka-debiased"])
def test_a_registered_spec_is_all_a_new_similarity_needs(monkeypatch, original):
    # A copy of a spec under another name is analysed with no change anywhere else, and gives the
    # original's numbers, its calibrated references and intervals included.
    copy = dataclasses.replace(similarities.SIMILARITIES[original], name="copy")
    monkeypatch.setitem(similarities.SIMILARITIES, "copy", copy)
    pooled = {"default": np.cumsum(np.random.default_rng(1).normal(size=(4, 24, 6)), axis=0)}
    out = analyse_pooled(pooled, AnalysisPlan(similarities=(original, "copy"), bootstrap=20))["similarities"]
    got, want = out["copy"]["default"], out[original]["default"]
    assert got["definition"] == "copy"
    assert got["deff"] == want["deff"] and got["references"] == want["references"] and got["ci"] == want["ci"]
