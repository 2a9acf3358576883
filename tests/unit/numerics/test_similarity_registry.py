"""The similarity registry of both modes: every spec is complete, each mode's parser reads --similarity
from the specs alone, and a new spec is all a similarity needs."""

import dataclasses

import numpy as np
import pytest
import torch

from effdepth.errors import EffdepthError
from effdepth.numerics import similarities
from effdepth.numerics.accumulate import STAT_KEYS, deff_statistics
from effdepth.numerics.hsic_resample import ESTIMATORS
from effdepth.numerics.metrics import similarity_matrix
from effdepth.numerics.passage_analysis import AnalysisPlan, analyse_pooled
from effdepth.numerics.similarities import (
    PASSAGE,
    SIMILARITIES,
    TOKEN,
    UNITS,
    fewest_samples,
    get_similarity,
    parse_similarities,
    specs,
    validate_similarities,
)
from effdepth.numerics.streams import ViewAccumulator
from effdepth.numerics.summary import view_summaries
from effdepth.options import AnalysisOptions, Options

# What each spec says, field by field: a change to a spec has to change this table too.
EXPECTED = {
    (TOKEN, "frobenius"): dict(
        unit="sequence",
        min_samples=1,
        references=True,
        calibrated=True,
        companions=(),
        distributable=True,
        memory_check=False,
        default=False,
        in_all=True,
        resampled=True,
    ),
    (TOKEN, "token"): dict(
        unit="sequence",
        min_samples=1,
        references=True,
        calibrated=True,
        companions=(),
        distributable=True,
        memory_check=False,
        default=False,
        in_all=True,
        resampled=True,
    ),
    (TOKEN, "cka"): dict(
        unit="pair",
        min_samples=4,
        references=True,
        calibrated=True,
        companions=(),
        distributable=True,
        memory_check=False,
        default=True,
        in_all=True,
        resampled=True,
    ),
    (TOKEN, "cka-full"): dict(
        unit="run",
        min_samples=4,
        references=True,
        calibrated=False,
        companions=(),
        distributable=False,
        memory_check=True,
        default=False,
        in_all=False,
        resampled=False,
    ),
    (PASSAGE, "cka"): dict(
        unit="block",
        min_samples=2,
        references=True,
        calibrated=True,
        companions=("cka-debiased",),
        distributable=False,
        memory_check=False,
        default=True,
        in_all=True,
        resampled=True,
    ),
    (PASSAGE, "cka-debiased"): dict(
        unit="block",
        min_samples=4,
        references=True,
        calibrated=True,
        companions=(),
        distributable=False,
        memory_check=False,
        default=False,
        in_all=True,
        resampled=True,
    ),
    (PASSAGE, "cosine"): dict(
        unit="block",
        min_samples=1,
        references=False,
        calibrated=True,
        companions=(),
        distributable=False,
        memory_check=False,
        default=False,
        in_all=True,
        resampled=True,
    ),
}
ALL_SPECS = [(mode, spec.name) for mode in (TOKEN, PASSAGE) for spec in specs(mode)]


def states(seed=0, L=4, B=6, T=8, d=5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(L + 1, B, T, d, generator=g, dtype=torch.float64).cumsum(0)


def test_the_registry_holds_exactly_the_expected_similarities():
    assert ALL_SPECS == list(EXPECTED)


@pytest.mark.parametrize("mode, name", ALL_SPECS)
def test_every_spec_says_what_the_table_says(mode, name):
    spec = get_similarity(name, mode)
    assert spec.name == name and spec.mode == mode and spec.label and spec.axis_label and spec.samples
    assert spec.unit in UNITS[mode]
    assert {field: getattr(spec, field) for field in EXPECTED[(mode, name)]} == EXPECTED[(mode, name)]
    assert bool(spec.min_reason) == (spec.min_samples > 1)  # a minimum above one says why
    assert spec.distributable == (not spec.not_distributed)


@pytest.mark.parametrize("name", list(SIMILARITIES))
def test_a_token_spec_reads_known_statistics(name):
    spec = get_similarity(name)
    assert set(spec.deff_keys) <= set(STAT_KEYS) and "n" in spec.deff_keys
    assert spec.additive == (spec.unit == "sequence") and spec.pooled == (spec.unit == "run")


@pytest.mark.parametrize("name", [s.name for s in specs(PASSAGE)])
def test_a_passage_spec_is_one_estimator_or_one_matrix(name):
    spec = get_similarity(name, PASSAGE)
    assert (spec.estimator is None) != (spec.matrix is None)
    assert spec.estimator in (None, *ESTIMATORS)
    assert spec.kernel == spec.references  # matched references come from the HSIC of the updates


def test_companions_come_with_their_similarity_in_order():
    assert get_similarity("cka-debiased", PASSAGE).companion_of == "cka"
    assert get_similarity("cka", PASSAGE).companion_of is None
    assert get_similarity("cka", TOKEN).companion_of is None  # token mode's cka brings nothing
    assert parse_similarities("cka", PASSAGE) == ("cka", "cka-debiased")
    assert parse_similarities("cosine,cka", PASSAGE) == ("cosine", "cka", "cka-debiased")
    assert parse_similarities("cka-debiased,cka", PASSAGE) == ("cka-debiased", "cka")
    assert parse_similarities("cka", TOKEN) == ("cka",)


@pytest.mark.parametrize(
    "mode, empty, everything",
    [
        (TOKEN, ("cka",), ("cka", "frobenius", "token")),
        (PASSAGE, ("cka", "cka-debiased"), ("cka", "cka-debiased", "cosine")),
    ],
)
def test_each_parser_reads_defaults_all_and_repeats(mode, empty, everything):
    assert parse_similarities(None, mode) == parse_similarities((), mode) == empty
    assert parse_similarities("all", mode) == parse_similarities(everything, mode) == everything
    assert parse_similarities(" all , all ", mode) == everything


@pytest.mark.parametrize(
    "mode, name, message",
    [
        (
            TOKEN,
            "cosine",
            "--similarity must be one of frobenius, token, cka, cka-full, a comma list of them, or all; "
            "got 'cosine', which is passage mode's (--pooling mean)",
        ),
        (TOKEN, "cka-debiased", "got 'cka-debiased', which is passage mode's (--pooling mean)"),
        (
            TOKEN,
            "cos",
            "--similarity must be one of frobenius, token, cka, cka-full, a comma list of them, or all; got 'cos'",
        ),
        (
            PASSAGE,
            "frobenius",
            "--similarity 'frobenius' is token mode's (--pooling none): passage mode measures cka, "
            "cka-debiased, cosine, a comma list of them, or all",
        ),
        (PASSAGE, "cka-full", "--similarity 'cka-full' is token mode's (--pooling none)"),
        (PASSAGE, "cos", "--similarity 'cos': passage mode measures cka, cka-debiased, cosine"),
    ],
)
def test_each_parser_names_the_mode_a_name_belongs_to(mode, name, message):
    with pytest.raises(EffdepthError) as err:
        parse_similarities(f"cka,{name}", mode)
    assert message in str(err.value) and "\n" not in str(err.value)
    if name == "cos":
        assert "mode's" not in str(err.value)


def test_the_options_and_the_accumulator_use_the_same_parsers():
    assert AnalysisOptions(similarity="all").similarity == parse_similarities("all", PASSAGE)
    assert AnalysisOptions(similarity="all", pooling="none").similarity == parse_similarities("all", TOKEN)
    assert AnalysisPlan(similarities="cosine").similarities == ("cosine",)
    assert ViewAccumulator(["default"], similarities="all").similarities == parse_similarities("all", TOKEN)
    assert validate_similarities(()) == ()  # the additive statistics alone
    for build in (
        lambda: Options.build(similarity="token"),
        lambda: ViewAccumulator(["default"], similarities="cosine"),
    ):
        with pytest.raises(EffdepthError, match="mode's \\(--pooling"):
            build()


def test_an_unknown_similarity_is_a_one_line_error():
    with pytest.raises(
        EffdepthError,
        match="unknown similarity 'cosine'; choose from frobenius, token, cka, cka-full "
        r"\(cosine is passage mode's: --pooling mean\)",
    ):
        get_similarity("cosine")
    with pytest.raises(EffdepthError, match="unknown similarity 'token'; choose from cka, cka-debiased, cosine"):
        get_similarity("token", PASSAGE)


def test_passage_mode_needs_the_largest_minimum_of_its_similarities():
    least = fewest_samples(PASSAGE)
    assert least.name == "cka-debiased" and least.min_samples == max(s.min_samples for s in specs(PASSAGE))
    rng = np.random.default_rng(0)
    few = np.cumsum(rng.normal(size=(3, least.min_samples - 1, 4)), axis=0)
    # Even a similarity that needs fewer is refused: stored vectors may be analysed again under any of them.
    with pytest.raises(EffdepthError, match=f"needs at least {least.min_samples} \\({least.min_reason}\\)"):
        analyse_pooled({"default": few}, AnalysisPlan(similarities="cosine", bootstrap=0))


def test_the_token_kernel_minimum_refuses_short_sequences_before_loading():
    spec = get_similarity("cka")
    with pytest.raises(EffdepthError, match=f"and cka needs {spec.min_samples} \\({spec.min_reason}\\)"):
        Options.build(pooling="none", corpus="shakespeare", seq_len=spec.min_samples - 1)
    Options.build(pooling="none", corpus="shakespeare", seq_len=spec.min_samples - 1, similarity="frobenius")


@pytest.mark.parametrize("similarity", ["cosine", "cka-debiased", "cosine,cka"])
def test_a_passage_similarity_on_a_named_corpus_is_not_checked_against_token_mode(similarity):
    """The token kernels' length check runs before loading only in token mode: passage mode's names pass."""
    assert Options.build(similarity=similarity, corpus="shakespeare").analysis.similarity[0] == similarity.split(",")[0]


@pytest.mark.parametrize("name", list(SIMILARITIES))
def test_each_matrix_is_one_on_the_diagonal_and_symmetric(name):
    acc = ViewAccumulator(["default"], similarities=(name,))
    acc.update(states())
    totals = acc.unit_statistics("default", name).total()
    sim = similarity_matrix(totals, name, include_embedding=False)
    np.testing.assert_allclose(np.diag(sim), 1.0)
    np.testing.assert_allclose(sim, sim.T, atol=1e-12)


def test_a_registered_token_spec_is_all_a_new_similarity_needs(monkeypatch):
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


@pytest.mark.parametrize("original", ["cosine", "cka-debiased"])
def test_a_registered_passage_spec_is_all_a_new_similarity_needs(monkeypatch, original):
    # A copy of a passage-mode spec under another name is analysed with no change anywhere else, and
    # gives the original's numbers, its calibrated references and intervals included.
    copy = dataclasses.replace(similarities.PASSAGE_SIMILARITIES[original], name="copy")
    monkeypatch.setitem(similarities.PASSAGE_SIMILARITIES, "copy", copy)
    pooled = {"default": np.cumsum(np.random.default_rng(1).normal(size=(4, 24, 6)), axis=0)}
    out = analyse_pooled(pooled, AnalysisPlan(similarities=(original, "copy"), bootstrap=20))["similarities"]
    got, want = out["copy"]["default"], out[original]["default"]
    assert got["definition"] == "copy"
    assert got["deff"] == want["deff"] and got["references"] == want["references"] and got["ci"] == want["ci"]
